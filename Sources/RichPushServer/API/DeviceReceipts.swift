import Crypto
import Foundation
import NIOConcurrencyHelpers
import RichPushCore

/// Receipt addresses for devices. A notification's payload carries `rp.r`, an address holding the notification's id
/// and a signature over it: the device library posts its delivery report there with no API key (a device must
/// never hold one), and the signature admits reports for that one notification only.
public final class DeviceReceipts: Sendable {
    /// Receipts a second per notification, on average; bursts up to `burst` (a large send's devices answer
    /// within a few seconds of each other).
    public let rate: Double
    public let burst: Double
    /// The largest report accepted, in bytes.
    public let maxReportBytes = 16 * 1024
    /// The most reports one notification admits from devices (one per device id): a leaked address cannot fill
    /// the database.
    public let maxReportsPerNotification: Int
    /// HMAC state after the key, copied for each signature (the key is not worked in again each time).
    private let keyed: HMAC<SHA256>
    private let baseBox = NIOLockedValueBox<String?>(nil)
    let limiter: RateLimiter

    /// `secret`: the server's receipt secret (``ServerStore/secret(named:)``); `base`: the address devices reach
    /// this server at, when known now (else set ``base`` once the listener is up).
    public init(
        secret: [UInt8],
        base: String? = nil,
        rate: Double = 2_000,
        burst: Double = 20_000,
        maxReportsPerNotification: Int = 100_000
    ) {
        keyed = HMAC<SHA256>(key: SymmetricKey(data: secret))
        self.maxReportsPerNotification = maxReportsPerNotification
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

    /// `<id>.<expiry>.<signature>`: the expiry is whole seconds since 1970 in base 36, the signature 16 bytes of
    /// HMAC-SHA256 over the id and the expiry, base64url. An address stops admitting reports at its expiry: the
    /// notification's end (its send time, spread and TTL) and an hour's grace for the last device to answer.
    public func token(for notificationID: String, until expiry: Date) -> String {
        let stamp = Self.stamp(expiry)
        return notificationID + "." + stamp + "." + Self.base64URL(signature(notificationID, stamp))
    }

    /// The receipt address for a notification, when the base is known.
    public func url(for notificationID: String, until expiry: Date) -> String? {
        base.map { "\($0)/v1/receipts/\(token(for: notificationID, until: expiry))" }
    }

    /// The grace after a notification's end during which its devices may still report.
    public static let grace: TimeInterval = 3600

    public enum TokenCheck: Equatable, Sendable {
        case valid(notificationID: String)
        /// Signed by this server, but past its expiry.
        case expired(notificationID: String)
        /// Not an address this server gave out.
        case forged
    }

    /// Whether a token is one this server signed, and still admits reports at `now`.
    public func check(token: String, now: Date = Date()) -> TokenCheck {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count >= 3 else { return .forged }
        let id = parts.dropLast(2).joined(separator: ".")
        let stamp = String(parts[parts.count - 2])
        guard !id.isEmpty, let expiry = Self.expiry(stamp),
            let given = Self.decodeBase64URL(String(parts[parts.count - 1])), given.count == 16
        else { return .forged }
        let expected = signature(id, stamp)
        // Compare every byte, whatever the first difference: the time taken says nothing about the signature.
        var difference: UInt8 = 0
        for (a, b) in zip(given, expected) { difference |= a ^ b }
        guard difference == 0 else { return .forged }
        return now.timeIntervalSince1970 <= expiry ? .valid(notificationID: id) : .expired(notificationID: id)
    }

    /// The notification a token admits reports for now; nil when it is forged or expired.
    public func notificationID(fromToken token: String, now: Date = Date()) -> String? {
        if case .valid(let id) = check(token: token, now: now) { return id }
        return nil
    }

    private func signature(_ id: String, _ stamp: String) -> [UInt8] {
        var h = keyed
        h.update(data: Array(("rp-receipt:" + id + "." + stamp).utf8))
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

    static func base64URL(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(
            of: "/",
            with: "_"
        ).replacingOccurrences(of: "=", with: "")
    }

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
