import Crypto
import Foundation
import RichPushCore
import RichPushTransport

/// Voluntary Application Server Identification (RFC 8292): the sender signs a short-lived ES256 token for the push
/// service's origin and sends it with its public key, `Authorization: vapid t=<token>,k=<key>` (§3, §3.1-3.2). A
/// site subscribes browsers with the same public key (`applicationServerKey`), so a push service delivers only what
/// that key signed.
public enum VAPID {
    /// Tokens live at most a day (RFC 8292 §2).
    public static let maxLifetime: TimeInterval = 86_400

    /// Why a token could not be made or was refused, naming the rule.
    public typealias Failure = WebPushEncryption.Failure

    /// The audience of a push resource: its origin, `scheme://host[:port]` (the port only when not the scheme's
    /// default), RFC 8292 §2 with RFC 6454's serialization.
    public static func audience(of endpoint: URL) -> String? {
        guard let scheme = endpoint.scheme?.lowercased(), let host = endpoint.host?.lowercased() else { return nil }
        let defaultPort = scheme == "https" ? 443 : scheme == "http" ? 80 : nil
        let port = endpoint.port.flatMap { $0 == defaultPort ? nil : $0 }
        let shownHost = host.utf8.contains(UInt8(ascii: ":")) && !host.hasPrefix("[") ? "[\(host)]" : host
        return "\(scheme)://\(shownHost)" + (port.map { ":\($0)" } ?? "")
    }

    /// The contact a push service may reach the sender at: `mailto:` or `https:` (RFC 8292 §2.1).
    public static func checkSubject(_ subject: String) throws {
        let lower = subject.lowercased()
        guard (lower.hasPrefix("mailto:") && subject.count > 7) || (lower.hasPrefix("https://") && subject.count > 8)
        else {
            throw Failure("vapid-subject", "the VAPID subject must be a mailto: or https: contact (RFC 8292 §2.1)")
        }
    }

    /// The `Authorization` header for a push to `endpoint`, valid until `expires` (at most a day ahead).
    public static func authorization(
        endpoint: URL,
        key: P256.Signing.PrivateKey,
        subject: String,
        expires: Date,
        now: Date = Date()
    ) throws -> String {
        try checkSubject(subject)
        guard let aud = audience(of: endpoint) else {
            throw Failure("endpoint", "the subscription's endpoint has no origin to sign for")
        }
        guard expires > now, expires.timeIntervalSince(now) <= maxLifetime else {
            throw Failure("vapid-expiry", "a VAPID token must expire within 24 hours of its use (RFC 8292 §2)")
        }
        let claims: JSONValue = [
            "aud": .string(aud), "exp": .int(Int64(expires.timeIntervalSince1970)), "sub": .string(subject),
        ]
        let token = try JWT.es256(
            header: #"{"typ":"JWT","alg":"ES256"}"#,
            claims: String(decoding: claims.serialized(), as: UTF8.self),
            key: key
        )
        return "vapid t=\(token),k=\(publicKey(key.publicKey))"
    }

    /// A public key as a site and the header give it: the uncompressed point, base64url without padding.
    public static func publicKey(_ key: P256.Signing.PublicKey) -> String { JWT.base64URL(key.x963Representation) }

    /// What a push service learns from a valid header: the sender's public key and contact.
    public struct Verified: Sendable, Equatable {
        public var publicKey: String
        public var subject: String?
        public var expires: Date
    }

    /// Checks a header as a push service does: the scheme, both parameters, the ES256 signature by the key given,
    /// the audience (the endpoint's origin), an expiry in the future and within a day, and the key the subscription
    /// was made with (when known).
    public static func verify(
        _ header: String,
        endpoint: URL,
        subscribedWith expectedKey: String? = nil,
        now: Date = Date()
    ) throws -> Verified {
        let trimmed = header.trimmingCharacters(in: .whitespaces)
        guard trimmed.lowercased().hasPrefix("vapid ") else {
            throw Failure("vapid-scheme", "the Authorization scheme must be vapid")
        }
        var params: [String: String] = [:]
        for part in trimmed.dropFirst(6).split(separator: ",") {
            let kv = part.trimmingCharacters(in: .whitespaces).split(separator: "=", maxSplits: 1)
            if kv.count == 2 { params[kv[0].lowercased()] = String(kv[1]) }
        }
        guard let token = params["t"], let k = params["k"] else {
            throw Failure("vapid-parameters", "the vapid Authorization needs both t= and k=")
        }
        guard let keyBytes = JWT.decodeBase64URL(Substring(k)),
            let key = try? P256.Signing.PublicKey(x963Representation: keyBytes)
        else { throw Failure("vapid-key", "k= is not an uncompressed P-256 public key in base64url") }
        if let expectedKey, expectedKey != k {
            throw Failure("vapid-key-mismatch", "k= is not the key the subscription was made with")
        }
        guard let parts = JWT.Parts(token), parts.header["alg"] as? String == "ES256" else {
            throw Failure("vapid-token", "t= is not an ES256 JSON Web Token")
        }
        guard parts.signature.count == 64, parts.verifiesES256(with: key) else {
            throw Failure("vapid-signature", "the token's signature does not verify with k=")
        }
        let claims = parts.claims
        guard let aud = claims["aud"] as? String, aud == audience(of: endpoint) else {
            throw Failure("vapid-audience", "the token's aud is not the push service's origin")
        }
        guard let exp = (claims["exp"] as? NSNumber)?.doubleValue, exp.isFinite,
            exp > now.timeIntervalSince1970, exp - now.timeIntervalSince1970 <= maxLifetime
        else { throw Failure("vapid-expiry", "the token's exp is past, missing, or more than 24 hours ahead") }
        return Verified(publicKey: k, subject: claims["sub"] as? String, expires: Date(timeIntervalSince1970: exp))
    }
}
