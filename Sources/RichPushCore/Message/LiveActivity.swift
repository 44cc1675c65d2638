import Foundation

/// What a message does to a Live Activity: start one (push-to-start), update it, or end it.
///
/// A message with a live activity is sent with `apns-push-type: liveactivity` to the topic
/// `<bundle id>.push-type.liveactivity`, and its fields become the `aps` keys ActivityKit reads
/// (`event`, `timestamp`, `content-state`, `attributes-type`, `attributes`, `stale-date`, `dismissal-date`,
/// `relevance-score`, `input-push-token`, `input-push-channel`). See `docs/live.md`.
///
/// ```swift
/// var m = PushMessage(alert: .init(title: "Goal!", body: "2 – 1"))
/// m.liveActivity = LiveActivity(event: .update, contentState: ["home": 2, "away": 1])
/// ```
public struct LiveActivity: Sendable, Hashable {
    public enum Event: String, Sendable, Hashable, CaseIterable { case start, update, end }

    public var event: Event
    /// The activity's dynamic content; it must decode into the app's `ContentState`.
    public var contentState: [String: JSONValue]?
    /// push-to-start: the name of the app's `ActivityAttributes` type.
    public var attributesType: String?
    /// push-to-start: the activity's static attributes.
    public var attributes: [String: JSONValue]?
    /// When the system marks the activity out of date, in seconds since 1970.
    public var staleDate: Int64?
    /// When an ended activity leaves the Lock Screen, in seconds since 1970 (end only).
    public var dismissalDate: Int64?
    /// Which of the app's activities leads in the Dynamic Island (any number; the highest wins).
    public var relevanceScore: Double?
    /// When the state was made, in seconds since 1970; the device ignores a state older than one it has. A
    /// server sets it when it accepts the message, so that retries keep their place.
    public var timestamp: Int64?
    /// push-to-start (iOS 18): ask the started activity for an update token.
    public var inputPushToken: Bool
    /// push-to-start (iOS 18): subscribe the started activity to this broadcast channel.
    public var inputPushChannel: String?

    public init(
        event: Event,
        contentState: [String: JSONValue]? = nil,
        attributesType: String? = nil,
        attributes: [String: JSONValue]? = nil,
        staleDate: Int64? = nil,
        dismissalDate: Int64? = nil,
        relevanceScore: Double? = nil,
        timestamp: Int64? = nil,
        inputPushToken: Bool = false,
        inputPushChannel: String? = nil
    ) {
        self.event = event
        self.contentState = contentState
        self.attributesType = attributesType
        self.attributes = attributes
        self.staleDate = staleDate
        self.dismissalDate = dismissalDate
        self.relevanceScore = relevanceScore
        self.timestamp = timestamp
        self.inputPushToken = inputPushToken
        self.inputPushChannel = inputPushChannel
    }

    /// The key under which a message's chart travels inside `content-state`, in the same form as in `rp.c`.
    public static let chartKey = "chart"
    /// The Android notification's tag when the message has no `collapse_id`: each state replaces the last.
    public static let defaultAndroidTag = "richpush-live"
    /// A Live Activity is active for at most eight hours; a timestamp further ahead than this is a mistake.
    public static let maxFutureSeconds: Int64 = 8 * 3600
    /// ActivityKit refuses a content state over 4 KB.
    public static let maxContentStateBytes = 4096

    static let knownKeys: Set<String> = [
        "event", "content_state", "attributes_type", "attributes", "stale_date", "dismissal_date",
        "relevance_score", "timestamp", "input_push_token", "input_push_channel",
    ]

    /// Reads the `live_activity` object; problems go into the reader's report.
    static func read(_ o: [String: JSONValue], into r: inout FieldReader) -> LiveActivity? {
        let at = "live_activity"
        r.rejectUnknown(o, known: knownKeys, at: at)
        var event: Event?
        if let e = r.string(o, "event", at: at) {
            event = Event(rawValue: e)
            if event == nil { r.report.add("\(at).event", "enum", "must be start, update or end") }
        } else if o["event"] == nil {
            r.report.add("\(at).event", "required", "a live activity message needs an event: start, update or end")
        }
        var a = LiveActivity(event: event ?? .update)
        a.contentState = r.object(o["content_state"], at: "\(at).content_state")
        a.attributesType = r.string(o, "attributes_type", at: at)
        a.attributes = r.object(o["attributes"], at: "\(at).attributes")
        a.staleDate = r.int(o, "stale_date", at: at)
        a.dismissalDate = r.int(o, "dismissal_date", at: at)
        a.relevanceScore = r.double(o, "relevance_score", at: at)
        a.timestamp = r.int(o, "timestamp", at: at)
        a.inputPushToken = r.bool(o, "input_push_token", at: at) ?? false
        a.inputPushChannel = r.string(o, "input_push_channel", at: at)
        return event == nil ? nil : a
    }

    /// The `live_activity` object as ``read(_:into:)`` reads it.
    public var json: JSONValue {
        var o: [String: JSONValue] = ["event": .string(event.rawValue)]
        if let contentState { o["content_state"] = .object(contentState) }
        if let attributesType { o["attributes_type"] = .string(attributesType) }
        if let attributes { o["attributes"] = .object(attributes) }
        if let staleDate { o["stale_date"] = .int(staleDate) }
        if let dismissalDate { o["dismissal_date"] = .int(dismissalDate) }
        if let relevanceScore { o["relevance_score"] = .double(relevanceScore) }
        if let timestamp { o["timestamp"] = .int(timestamp) }
        if inputPushToken { o["input_push_token"] = .bool(true) }
        if let inputPushChannel { o["input_push_channel"] = .string(inputPushChannel) }
        return .object(o)
    }

    /// The content state as sent: the given one, with the message's chart under ``chartKey``.
    public func contentState(chart: ChartSpec?) -> [String: JSONValue]? {
        guard let chart else { return contentState }
        var state = contentState ?? [:]
        state[Self.chartKey] = chart.json
        return state
    }

    /// The activity's `aps` keys (without the alert and sound, which the message's own fields give).
    func apsFields(chart: ChartSpec?, now: Int64) -> [String: JSONValue] {
        var aps: [String: JSONValue] = [
            "event": .string(event.rawValue),
            "timestamp": .int(timestamp ?? now),
        ]
        if let state = contentState(chart: chart) { aps["content-state"] = .object(state) }
        if let attributesType { aps["attributes-type"] = .string(attributesType) }
        if let attributes { aps["attributes"] = .object(attributes) }
        if let staleDate { aps["stale-date"] = .int(staleDate) }
        if let dismissalDate { aps["dismissal-date"] = .int(dismissalDate) }
        if let relevanceScore { aps["relevance-score"] = .double(relevanceScore) }
        if inputPushToken { aps["input-push-token"] = 1 }
        if let inputPushChannel { aps["input-push-channel"] = .string(inputPushChannel) }
        return aps
    }

    /// Every rule this activity breaks, given the message around it.
    func issues(in m: PushMessage, now: Int64) -> ValidationReport {
        var r = ValidationReport()
        checkMessage(m, &r)
        checkEvent(m, &r)
        checkValues(m, now: now, &r)
        return r
    }

    /// What the message around an activity may not carry (it is drawn by ActivityKit, not shown as an alert).
    private func checkMessage(_ m: PushMessage, _ r: inout ValidationReport) {
        if m.pushType != .liveactivity {
            r.add(
                "push_type",
                "live-activity-push-type",
                "a live activity message is sent with push type 'liveactivity', not '\(m.pushType.rawValue)'"
            )
        }
        if m.priority == .low {
            r.add(
                "priority",
                "live-activity-priority",
                "live activity pushes are sent with priority high (10) or normal (5)"
            )
        }
        if !m.media.isEmpty {
            r.add(
                "media",
                "live-activity-media",
                "a live activity shows no attachments: put what it draws in content_state"
            )
        }
        if m.contentOverride != nil {
            r.add("content_override", "live-activity-override", "no service extension runs for a live activity")
        }
        if m.relevanceScore != nil {
            r.add(
                "relevance_score",
                "live-activity-relevance",
                "give a live activity's relevance as live_activity.relevance_score"
            )
        }
        if m.contentAvailable {
            r.add(
                "content_available",
                "live-activity-content-available",
                "a live activity push cannot be a background push"
            )
        }
    }

    /// What each event needs, and what only a start may carry.
    private func checkEvent(_ m: PushMessage, _ r: inout ValidationReport) {
        let at = "live_activity"
        switch event {
        case .start:
            if attributesType?.isEmpty ?? true {
                r.add(
                    "\(at).attributes_type",
                    "start-needs-attributes-type",
                    "a start names the app's ActivityAttributes type"
                )
            }
            if attributes == nil {
                r.add(
                    "\(at).attributes",
                    "start-needs-attributes",
                    "a start carries the activity's static attributes (an object, may be empty)"
                )
            }
            if contentState == nil && m.chart == nil {
                r.add(
                    "\(at).content_state",
                    "needs-content-state",
                    "a start carries the activity's first content_state"
                )
            }
            if !m.alert.isVisible {
                r.add("alert", "start-needs-alert", "a push-to-start needs an alert with a title and body")
            }
            if inputPushToken && inputPushChannel != nil {
                r.add(
                    "\(at).input_push_channel",
                    "token-or-channel",
                    "an activity gets updates by its token or by a channel, not both"
                )
            }
        case .update, .end:
            if contentState == nil && m.chart == nil && event == .update {
                r.add("\(at).content_state", "needs-content-state", "an update carries the new content_state")
            }
            if attributesType != nil || attributes != nil {
                r.add("\(at).attributes", "start-only", "attributes and attributes_type are for a start only")
            }
            if inputPushToken || inputPushChannel != nil {
                r.add(
                    "\(at).input_push_token",
                    "start-only",
                    "input_push_token and input_push_channel are for a start only"
                )
            }
        }
    }

    /// The dates, the relevance score, the channel and the content state's size.
    private func checkValues(_ m: PushMessage, now: Int64, _ r: inout ValidationReport) {
        let at = "live_activity"
        if dismissalDate != nil && event != .end {
            r.add("\(at).dismissal_date", "end-only", "dismissal_date is for an end event only")
        }
        func positive(_ v: Int64?, _ key: String) {
            if let v, v <= 0 { r.add("\(at).\(key)", "range", "must be a time in seconds since 1970, above 0") }
        }
        positive(timestamp, "timestamp")
        positive(staleDate, "stale_date")
        positive(dismissalDate, "dismissal_date")
        if let t = timestamp, t > now + Self.maxFutureSeconds {
            r.add(
                "\(at).timestamp",
                "future",
                "is \(t - now) s ahead; a live activity lasts at most 8 hours, so the device would drop it"
            )
        }
        if let s = relevanceScore, !s.isFinite || s < 0 {
            r.add("\(at).relevance_score", "range", "must be a number of 0 or more")
        }
        if let c = inputPushChannel, c.isEmpty {
            r.add("\(at).input_push_channel", "empty", "must not be empty")
        }
        if let state = contentState(chart: m.chart) {
            let bytes = JSONValue.object(state).serialized().count
            if bytes > Self.maxContentStateBytes {
                r.add(
                    "\(at).content_state",
                    "max-bytes",
                    "is \(bytes) bytes with the chart; ActivityKit allows \(Self.maxContentStateBytes)"
                )
            }
        }
    }
}
