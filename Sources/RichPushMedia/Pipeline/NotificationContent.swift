import RichPushCore

/// The text of a notification, as the device shows it.
public struct NotificationText: Sendable, Hashable {
    public var title: String
    public var subtitle: String
    public var body: String

    public init(title: String = "", subtitle: String = "", body: String = "") {
        self.title = title
        self.subtitle = subtitle
        self.body = body
    }

    /// The alert of an APNs payload (`aps.alert` as a string or a dictionary).
    public init(aps payload: JSONValue) {
        self.init()
        switch payload["aps"]?["alert"] {
        case .string(let body)?: self.body = body
        case .object(let a)?:
            title = a["title"]?.stringValue ?? ""
            subtitle = a["subtitle"]?.stringValue ?? ""
            body = a["body"]?.stringValue ?? ""
        default: break
        }
    }

    func applying(_ override: PushMessage.ContentOverride?) -> NotificationText {
        guard let o = override else { return self }
        return NotificationText(title: o.title ?? title, subtitle: o.subtitle ?? subtitle, body: o.body ?? body)
    }
}

/// What the extension hands to the system: the text, the staged attachments, and a report of what happened.
public struct EnrichedNotification: Sendable {
    public var text: NotificationText
    public var attachments: [StagedAttachment]
    public var report: DeliveryReport
}
