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

    /// `<id>.<signature>`: the signature is 16 bytes of HMAC-SHA256 over the id, base64url.
    public func token(for notificationID: String) -> String {
        notificationID + "." + Self.base64URL(signature(notificationID))
    }

    /// The receipt address for a notification, when the base is known.
    public func url(for notificationID: String) -> String? {
        base.map { "\($0)/v1/receipts/\(token(for: notificationID))" }
    }

    /// The notification a token was made for; nil when the signature does not match.
    public func notificationID(fromToken token: String) -> String? {
        guard let dot = token.lastIndex(of: "."), dot > token.startIndex else { return nil }
        let id = String(token[..<dot])
        guard let given = Self.decodeBase64URL(String(token[token.index(after: dot)...])), given.count == 16 else { return nil }
        let expected = signature(id)
        // Compare every byte, whatever the first difference: the time taken says nothing about the signature.
        var difference: UInt8 = 0
        for (a, b) in zip(given, expected) { difference |= a ^ b }
        return difference == 0 ? id : nil
    }

    private func signature(_ id: String) -> [UInt8] {
        var h = keyed
        h.update(data: Array(("rp-receipt:" + id).utf8))
        return Array(Array(h.finalize()).prefix(16))
    }

    static func base64URL(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    static func decodeBase64URL(_ text: String) -> [UInt8]? {
        guard text.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }) else { return nil }
        var s = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while s.count % 4 != 0 { s += "=" }
        return Data(base64Encoded: s).map(Array.init)
    }

    /// Checks a report's shape: the device library's delivery report object (`attachments` and `skipped` lists).
    static func problems(in report: JSONValue?, at path: String) -> [ValidationIssue] {
        guard let o = report?.objectValue else {
            return [.init(path: path, rule: "type", message: "\(path) must be the device library's delivery report object")]
        }
        var issues: [ValidationIssue] = []
        for list in ["attachments", "skipped"] {
            switch o[list] {
            case .array?: break
            case nil: issues.append(.init(path: "\(path).\(list)", rule: "required", message: "\(path).\(list) is a list (empty when there is nothing to report)"))
            default: issues.append(.init(path: "\(path).\(list)", rule: "type", message: "\(path).\(list) must be a list"))
            }
        }
        return issues
    }
}
