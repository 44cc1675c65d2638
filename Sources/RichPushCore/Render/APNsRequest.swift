import Foundation

/// Everything of one APNs HTTP/2 request except the transport: path, headers and body bytes.
public struct APNsRequest: Sendable, Hashable {
    /// `/3/device/<token>`.
    public var path: String
    /// Header names in lowercase, in a stable order.
    public var headers: [(name: String, value: String)]
    public var payload: JSONValue
    /// The exact body bytes; APNs' limit is measured on these.
    public var body: [UInt8]

    public func header(_ name: String) -> String? { headers.first { $0.name == name }?.value }

    public static func == (a: APNsRequest, b: APNsRequest) -> Bool {
        a.path == b.path && a.body == b.body && a.headers.map(\.name) == b.headers.map(\.name)
            && a.headers.map(\.value) == b.headers.map(\.value)
    }

    public func hash(into h: inout Hasher) {
        h.combine(path)
        h.combine(body)
    }
}

/// Turns a ``PushMessage`` into the APNs request for one device token.
///
/// ```swift
/// let renderer = APNsRenderer(bundleID: "com.example.app")
/// let request = renderer.render(message, deviceToken: token)
/// // request.header("apns-topic") == "com.example.app"; request.payload["aps"]?["mutable-content"] == 1
/// ```
public struct APNsRenderer: Sendable {
    public var bundleID: String
    /// The time `ttl` counts from; injected so tests control it.
    public var now: @Sendable () -> Date

    public init(bundleID: String, now: @escaping @Sendable () -> Date = { Date() }) {
        self.bundleID = bundleID
        self.now = now
    }

    public func render(_ m: PushMessage, deviceToken: String) -> APNsRequest {
        let payload = Self.payload(for: m, now: now())
        return APNsRequest(
            path: "/3/device/\(deviceToken)",
            headers: headers(for: m),
            payload: payload,
            body: payload.serialized()
        )
    }

    /// The headers: push type, topic with its suffix, priority, expiration, collapse id, and `apns-id` when the
    /// message id is a UUID.
    public func headers(for m: PushMessage) -> [(name: String, value: String)] {
        var h: [(String, String)] = [
            ("apns-push-type", m.pushType.rawValue),
            ("apns-topic", bundleID + m.pushType.topicSuffix),
        ]
        if let p = m.priority {
            h.append(("apns-priority", String(p.apnsValue)))
        } else if m.pushType == .background {
            h.append(("apns-priority", "5"))  // APNs refuses background pushes at the default 10
        }
        if let e = expiration(for: m) { h.append(("apns-expiration", String(e))) }
        if let c = m.collapseID { h.append(("apns-collapse-id", c)) }
        if let id = m.id, let uuid = UUID(uuidString: id) { h.append(("apns-id", uuid.uuidString.lowercased())) }
        return h
    }

    /// `apns-expiration` in epoch seconds: 0 for a ttl of 0 (one attempt, no storage).
    public func expiration(for m: PushMessage) -> Int64? {
        if let e = m.expiration { return e }
        guard let ttl = m.ttl else { return nil }
        if ttl == 0 { return 0 }
        // Held to a few decades: a request may be rendered (to show it) before the validator refuses its ttl.
        return Int64(now().timeIntervalSince1970) + Int64(min(max(ttl, 0), 1 << 30))
    }

    /// The JSON body, which does not depend on the device token. `now` is a live activity's timestamp when the
    /// message has none.
    public static func payload(for m: PushMessage, now: Date = Date()) -> JSONValue {
        var root: [String: JSONValue] = [:]
        for (k, v) in m.data { root[k] = v }
        root["aps"] = .object(aps(for: m, now: now))
        if m.liveActivity == nil, let rp = RichPushKey.encode(m) { root[RichPushKey.name] = rp }
        return .object(root)
    }

    /// The `aps` dictionary; `mutable-content` is set whenever the device has media to fetch or a chart to draw.
    public static func aps(for m: PushMessage, now: Date = Date()) -> [String: JSONValue] {
        var aps: [String: JSONValue] = [:]
        if let live = m.liveActivity {
            aps = live.apsFields(chart: m.chart, now: Int64(now.timeIntervalSince1970))
        }
        let alert = alertDictionary(m.alert)
        if !alert.isEmpty {
            if alert.count == 1, let body = alert["body"] { aps["alert"] = body } else { aps["alert"] = .object(alert) }
        }
        if let b = m.badge { aps["badge"] = .int(Int64(b)) }
        if let s = m.sound {
            if s.critical || s.volume != nil {
                var so: [String: JSONValue] = ["name": .string(s.name), "critical": .int(s.critical ? 1 : 0)]
                if let v = s.volume { so["volume"] = .double(v) }
                aps["sound"] = .object(so)
            } else {
                aps["sound"] = .string(s.name)
            }
        }
        if let t = m.threadID { aps["thread-id"] = .string(t) }
        if let c = m.category { aps["category"] = .string(c) }
        if m.contentAvailable || m.pushType == .background { aps["content-available"] = 1 }
        if m.needsServiceExtension { aps["mutable-content"] = 1 }
        if let l = m.interruptionLevel { aps["interruption-level"] = .string(l.rawValue) }
        if let r = m.relevanceScore { aps["relevance-score"] = .double(r) }
        return aps
    }

    static func alertDictionary(_ a: PushMessage.Alert) -> [String: JSONValue] {
        var d: [String: JSONValue] = [:]
        func put(_ k: String, _ v: String?) { if let v { d[k] = .string(v) } }
        func args(_ k: String, _ v: [String]?) { if let v { d[k] = .array(v.map(JSONValue.string)) } }
        put("title", a.title)
        put("subtitle", a.subtitle)
        put("body", a.body)
        put("title-loc-key", a.titleLocKey)
        args("title-loc-args", a.titleLocArgs)
        put("subtitle-loc-key", a.subtitleLocKey)
        args("subtitle-loc-args", a.subtitleLocArgs)
        put("loc-key", a.locKey)
        args("loc-args", a.locArgs)
        put("launch-image", a.launchImage)
        return d
    }
}
