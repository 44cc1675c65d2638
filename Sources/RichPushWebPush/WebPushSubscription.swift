import Crypto
import Foundation
import RichPushCore
import RichPushTransport

/// A browser's push subscription, as `PushSubscription.toJSON()` gives it:
/// `{"endpoint": "https://…", "keys": {"p256dh": "<base64url>", "auth": "<base64url>"}}`.
public struct WebPushSubscription: Sendable, Equatable {
    public var endpoint: URL
    /// The receiver's P-256 public key, uncompressed (65 bytes).
    public var p256dh: [UInt8]
    /// The 16-byte authentication secret.
    public var auth: [UInt8]

    public init(endpoint: URL, p256dh: [UInt8], auth: [UInt8]) {
        self.endpoint = endpoint
        self.p256dh = p256dh
        self.auth = auth
    }

    /// Reads the subscription JSON, naming the field and the rule when it is not one. `allowHTTP` admits `http:`
    /// endpoints (loopback emulators in tests); otherwise only `https:`.
    public init(json: JSONValue, allowHTTP: Bool = false) throws {
        guard let text = json["endpoint"]?.stringValue, let url = URL(string: text), url.host != nil else {
            throw WebPushEncryption.Failure("endpoint", "endpoint must be the subscription's URL")
        }
        let scheme = url.scheme?.lowercased()
        guard scheme == "https" || (allowHTTP && scheme == "http") else {
            throw WebPushEncryption.Failure("endpoint-scheme", "endpoint must be an https: URL")
        }
        guard let key = json["keys"]?["p256dh"]?.stringValue.flatMap({ JWT.decodeBase64URL(Substring($0)) }),
            (try? P256.KeyAgreement.PublicKey(x963Representation: key)) != nil
        else {
            throw WebPushEncryption.Failure(
                "p256dh",
                "keys.p256dh must be the browser's uncompressed P-256 public key in base64url (65 bytes)"
            )
        }
        guard let secret = json["keys"]?["auth"]?.stringValue.flatMap({ JWT.decodeBase64URL(Substring($0)) }),
            secret.count == 16
        else { throw WebPushEncryption.Failure("auth", "keys.auth must be 16 bytes in base64url") }
        self.init(endpoint: url, p256dh: Array(key), auth: Array(secret))
    }

    /// The receiver's key for encryption.
    public var publicKey: P256.KeyAgreement.PublicKey {
        get throws { try P256.KeyAgreement.PublicKey(x963Representation: p256dh) }
    }

    /// Encrypts a message for this subscription.
    public func encrypt(_ plaintext: [UInt8], padding: Int = 0) throws -> [UInt8] {
        try WebPushEncryption.encrypt(plaintext, p256dh: try publicKey, auth: auth, padding: padding)
    }
}
