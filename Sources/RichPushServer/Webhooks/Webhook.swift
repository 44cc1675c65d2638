import Crypto
import Foundation
import RichPushCore

/// What an app's backend hears about without polling: each event type it may subscribe an endpoint to.
///
/// Names are full-stop delimited, as the Standard Webhooks specification recommends
/// (https://www.standardwebhooks.com, "Event types").
public enum WebhookEventType: String, Sendable, Hashable, CaseIterable {
    /// A push service accepted a delivery.
    case deliveryDelivered = "delivery.delivered"
    /// A delivery failed: for good (`retried: false`), or for now and tried again (`retried: true`).
    case deliveryFailed = "delivery.failed"
    /// A push service said a token is gone; RichPush pruned it, and the app should forget it too.
    case tokenInvalid = "token.invalid"
    /// A device reported what it showed.
    case receiptReceived = "receipt.received"
    /// Someone opened a notification (its action and link).
    case open
    /// A Live Activity token was registered, or went (`removed`, `expired`).
    case liveToken = "live.token"
    /// Every delivery of a notification has ended; its counts.
    case notificationCompleted = "notification.completed"
    /// `POST …/webhooks/{id}/test`: sent to that endpoint alone, whatever it subscribed to.
    case test = "webhook.test"

    /// The types an endpoint may subscribe to (the test event comes to the endpoint it was asked for).
    public static let subscribable = allCases.filter { $0 != .test }
}

/// An endpoint of an app's backend that hears the events it subscribed to, signed with its secret.
public struct WebhookEndpoint: Sendable, Hashable {
    public var id: String
    public var appID: String
    public var url: String
    public var types: Set<WebhookEventType>
    public var description: String
    /// Most events in one request.
    public var batchSize: Int
    /// `whsec_…`: the signing secret.
    public var secret: String
    /// The secret before a rotation, which also signs until ``previousUntil``.
    public var previousSecret: String?
    public var previousUntil: Date?
    public var createdAt: Date
    public var disabledAt: Date?
    public var disabledReason: String?
    /// Failed attempts in a row (0 once one succeeds).
    public var failures: Int
    /// When the current run of failures began.
    public var failingSince: Date?
    public var lastError: String?
    public var lastAttemptAt: Date?
    public var lastSuccessAt: Date?
    public var nextAttemptAt: Date
    /// The last event it acknowledged.
    public var cursor: WebhookCursor
    /// The last event of the request being retried (a retry sends exactly the events it sent before).
    public var batchEnd: WebhookCursor?
    public var replay: WebhookReplay?

    public init(
        id: String = WebhookEndpoint.newID(),
        appID: String,
        url: String,
        types: Set<WebhookEventType>,
        description: String = "",
        batchSize: Int = WebhookLimits.defaultBatchSize,
        secret: String = WebhookSigner.newSecret(),
        createdAt: Date = Date(),
        cursor: WebhookCursor = .start
    ) {
        self.id = id
        self.appID = appID
        self.url = url
        self.types = types
        self.description = description
        self.batchSize = batchSize
        self.secret = secret
        self.createdAt = createdAt
        self.failures = 0
        self.nextAttemptAt = createdAt
        self.cursor = cursor
    }

    /// `wh_` and 16 hex digits.
    public static func newID() -> String {
        "wh_" + APIKeys.lowercaseHex((0..<8).map { _ in UInt8.random(in: 0...255) })
    }

    /// Whether the id has our shape (a path's `{id}` is checked before any lookup).
    public static func isID(_ s: String) -> Bool {
        s.utf8.count == 19 && s.hasPrefix("wh_")
            && s.utf8.dropFirst(3).allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }

    /// active, failing (retried with backoff) or disabled.
    public var state: String { disabledAt != nil ? "disabled" : failures > 0 ? "failing" : "active" }

    /// The secrets that sign a request sent at `now`: the current one, and the previous within its overlap.
    public func signingSecrets(at now: Date) -> [String] {
        if let p = previousSecret, let until = previousUntil, until > now { return [secret, p] }
        return [secret]
    }

    /// Whether it hears `event` (its type, or a test sent to it).
    public func hears(_ event: WebhookEvent) -> Bool {
        if let only = event.endpointID { return only == id }
        return WebhookEventType(rawValue: event.type).map(types.contains) ?? false
    }

    /// The types column: `,a,b,` (a subscription is found with `LIKE '%,a,%'`).
    static func column(_ types: Set<WebhookEventType>) -> String {
        "," + WebhookEventType.allCases.filter(types.contains).map(\.rawValue).joined(separator: ",") + ","
    }

    static func parse(types column: String) -> Set<WebhookEventType> {
        Set(column.split(separator: ",").compactMap { WebhookEventType(rawValue: String($0)) })
    }
}

/// A place in an app's events: events are ordered by (`xid`, `seq`). On SQLite `xid` is always 0 (one writer
/// commits in `seq` order). On PostgreSQL it is the writing transaction's id, and events are read only once every
/// transaction before the oldest still running has ended: a sequence number taken by a transaction that commits
/// later is never skipped.
public struct WebhookCursor: Sendable, Hashable, Comparable {
    public var xid: Int64
    public var seq: Int64
    public static let start = WebhookCursor(xid: 0, seq: 0)
    public init(xid: Int64, seq: Int64) {
        self.xid = xid
        self.seq = seq
    }
    public static func < (a: WebhookCursor, b: WebhookCursor) -> Bool { (a.xid, a.seq) < (b.xid, b.seq) }
}

/// A replay asked for: the events recorded between `from` and `to`, sent again from `cursor` on.
public struct WebhookReplay: Sendable, Hashable {
    public var from: Date
    public var to: Date
    public var cursor: WebhookCursor
}

/// One event as recorded, in the columns the databases keep; its JSON is made when it is sent.
public struct WebhookEvent: Sendable, Hashable {
    public var seq: Int64
    public var xid: Int64
    public var appID: String
    /// Only this endpoint hears it (a test event); nil: every endpoint subscribed to its type.
    public var endpointID: String?
    /// A ``WebhookEventType``'s name (kept as text: an event of a newer release is carried, not dropped).
    public var type: String
    public var notificationID: String?
    public var deliveryID: Int64?
    public var provider: String?
    public var target: String?
    /// The delivery's state after the outcome.
    public var state: String?
    public var reason: String?
    public var providerID: String?
    /// When a retried delivery is tried next.
    public var nextAt: Date?
    /// The rest of the event's data, a JSON object (receipts, opens, live tokens, completions, tests).
    public var detail: String?
    public var createdAt: Date

    public var cursor: WebhookCursor { WebhookCursor(xid: xid, seq: seq) }

    /// `evt_` and the sequence number: the same in every request that carries the event.
    public var id: String { "evt_\(seq)" }

    /// The event's JSON, as `json().serialized()` writes it (keys in byte order). A delivery's event, which carries
    /// no detail, is written field by field without building the object: the sender writes one per delivery.
    public func serialized() -> [UInt8] {
        guard detail == nil, let kind = WebhookEventType(rawValue: type),
            kind == .deliveryDelivered || kind == .deliveryFailed || kind == .tokenInvalid
        else { return json().serialized() }
        // Keys are the program's own (nothing to escape), appended as they are: no array per key.
        var out: [UInt8] = []
        out.reserveCapacity(320)
        var first = true
        func key(_ name: StaticString) {
            out.append(first ? UInt8(ascii: "{") : UInt8(ascii: ","))
            first = false
            out.append(UInt8(ascii: "\""))
            out.append(contentsOf: UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
            out.append(contentsOf: "\":".utf8)
        }
        func text(_ name: StaticString, _ value: String?) {
            guard let value else { return }
            key(name)
            JSONValue.writeString(value, into: &out)
        }
        out.append(contentsOf: #"{"data":"#.utf8)
        // data's keys in byte order: delivery_id, meaning, next_attempt_at, notification_id, provider, provider_id,
        // reason, retried, state, token.
        let retried = kind == .deliveryFailed && state == DeliveryState.queued.rawValue
        if let d = deliveryID {
            key("delivery_id")
            out.append(contentsOf: String(d).utf8)
        }
        if kind == .deliveryFailed, let r = reason { text("meaning", DeliveryReasons.meaning(r)) }
        if retried, let at = nextAt {
            key("next_attempt_at")
            WebhookTime.writeRFC3339(at, quoted: true, into: &out)
        }
        text("notification_id", notificationID)
        text("provider", provider)
        if kind == .deliveryDelivered { text("provider_id", providerID) }
        if kind != .deliveryDelivered { text("reason", reason) }
        if kind == .deliveryFailed {
            key("retried")
            out.append(contentsOf: (retried ? "true" : "false").utf8)
            text("state", retried ? "retrying" : state ?? "failed")
        }
        text("token", target)
        if first { out.append(UInt8(ascii: "{")) }
        out.append(contentsOf: #"},"id":"evt_"#.utf8)
        out.append(contentsOf: String(seq).utf8)
        out.append(contentsOf: #"","timestamp":"#.utf8)
        WebhookTime.writeRFC3339(createdAt, quoted: true, into: &out)
        out.append(contentsOf: #","type":"#.utf8)
        JSONValue.writeString(type, into: &out)
        out.append(UInt8(ascii: "}"))
        return out
    }

    /// The event as the receiver gets it: `id`, `type`, `timestamp` (when it happened) and `data`.
    public func json() -> JSONValue {
        var data: [String: JSONValue] = [:]
        if let d = detail, case .object(let o)? = try? JSONValue.parse(d) { data = o }
        if let n = notificationID { data["notification_id"] = .string(n) }
        if let d = deliveryID { data["delivery_id"] = .int(d) }
        if let p = provider { data["provider"] = .string(p) }
        if let t = target { data["token"] = .string(t) }
        switch WebhookEventType(rawValue: type) {
        case .deliveryDelivered?:
            if let p = providerID { data["provider_id"] = .string(p) }
        case .deliveryFailed?:
            let retried = state == DeliveryState.queued.rawValue
            data["retried"] = .bool(retried)
            data["state"] = .string(retried ? "retrying" : state ?? "failed")
            if let r = reason {
                data["reason"] = .string(r)
                if let m = DeliveryReasons.meaning(r) { data["meaning"] = .string(m) }
            }
            if retried, let at = nextAt { data["next_attempt_at"] = .string(WebhookTime.rfc3339(at)) }
        case .tokenInvalid?:
            if let r = reason { data["reason"] = .string(r) }
        default: break
        }
        return .object([
            "id": .string(id),
            "type": .string(type),
            "timestamp": .string(WebhookTime.rfc3339(createdAt)),
            "data": .object(data),
        ])
    }
}

/// An event to record, before it has its place.
public struct NewWebhookEvent: Sendable, Hashable {
    public var appID: String
    public var endpointID: String?
    public var type: WebhookEventType
    public var notificationID: String?
    public var detail: JSONValue?

    public init(
        appID: String,
        type: WebhookEventType,
        notificationID: String? = nil,
        endpointID: String? = nil,
        detail: JSONValue? = nil
    ) {
        self.appID = appID
        self.type = type
        self.notificationID = notificationID
        self.endpointID = endpointID
        self.detail = detail
    }

    var detailText: String? { detail.map { String(decoding: $0.serialized(), as: UTF8.self) } }
}

/// The bounds of webhooks, per app and per endpoint.
public enum WebhookLimits {
    /// Endpoints one app may have.
    public static let endpointsPerApp = 10
    public static let defaultBatchSize = 100
    public static let batchSizes = 1...1000
    /// Most bytes of a URL.
    public static let maxURLBytes = 2048
    /// How long a rotated secret keeps signing beside the new one.
    public static let secretOverlap: TimeInterval = 86_400
    /// The longest a replay may cover (what is kept).
    public static var maxReplay: TimeInterval { retention }
    /// How long events are kept: a failing endpoint is retried over this (and replays reach this far back).
    public static let retention: TimeInterval = 3 * 86_400
    /// An endpoint failing without a success for this long is disabled.
    public static let disableAfter: TimeInterval = 36 * 3600
    /// The longest pause between two attempts of a failing endpoint.
    public static let maxBackoff: TimeInterval = 600
    /// Most bytes of a request body: a batch is cut before it.
    public static let maxBodyBytes = 1 << 20

    /// The pause after `failures` failed attempts in a row: 1 s doubled each time to ``maxBackoff``, ±20 %: a
    /// receiver that failed once is tried again soon, one that keeps failing about every ten minutes until it is
    /// disabled.
    public static func backoff(
        afterFailures failures: Int,
        jitter: Double = Double.random(in: 0.8...1.2)
    ) -> TimeInterval {
        let exponent = Double(min(max(failures - 1, 0), 20))
        return min(maxBackoff, pow(2, exponent)) * jitter
    }
}

/// Standard Webhooks signatures (https://www.standardwebhooks.com, "Signature scheme"): HMAC-SHA256 of
/// `{webhook-id}.{webhook-timestamp}.{body}` with each secret, base64, as `v1,<signature>`, space-separated.
public enum WebhookSigner {
    /// `whsec_` and the base64 of 32 random bytes (the specification asks for 24 to 64).
    public static func newSecret() -> String {
        "whsec_" + Data((0..<32).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
    }

    /// The key of a `whsec_` secret (nil when it is not one).
    public static func key(of secret: String) -> SymmetricKey? {
        guard secret.hasPrefix("whsec_"), let bytes = Data(base64Encoded: String(secret.dropFirst(6))) else {
            return nil
        }
        return SymmetricKey(data: bytes)
    }

    /// The `webhook-signature` header's value.
    public static func signature(id: String, timestamp: Int64, body: [UInt8], secrets: [String]) -> String {
        var content = Array("\(id).\(timestamp).".utf8)
        content += body
        return secrets.compactMap { secret in
            key(of: secret).map { key in
                "v1," + Data(HMAC<SHA256>.authenticationCode(for: content, using: key)).base64EncodedString()
            }
        }.joined(separator: " ")
    }
}

extension DeliveryReceipt {
    /// What a `receipt.received` event says of it.
    var webhookDetail: JSONValue {
        .object([
            "attachments": .int(Int64(attachments)),
            "skipped": .array(skipped.list.map(JSONValue.string)),
            "deadline_hit": .bool(deadlineHit),
            "elapsed_ms": .int(Int64(elapsedMilliseconds)),
            "received_at": .string(ISO8601DateFormatter().string(from: receivedAt)),
        ])
    }
}

extension DeliveryOpen {
    /// What an `open` event says of it.
    var webhookDetail: JSONValue {
        var o: [String: JSONValue] = [
            "event": .string(event.rawValue), "at": .string(ISO8601DateFormatter().string(from: at)),
        ]
        if let action { o["action"] = .string(action) }
        if let link { o["link"] = .string(link) }
        return .object(o)
    }
}

extension LiveToken {
    /// The `live.token` event of this token: `state` is registered, removed or expired.
    func webhookEvent(_ state: String) -> NewWebhookEvent {
        var o: [String: JSONValue] = [
            "token": .string(token), "kind": .string(kind.rawValue), "activity_type": .string(activityType),
            "state": .string(state),
        ]
        if let activityID { o["activity_id"] = .string(activityID) }
        if let userID { o["user_id"] = .string(userID) }
        return NewWebhookEvent(appID: appID, type: .liveToken, detail: .object(o))
    }
}

/// Times as the events carry them: RFC 3339 in UTC with milliseconds (`2026-11-27T19:01:02.123Z`), written by hand
/// (Foundation's formatter was a third of a batch's rendering: 1.35 % of a delivering node's CPU with webhooks on).
enum WebhookTime {
    static func rfc3339(_ date: Date) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(24)
        writeRFC3339(date, quoted: false, into: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// ``rfc3339(_:)``'s text appended to `out` (in quotes: a JSON string, which it needs no escape to be), digit by
    /// digit: the sender writes two for each delivery's event.
    static func writeRFC3339(_ date: Date, quoted: Bool, into out: inout [UInt8]) {
        // Years 1 to 9999 (four digits); a time outside them is written at the nearest end.
        let raw = date.timeIntervalSince1970 * 1000
        let clamped = raw.isNaN ? 0 : min(max(raw, -62_135_596_800_000), 253_402_300_799_999)
        let ms = Int64(clamped.rounded(.down))
        let (days, msOfDay) = (floorDiv(ms, 86_400_000), ms - floorDiv(ms, 86_400_000) * 86_400_000)
        let (y, m, d) = civil(days)
        let s = Int(msOfDay / 1000)
        func digits(_ n: Int, _ width: Int) {
            var divisor = 1
            for _ in 1..<width { divisor *= 10 }
            var rest = n
            for _ in 0..<width {
                out.append(UInt8(ascii: "0") + UInt8(rest / divisor % 10))
                rest %= divisor
                divisor /= 10
            }
        }
        if quoted { out.append(UInt8(ascii: "\"")) }
        digits(y, 4)
        out.append(UInt8(ascii: "-"))
        digits(m, 2)
        out.append(UInt8(ascii: "-"))
        digits(d, 2)
        out.append(UInt8(ascii: "T"))
        digits(s / 3600, 2)
        out.append(UInt8(ascii: ":"))
        digits(s / 60 % 60, 2)
        out.append(UInt8(ascii: ":"))
        digits(s % 60, 2)
        out.append(UInt8(ascii: "."))
        digits(Int(msOfDay % 1000), 3)
        out.append(UInt8(ascii: "Z"))
        if quoted { out.append(UInt8(ascii: "\"")) }
    }

    static func floorDiv(_ a: Int64, _ b: Int64) -> Int64 { a >= 0 ? a / b : -((-a + b - 1) / b) }

    /// The civil date of a day counted from 1970-01-01 (the proleptic Gregorian calendar).
    static func civil(_ days: Int64) -> (Int, Int, Int) {
        let z = days + 719_468
        let era = floorDiv(z, 146_097)
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (Int(yoe + era * 400 + (m <= 2 ? 1 : 0)), Int(m), Int(d))
    }

    /// The day counted from 1970-01-01 of a civil date (the inverse of ``civil(_:)``).
    static func days(_ year: Int, _ month: Int, _ day: Int) -> Int64 {
        let y = Int64(month <= 2 ? year - 1 : year)
        let era = floorDiv(y, 400)
        let yoe = y - era * 400
        let mp = Int64(month > 2 ? month - 3 : month + 9)
        let doy = (153 * mp + 2) / 5 + Int64(day) - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    /// An RFC 3339 time (`2026-11-27T10:00:00Z`, `…T10:00:00.5+01:00`; a fraction of up to 9 digits), or nil for
    /// anything else, a time that is not a real one included: a month 13, 31 November, 29 February of a common year,
    /// hour 24, second 60, an offset past 23:59 (Foundation's parser rolls those over into another time). `T` and `Z`
    /// may be lower case (RFC 3339, section 5.6); nothing before or after.
    static func parse(_ s: String) -> Date? {
        let b = Array(s.utf8)
        guard b.count >= 20, b.count <= 40 else { return nil }
        var i = 0
        func number(_ width: Int) -> Int? {
            guard i + width <= b.count else { return nil }
            var n = 0
            for c in b[i..<i + width] {
                guard c >= 48, c <= 57 else { return nil }
                n = n * 10 + Int(c - 48)
            }
            i += width
            return n
        }
        func take(_ c: UInt8) -> Bool {
            guard i < b.count, b[i] == c else { return false }
            i += 1
            return true
        }
        guard let year = number(4), take(45), let month = number(2), take(45), let day = number(2),
            take(84) || take(116),
            let hour = number(2), take(58), let minute = number(2), take(58), let second = number(2)
        else { return nil }
        var fraction = 0.0
        if take(46) {
            var scale = 0.1
            let start = i
            while i < b.count, b[i] >= 48, b[i] <= 57, i - start < 9 {
                fraction += Double(b[i] - 48) * scale
                scale /= 10
                i += 1
            }
            guard i > start else { return nil }
        }
        var offset = 0
        if take(90) || take(122) {
            offset = 0
        } else if i < b.count, b[i] == 43 || b[i] == 45 {
            let sign = b[i] == 45 ? -1 : 1
            i += 1
            guard let h = number(2), take(58), let m = number(2), h <= 23, m <= 59 else { return nil }
            offset = sign * (h * 3600 + m * 60)
        } else {
            return nil
        }
        guard i == b.count, (1...12).contains(month), hour <= 23, minute <= 59, second <= 59 else { return nil }
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        let lengths = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        guard day >= 1, day <= lengths[month - 1] else { return nil }
        let seconds = days(year, month, day) * 86_400 + Int64(hour * 3600 + minute * 60 + second - offset)
        return Date(timeIntervalSince1970: Double(seconds) + fraction)
    }
}
