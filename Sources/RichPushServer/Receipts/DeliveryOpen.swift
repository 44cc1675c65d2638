import Foundation
import RichPushCore

/// What a person did with one delivered notification, as the app reports it: opened it (with the action chosen,
/// when it was one of the notification's buttons) or dismissed it. One per delivery; the first stands, as a
/// notification is gone from the screen once either happens.
public struct DeliveryOpen: Sendable, Hashable {
    public enum Event: String, Sendable, Hashable, CaseIterable {
        case opened, dismissed
    }
    public var deliveryID: Int64
    public var notificationID: String
    public var event: Event
    /// The action's identifier (a button of the notification's category), nil for the notification itself.
    public var action: String?
    /// The deep link the open led to, as the app followed it (the notification's own, or one an action chose).
    public var link: String?
    public var at: Date

    public init(
        deliveryID: Int64,
        notificationID: String,
        event: Event,
        action: String? = nil,
        link: String? = nil,
        at: Date = Date()
    ) {
        self.deliveryID = deliveryID
        self.notificationID = notificationID
        self.event = event
        self.action = action
        self.link = link
        self.at = at
    }

    /// The longest action identifier kept.
    public static let maxActionBytes = 64
    /// The longest deep link kept, in characters: a longer one is refused rather than cut (a cut link counts apart).
    public static let maxLinkLength = 1024

    /// The largest body taken: room for every field at its longest with every character written as JSON's
    /// longest escape (12 bytes: a surrogate pair), so that a body the schema allows is never refused for its size.
    static func maxBodyBytes(byApp: Bool) -> Int {
        let characters = maxActionBytes + maxLinkLength + (byApp ? 4096 : 200) + 16
        return characters * 12 + 256
    }

    /// A report's fields once read.
    struct Report {
        var event: Event
        var action: String?
        var link: String?
        var token: String?
    }

    /// A report's body: `{"event": "opened"|"dismissed", "action": "…", "link": "…", "device": "…"}` at a receipt
    /// address, or with `"token"` (the device's, required) instead of `device` on the app's keyed route; every
    /// problem named. `link` is the deep link the open led to: an absolute URL (a scheme, then anything).
    static func read(_ body: JSONValue, byApp: Bool) throws(APIError) -> Report {
        guard case .object(let o) = body else { throw APIError(.invalid, "the body must be an object") }
        var r = FieldReader(strict: true, refusesNUL: true)
        r.rejectUnknown(o, known: ["event", "action", "link", byApp ? "token" : "device"], at: "")
        let token = byApp ? r.text(o, "token", at: "", required: true, lengths: 1...4096) : nil
        let event = r.text(o, "event", at: "", required: true, lengths: 1...16).flatMap { e -> Event? in
            guard let v = Event(rawValue: e) else {
                r.report.add("event", "enum", "event is opened or dismissed")
                return nil
            }
            return v
        }
        let action = o["action"] == nil ? nil : r.text(o, "action", at: "", lengths: 1...maxActionBytes)
        if !byApp && o["device"] != nil { _ = r.text(o, "device", at: "", lengths: 1...200) }
        let link = o["link"] == nil ? nil : r.text(o, "link", at: "", lengths: 1...maxLinkLength)
        if let link, !Self.isAbsoluteURL(link) {
            r.report.add("link", "format", "a deep link is an absolute URL: a scheme, a colon, then the rest")
        }
        if action != nil && event == .dismissed {
            r.report.add("action", "dismissed-action", "a dismissal has no action")
        }
        if link != nil && event == .dismissed {
            r.report.add("link", "dismissed-link", "a dismissal follows no link")
        }
        guard r.report.isValid, let event else {
            throw APIError(.invalid, "the report is not valid", issues: r.report.errors)
        }
        return Report(event: event, action: action, link: link, token: token)
    }

    /// A scheme (a letter, then letters, digits, `+`, `-` or `.`), a colon, at least one character after it, and
    /// no control characters or spaces anywhere (RFC 3986's absolute-URI, loosely: the rest is not parsed).
    static func isAbsoluteURL(_ s: String) -> Bool {
        let bytes = Array(s.utf8)
        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")), colon > 0, colon < bytes.count - 1 else {
            return false
        }
        func isLetter(_ b: UInt8) -> Bool { (b | 0x20) >= UInt8(ascii: "a") && (b | 0x20) <= UInt8(ascii: "z") }
        guard isLetter(bytes[0]) else { return false }
        for b in bytes[1..<colon] {
            let digit = b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9")
            guard isLetter(b) || digit || b == UInt8(ascii: "+") || b == UInt8(ascii: "-") || b == UInt8(ascii: ".")
            else { return false }
        }
        return !bytes.contains { $0 <= 0x20 || $0 == 0x7F }
    }
}

/// A notification's opens in sum.
public struct OpenSummary: Sendable, Hashable {
    public var opened = 0
    public var dismissed = 0
    /// Opens by the action chosen (`default` for the notification itself); at most ``maxActions``, the most
    /// chosen first, the rest counted under `other`.
    public var actions: [String: Int] = [:]
    /// Opens by the deep link they led to (opens that followed none are not counted here); at most ``maxActions``,
    /// the most followed first, the rest under `other`.
    public var links: [String: Int] = [:]

    public static let maxActions = 20

    public init(opened: Int = 0, dismissed: Int = 0, actions: [String: Int] = [:], links: [String: Int] = [:]) {
        self.opened = opened
        self.dismissed = dismissed
        self.actions = actions
        self.links = links
    }

    /// From rows of (event, action or "", count), however many distinct actions they hold, and the links: the
    /// most followed with their counts (at most ``maxActions`` read) and how many opens named a link in all, so that
    /// a send whose every open followed a link of its own (one per person) reads 20 rows, not one per open.
    init(rows: [(String, String, Int)], topLinks: [(String, Int)] = [], linked: Int = 0) {
        var byAction: [String: Int] = [:]
        for (event, action, n) in rows {
            if event == DeliveryOpen.Event.dismissed.rawValue {
                dismissed += n
            } else {
                opened += n
                byAction[action.isEmpty ? "default" : action, default: 0] += n
            }
        }
        actions = Self.top(byAction)
        for (link, n) in topLinks.prefix(Self.maxActions) { links[link, default: 0] += n }
        let rest = linked - links.values.reduce(0, +)
        if rest > 0 { links["other", default: 0] += rest }
    }

    /// The ``maxActions`` largest counts (ties by name), the rest summed under `other`.
    static func top(_ counts: [String: Int]) -> [String: Int] {
        var kept: [String: Int] = [:]
        for (i, (name, n)) in counts.sorted(by: { ($0.value, $1.key) > ($1.value, $0.key) }).enumerated() {
            kept[i < maxActions ? name : "other", default: 0] += n
        }
        return kept
    }

    public var json: JSONValue {
        [
            "opened": .int(Int64(opened)), "dismissed": .int(Int64(dismissed)),
            "actions": .object(actions.mapValues { .int(Int64($0)) }),
            "links": .object(links.mapValues { .int(Int64($0)) }),
        ]
    }
}

/// A notification's deliveries grouped by state, the reason recorded, and whether a request to the service was made.
public struct DeliveryBreakdown: Sendable, Hashable {
    public var state: DeliveryState
    public var reason: String
    public var tried: Bool
    public var count: Int

    public init(state: DeliveryState, reason: String, tried: Bool, count: Int) {
        self.state = state
        self.reason = reason
        self.tried = tried
        self.count = count
    }
}
