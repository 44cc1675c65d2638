import Foundation

/// Whom one FCM `messages:send` call goes to: exactly one of these.
public enum FCMTarget: Sendable, Hashable {
    case token(String)
    case topic(String)
    case condition(String)

    var field: (String, String) {
        switch self {
        case .token(let t): return ("token", t)
        case .topic(let t): return ("topic", t.hasPrefix("/topics/") ? String(t.dropFirst(8)) : t)
        case .condition(let c): return ("condition", c)
        }
    }

    /// As a server's delivery stores it and `richpush send` reports it: the token itself, `topic:NAME` or
    /// `condition:EXPRESSION`.
    public var storedForm: String {
        switch self {
        case .token(let t): return t
        case .topic(let t): return "topic:" + t
        case .condition(let c): return "condition:" + c
        }
    }

    /// Reads ``storedForm`` back.
    public init(storedForm s: String) {
        if s.hasPrefix("topic:") {
            self = .topic(String(s.dropFirst("topic:".count)))
        } else if s.hasPrefix("condition:") {
            self = .condition(String(s.dropFirst("condition:".count)))
        } else {
            self = .token(s)
        }
    }

    /// FCM allows 2048 bytes for messages to topics (a condition is a topic message too), 4096 otherwise.
    public var payloadLimit: Int {
        if case .token = self { return 4096 }
        return 2048
    }
}

/// One FCM HTTP v1 request: path and body.
public struct FCMRequest: Sendable, Hashable {
    /// `/v1/projects/<project>/messages:send`.
    public var path: String
    public var body: JSONValue
    public var bodyBytes: [UInt8]
    /// Bytes counted against FCM's payload limit: the serialized `message` without its target field.
    public var payloadSize: Int
}

/// Turns a ``PushMessage`` into the FCM HTTP v1 request for one target.
///
/// The same image goes everywhere a platform looks for it: `notification.image`,
/// `android.notification.image`, `apns.fcm_options.image` and `webpush.headers.image`; our `rp` key rides
/// inside `apns.payload` so that the device library reads FCM-delivered pushes exactly like direct ones.
///
/// ```swift
/// let request = FCMRenderer(projectID: "my-project").render(message, to: .topic("industry-tech"))
/// ```
public struct FCMRenderer: Sendable {
    public var projectID: String
    public var now: @Sendable () -> Date
    /// A PNG of the message's chart, rendered and hosted by the server, used as the image where no
    /// platform can draw the chart itself (Android, the web).
    public var chartImageURL: String?

    public init(projectID: String, chartImageURL: String? = nil, now: @escaping @Sendable () -> Date = { Date() }) {
        self.projectID = projectID
        self.chartImageURL = chartImageURL
        self.now = now
    }

    public func render(_ m: PushMessage, to target: FCMTarget, validateOnly: Bool = false) -> FCMRequest {
        var message = messageBody(for: m)
        let withoutTarget = JSONValue.object(message).serializedSize
        message[target.field.0] = .string(target.field.1)
        var root: [String: JSONValue] = ["message": .object(message)]
        if validateOnly { root["validate_only"] = true }
        let body = JSONValue.object(root)
        return FCMRequest(
            path: "/v1/projects/\(projectID)/messages:send",
            body: body,
            bodyBytes: body.serialized(),
            payloadSize: withoutTarget
        )
    }

    /// The image Android and the web show: the first media that Android can display, else the chart's PNG.
    public func androidImage(for m: PushMessage) -> String? {
        for media in m.media {
            if let t = MediaType(urlString: media.url) ?? media.mimeType.flatMap(MediaType.init(mimeType:)) {
                if t.isAndroidImage && t != .gif { return media.url }
            } else if media.kind == .image || media.kind == nil {
                return media.url  // no type in the URL: an image by the sender's word or by default
            }
        }
        return chartImageURL ?? (m.chart != nil ? m.chartImageURL : nil)
    }

    func messageBody(for m: PushMessage) -> [String: JSONValue] {
        var msg: [String: JSONValue] = [:]
        let androidImage = androidImage(for: m)
        let appleImage = m.media.first?.url

        var notification: [String: JSONValue] = [:]
        if let t = m.alert.title { notification["title"] = .string(t) }
        if let b = m.alert.body { notification["body"] = .string(b) }
        if let image = androidImage ?? appleImage { notification["image"] = .string(image) }
        if !notification.isEmpty { msg["notification"] = .object(notification) }

        var data: [String: JSONValue] = [:]
        for (k, v) in m.data {
            if case .string(let s) = v { data[k] = .string(s) } else { data[k] = .string(v.jsonString) }
        }
        if !data.isEmpty { msg["data"] = .object(data) }

        let android = androidConfig(for: m, image: androidImage)
        if !android.isEmpty { msg["android"] = .object(android) }

        let apns = apnsConfig(for: m, image: appleImage)
        if !apns.isEmpty { msg["apns"] = .object(apns) }

        let web = webpushConfig(for: m, image: androidImage)
        if !web.isEmpty { msg["webpush"] = .object(web) }

        if let label = m.analyticsLabel { msg["fcm_options"] = ["analytics_label": .string(label)] }
        return msg
    }

    /// `android`: the notification's Android options (`image`: the first Android can show, else the chart's PNG).
    func androidConfig(for m: PushMessage, image: String?) -> [String: JSONValue] {
        var android: [String: JSONValue] = [:]
        var an: [String: JSONValue] = [:]
        if let image { an["image"] = .string(image) }
        if let s = m.sound { an["sound"] = .string(s.name) }
        if let b = m.badge { an["notification_count"] = .int(Int64(b)) }
        if let k = m.alert.titleLocKey { an["title_loc_key"] = .string(k) }
        if let a = m.alert.titleLocArgs { an["title_loc_args"] = .array(a.map(JSONValue.string)) }
        if let k = m.alert.locKey { an["body_loc_key"] = .string(k) }
        if let a = m.alert.locArgs { an["body_loc_args"] = .array(a.map(JSONValue.string)) }
        // A newer notification with the same collapse id replaces the one shown: on Android that is the tag
        // (collapse_key only replaces one still waiting at FCM). A live activity is one notification, replaced by
        // each state, tagged by default.
        if let tag = m.collapseID ?? (m.liveActivity != nil ? LiveActivity.defaultAndroidTag : nil) {
            an["tag"] = .string(tag)
        }
        if let c = m.androidChannelID { an["channel_id"] = .string(c) }
        if !an.isEmpty { android["notification"] = .object(an) }
        if let p = m.priority { android["priority"] = .string(p == .high ? "HIGH" : "NORMAL") }
        if let ttl = ttlSeconds(for: m) { android["ttl"] = .string("\(ttl)s") }
        if let c = m.collapseID { android["collapse_key"] = .string(c) }
        return android
    }

    /// `apns`: the headers, the payload and the options of an Apple device reached through FCM (`image`: the first
    /// media, any kind).
    func apnsConfig(for m: PushMessage, image: String?) -> [String: JSONValue] {
        var apns: [String: JSONValue] = [:]
        let apnsHeaders = APNsRenderer(bundleID: "", now: now).headers(for: m)
            .filter {
                $0.name != "apns-topic" && ($0.name != "apns-push-type" || m.pushType != .alert) && $0.name != "apns-id"
            }
        if !apnsHeaders.isEmpty {
            apns["headers"] = .object(
                Dictionary(apnsHeaders.map { ($0.name, JSONValue.string($0.value)) }, uniquingKeysWith: { $1 })
            )
        }
        var payload: [String: JSONValue] = [:]
        var aps = APNsRenderer.aps(for: m, now: now())
        // FCM builds the alert from `notification`; an `aps.alert` here would replace it, so only send one when
        // it carries what `notification` cannot (subtitle, localization keys).
        let alert = APNsRenderer.alertDictionary(m.alert)
        if alert.keys.allSatisfy({ $0 == "title" || $0 == "body" }) { aps["alert"] = nil }
        if !aps.isEmpty { payload["aps"] = .object(aps) }
        if let rp = RichPushKey.encode(m) { payload[RichPushKey.name] = rp }
        if !payload.isEmpty { apns["payload"] = .object(payload) }
        var apnsOptions: [String: JSONValue] = [:]
        if let image { apnsOptions["image"] = .string(image) }
        if let label = m.analyticsLabel { apnsOptions["analytics_label"] = .string(label) }
        if !apnsOptions.isEmpty { apns["fcm_options"] = .object(apnsOptions) }
        return apns
    }

    /// `webpush`: what a browser reached through FCM gets.
    func webpushConfig(for m: PushMessage, image: String?) -> [String: JSONValue] {
        var web: [String: JSONValue] = [:]
        var webHeaders: [String: JSONValue] = [:]
        if let image { webHeaders["image"] = .string(image) }
        if let ttl = ttlSeconds(for: m) { webHeaders["TTL"] = .string(String(ttl)) }
        if let p = m.priority { webHeaders["Urgency"] = .string(p == .high ? "high" : p == .normal ? "normal" : "low") }
        if !webHeaders.isEmpty { web["headers"] = .object(webHeaders) }
        if let link = m.deepLink, link.lowercased().hasPrefix("https://") {
            web["fcm_options"] = ["link": .string(link)]
        }
        return web
    }

    /// Time to live in whole seconds, from `ttl` or from an absolute `expiration`.
    public func ttlSeconds(for m: PushMessage) -> Int64? {
        if let ttl = m.ttl { return Int64(ttl) }
        if let e = m.expiration {
            // The expiration is the sender's number: an extreme one must not overflow (it is refused by the
            // validator, but a request can be rendered to show it).
            let (left, overflow) = e.subtractingReportingOverflow(Int64(now().timeIntervalSince1970))
            return overflow ? (e < 0 ? 0 : Int64.max) : max(0, left)
        }
        return nil
    }
}
