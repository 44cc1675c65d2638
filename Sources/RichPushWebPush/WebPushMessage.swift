import Crypto
import Foundation
import RichPushCore
import RichPushTransport

/// What a neutral message becomes for a browser, before encryption: one JSON object that is both a declarative push
/// message (the Push API's `"web_push": 8030` form, which Safari shows with no service worker) and what our
/// service worker reads in every other browser (the same `notification` object, shown with `showNotification`).
/// `mutable` is set, so a browser that shows declarative messages still hands it to the worker, which posts the
/// delivery report. Without a link to open (the message's deep link, or the app's default), `navigate` would be
/// missing, so the `web_push` marker is left out and only the worker shows it.
///
/// The headers come from the same message: `TTL` from `ttl` or `expiration` (default and most: 28 days),
/// `Urgency` from the priority, and `Topic` from the collapse id, so that an update replaces a message still
/// waiting at the push service, as `tag` replaces the one shown.
public struct WebPushMessage: Sendable {
    public var payload: JSONValue
    public var ttl: Int
    public var urgency: WebPushRequest.Urgency
    public var topic: String?

    /// The most seconds a push service is asked to keep a message (RFC 8030 §5.2 sets no bound; the big services
    /// keep four weeks at most, and the request refuses more).
    public static let maxTTL = 2_419_200

    /// The bytes of the payload before encryption.
    public var bytes: [UInt8] { payload.serialized() }

    /// - Parameters:
    ///   - chartImageURL: the hosted PNG of the message's chart, used as the image when no media can be shown.
    ///   - defaultURL: where a click goes when the message has no https deep link (the app's site).
    ///   - receiptURL: this delivery's receipt address, for the worker's report.
    public init(
        _ m: PushMessage,
        chartImageURL: String? = nil,
        defaultURL: String? = nil,
        receiptURL: String? = nil,
        now: Date = Date()
    ) {
        var n: [String: JSONValue] = [:]
        n["title"] = .string(m.alert.title ?? "")
        if let b = m.alert.body { n["body"] = .string(b) }
        let renderer = FCMRenderer(projectID: "", chartImageURL: chartImageURL ?? m.chartImageURL)
        if let image = renderer.androidImage(for: m) { n["image"] = .string(image) }
        let link = m.deepLink.flatMap { $0.lowercased().hasPrefix("https://") ? $0 : nil } ?? defaultURL
        if let link { n["navigate"] = .string(link) }
        if let tag = Self.replacementTag(m) {
            n["tag"] = .string(tag)
            n["renotify"] = true
        }
        if let web = m.web {
            if let i = web.icon { n["icon"] = .string(i) }
            if let b = web.badge { n["badge"] = .string(b) }
            if !web.actions.isEmpty {
                n["actions"] = .array(
                    web.actions.map { a in
                        var o: [String: JSONValue] = ["action": .string(a.action), "title": .string(a.title)]
                        if let nav = a.navigate ?? link { o["navigate"] = .string(nav) }
                        return .object(o)
                    }
                )
            }
        }
        if m.sound == nil && m.alert.isVisible == false { n["silent"] = true }
        if m.interruptionLevel == .timeSensitive || m.interruptionLevel == .critical {
            n["require_interaction"] = true
        }
        var ours: [String: JSONValue] = [:]
        if let id = m.id { ours["id"] = .string(id) }
        if let r = receiptURL ?? m.receiptURL { ours["receipt"] = .string(r) }
        if !m.media.isEmpty { ours["media"] = .array(m.media.map { .string($0.url) }) }
        if let d = m.deepLink { ours["link"] = .string(d) }
        var data = m.data
        if !ours.isEmpty { data[RichPushKey.name] = .object(ours) }
        if !data.isEmpty { n["data"] = .object(data) }
        n["timestamp"] = .int(Int64(now.timeIntervalSince1970 * 1000))

        var top: [String: JSONValue] = ["notification": .object(n), "mutable": true]
        if link != nil { top["web_push"] = .int(8030) }
        if let badge = m.badge, badge >= 0 { top["app_badge"] = .int(Int64(badge)) }
        payload = .object(top)

        ttl = Self.ttl(for: m, now: now)
        switch m.priority {
        case .high?: urgency = .high
        case .low?: urgency = .low
        default: urgency = m.contentAvailable && !m.alert.isVisible ? .low : .normal
        }
        topic = Self.replacementTag(m).map(Self.topic(for:))
    }

    /// The `TTL` header's seconds at `now`: what is left of the message's `expiration`, or its `ttl`, or the
    /// most (``maxTTL``), never below 0.
    public static func ttl(for m: PushMessage, now: Date) -> Int {
        let seconds = FCMRenderer(projectID: "", now: { now }).ttlSeconds(for: m) ?? Int64(maxTTL)
        return Int(clamping: min(max(seconds, 0), Int64(maxTTL)))
    }

    /// What a later message replaces this one by: its collapse id, or for a live activity's state the same tag
    /// Android uses, so that each state replaces the last as a Live Activity does.
    static func replacementTag(_ m: PushMessage) -> String? {
        m.collapseID ?? (m.liveActivity != nil ? LiveActivity.defaultAndroidTag : nil)
    }

    /// A collapse id as a `Topic`: itself when it fits the header's rule, otherwise 32 characters of its SHA-256 in
    /// base64url (the same id always gives the same topic).
    public static func topic(for collapseID: String) -> String {
        if WebPushRequest.isValidTopic(collapseID) { return collapseID }
        return String(JWT.base64URL(Data(SHA256.hash(data: Data(collapseID.utf8)))).prefix(32))
    }

    /// The size rule: the payload fits one record of 4,096 bytes once encrypted (RFC 8291 §4), so at most
    /// ``WebPushEncryption/maxPlaintext`` bytes before.
    public var sizeProblem: String? {
        let n = bytes.count
        guard n > WebPushEncryption.maxPlaintext else { return nil }
        return "the browser's payload is \(n) bytes; Web Push carries at most \(WebPushEncryption.maxPlaintext) "
            + "before encryption (4,096 after)"
    }
}
