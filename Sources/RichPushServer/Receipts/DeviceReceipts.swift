import Crypto
import Foundation
import NIOConcurrencyHelpers
import RichPushCore

/// Receipt addresses for devices. Each delivery's payload carries `rp.r`, an address holding the notification's id,
/// the delivery's id and a signature over both: the device library posts its delivery report there with no API
/// key (a device must never hold one), and the signature admits one report, for that delivery only.
///
/// A notification is rendered once for all its deliveries: its payload carries the address with a placeholder
/// (``placeholder``, as long as the delivery's part) where each delivery's id and signature go, and the provider
/// writes them in as it sends (``ReceiptStamp``). Sizes are checked with the placeholder, so they are exact.
public final class DeviceReceipts: Sendable {
    /// Receipts a second per notification, on average; bursts up to `burst` (a large send's devices answer
    /// within a few seconds of each other).
    public let rate: Double
    public let burst: Double
    /// The largest report accepted, in bytes.
    public let maxReportBytes = 16 * 1024
    /// HMAC state after the key, copied for each signature (the key is not worked in again each time).
    private let keyed: HMAC<SHA256>
    private let baseBox = NIOLockedValueBox<String?>(nil)
    let limiter: RateLimiter

    /// `secret`: the server's receipt secret (``ServerStore/secret(named:)``); `base`: the address devices reach
    /// this server at, when known now (else set ``base`` once the listener is up).
    public init(secret: [UInt8], base: String? = nil, rate: Double = 2_000, burst: Double = 20_000) {
        keyed = HMAC<SHA256>(key: SymmetricKey(data: secret))
        self.rate = rate
        self.burst = burst
        limiter = RateLimiter(rate: rate, burst: burst)
        self.base = base
    }

    /// Where devices reach this server; nil until known (no receipt addresses are handed out before).
    public var base: String? {
        get { baseBox.withLockedValue { $0 } }
        set { baseBox.withLockedValue { $0 = newValue.map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 } } }
    }

    /// The delivery's part of an address: its id (13 base-36 digits) and the signature (22 base64url characters).
    public static let deliveryPartLength = 13 + 1 + 22
    /// What stands for the delivery's part in a rendered payload until it is sent.
    public static let placeholder = String(repeating: "~", count: deliveryPartLength)

    /// `<id>.<expiry>.<delivery>.<signature>`: the expiry is whole seconds since 1970 in base 36, the delivery
    /// its row id in 13 base-36 digits, the signature 16 bytes of HMAC-SHA256 over the three, base64url. An
    /// address stops admitting reports at its expiry: the notification's end (its send time, spread and TTL) and
    /// an hour's grace for the last device to answer.
    public func token(for notificationID: String, delivery: Int64, until expiry: Date) -> String {
        let stamp = Self.stamp(expiry)
        let id = Self.deliveryDigits(delivery)
        return notificationID + "." + stamp + "." + id + "." + Self.base64URL(signature(notificationID, stamp, id))
    }

    /// The address a notification's payload carries, with ``placeholder`` for the delivery's part; nil while the
    /// base is unknown.
    public func template(for notificationID: String, until expiry: Date) -> String? {
        base.map { "\($0)/v1/receipts/\(notificationID).\(Self.stamp(expiry)).\(Self.placeholder)" }
    }

    /// What replaces the placeholder of a notification's address for one delivery; nil when `address` is not one
    /// of this server's templates (a `receipt_url` the sender gave, or none).
    public func stamp(address: String?, notificationID: String, delivery: Int64) -> ReceiptStamp? {
        stamper(address: address, notificationID: notificationID)?.stamp(delivery: delivery)
    }

    /// What makes each delivery's part of a notification's address: the address read and the signature's start
    /// worked in once per notification (the workers keep one per notification), then per delivery 13 digits, one
    /// HMAC finish and 22 characters. Nil when `address` is not one of this server's templates for it.
    public func stamper(address: String?, notificationID: String) -> ReceiptStamper? {
        guard let address, address.hasSuffix("." + Self.placeholder) else { return nil }
        let head = address.dropLast(Self.placeholder.count + 1)
        guard let dot = head.lastIndex(of: "."), head[..<dot].hasSuffix("/" + notificationID) else { return nil }
        let stamp = String(head[head.index(after: dot)...])
        guard Self.expiry(stamp) != nil else { return nil }
        var h = keyed
        h.update(data: Array(("rp-receipt-delivery:" + notificationID + "." + stamp + ".").utf8))
        return ReceiptStamper(prefixed: h)
    }

    /// A delivery id in 13 base-36 digits (Int64's largest takes 13).
    public static func deliveryDigits(_ id: Int64) -> String { String(decoding: digits(id), as: UTF8.self) }

    static func digits(_ id: Int64) -> [UInt8] {
        var out = [UInt8](repeating: UInt8(ascii: "0"), count: 13)
        var v = UInt64(max(0, id))
        var i = 12
        while v > 0, i >= 0 {
            out[i] = base36[Int(v % 36)]
            v /= 36
            i -= 1
        }
        return out
    }

    static let base36 = Array("0123456789abcdefghijklmnopqrstuvwxyz".utf8)

    /// The grace after a notification's end during which its devices may still report.
    public static let grace: TimeInterval = 3600

    public enum TokenCheck: Equatable, Sendable {
        case valid(notificationID: String, delivery: Int64)
        /// Signed by this server, but past its expiry.
        case expired(notificationID: String)
        /// Not an address this server gave out.
        case forged
    }

    /// Whether a token is one this server signed, and still admits a report at `now`.
    public func check(token: String, now: Date = Date()) -> TokenCheck {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count >= 4 else { return .forged }
        let id = parts.dropLast(3).joined(separator: ".")
        let stamp = String(parts[parts.count - 3])
        let delivery = String(parts[parts.count - 2])
        guard !id.isEmpty, let expiry = Self.expiry(stamp), delivery.utf8.count == 13,
            delivery.utf8.allSatisfy({ ($0 >= 48 && $0 <= 57) || ($0 >= 97 && $0 <= 122) }),
            let deliveryID = Int64(delivery, radix: 36),
            let given = Self.decodeBase64URL(String(parts[parts.count - 1])), given.count == 16
        else { return .forged }
        let expected = signature(id, stamp, delivery)
        // Compare every byte, whatever the first difference: the time taken says nothing about the signature.
        var difference: UInt8 = 0
        for (a, b) in zip(given, expected) { difference |= a ^ b }
        guard difference == 0 else { return .forged }
        return now.timeIntervalSince1970 <= expiry
            ? .valid(notificationID: id, delivery: deliveryID) : .expired(notificationID: id)
    }

    private func signature(_ id: String, _ stamp: String, _ delivery: String) -> [UInt8] {
        var h = keyed
        h.update(data: Array(("rp-receipt-delivery:" + id + "." + stamp + "." + delivery).utf8))
        return Array(Array(h.finalize()).prefix(16))
    }

    /// Seconds since 1970 in base 36 (7 characters until the year 4453), held to what the year 9999 needs.
    static func stamp(_ date: Date) -> String {
        let seconds = date.timeIntervalSince1970
        let whole = seconds.isFinite ? Int64(min(max(seconds.rounded(.up), 0), 253_402_300_799)) : 0
        return String(whole, radix: 36)
    }

    static func expiry(_ stamp: String) -> TimeInterval? {
        guard (1...8).contains(stamp.utf8.count),
            stamp.utf8.allSatisfy({ ($0 >= 48 && $0 <= 57) || ($0 >= 97 && $0 <= 122) }),
            let v = Int64(stamp, radix: 36)
        else { return nil }
        return TimeInterval(v)
    }

    static func base64URL(_ bytes: [UInt8]) -> String { String(decoding: base64URLBytes(bytes), as: UTF8.self) }

    /// base64url without padding, by table (this runs once per delivery sent).
    static func base64URLBytes(_ bytes: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count * 4 + 2) / 3)
        var i = 0
        while i + 3 <= bytes.count {
            let n = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2])
            for shift in [18, 12, 6, 0] { out.append(base64URLAlphabet[Int((n >> UInt32(shift)) & 63)]) }
            i += 3
        }
        let rest = bytes.count - i
        if rest > 0 {
            let n = UInt32(bytes[i]) << 16 | (rest > 1 ? UInt32(bytes[i + 1]) << 8 : 0)
            out.append(base64URLAlphabet[Int((n >> 18) & 63)])
            out.append(base64URLAlphabet[Int((n >> 12) & 63)])
            if rest > 1 { out.append(base64URLAlphabet[Int((n >> 6) & 63)]) }
        }
        return out
    }

    static let base64URLAlphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    static func decodeBase64URL(_ text: String) -> [UInt8]? {
        guard text.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }) else {
            return nil
        }
        var s = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while s.count % 4 != 0 { s += "=" }
        return Data(base64Encoded: s).map(Array.init)
    }

    /// The most entries a report's lists hold: the device attaches at most 10 files and trims its skipped list.
    static let maxAttachments = 16
    static let maxSkipped = 64

    /// Checks a report's shape: the device library's delivery report object (`attachments` and `skipped` lists).
    static func problems(in report: JSONValue?, at path: String) -> [ValidationIssue] {
        guard let o = report?.objectValue else {
            return [
                .init(path: path, rule: "type", message: "\(path) must be the device library's delivery report object")
            ]
        }
        var issues: [ValidationIssue] = []
        for (list, most) in [("attachments", maxAttachments), ("skipped", maxSkipped)] {
            switch o[list] {
            case .array(let a)? where a.count > most:
                issues.append(
                    .init(
                        path: "\(path).\(list)",
                        rule: "max-items",
                        message: "\(path).\(list) holds at most \(most) entries"
                    )
                )
            case .array?: break
            case nil:
                issues.append(
                    .init(
                        path: "\(path).\(list)",
                        rule: "required",
                        message: "\(path).\(list) is a list (empty when there is nothing to report)"
                    )
                )
            default:
                issues.append(.init(path: "\(path).\(list)", rule: "type", message: "\(path).\(list) must be a list"))
            }
        }
        return issues
    }
}

/// One notification's receipt-address maker (``DeviceReceipts/stamper(address:notificationID:)``).
public struct ReceiptStamper: Sendable {
    /// The keyed HMAC with the notification's part of the signed text already in.
    let prefixed: HMAC<SHA256>

    /// The delivery's part: its 13 digits, a dot, and 16 bytes of the signature in base64url.
    public func stamp(delivery: Int64) -> ReceiptStamp {
        let digits = DeviceReceipts.digits(delivery)
        var h = prefixed
        h.update(data: digits)
        let mac = Array(h.finalize().prefix(16))
        return ReceiptStamp(
            value: String(decoding: digits + [UInt8(ascii: ".")] + DeviceReceipts.base64URLBytes(mac), as: UTF8.self)
        )
    }
}
