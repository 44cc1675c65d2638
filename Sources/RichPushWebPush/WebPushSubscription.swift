import Crypto
import Foundation
import RichPushCore
import RichPushTransport

/// A browser's push subscription, as `PushSubscription.toJSON()` gives it:
/// `{"endpoint": "https://…", "keys": {"p256dh": "<base64url>", "auth": "<base64url>"}}`.
public struct WebPushSubscription: Sendable, Equatable {
    public var endpoint: URL
    /// The receiver's P-256 public key, uncompressed (65 bytes).
    public var p256dh: [UInt8] {
        didSet { key = nil }
    }
    /// The 16-byte authentication secret.
    public var auth: [UInt8]
    /// `p256dh` as a key, when it was read as one already (checking it is a point on the curve is the key's own
    /// parse, so a subscription read from its token is not parsed again to encrypt).
    private var key: P256.KeyAgreement.PublicKey?

    public static func == (a: Self, b: Self) -> Bool {
        a.endpoint == b.endpoint && a.p256dh == b.p256dh && a.auth == b.auth
    }

    /// The longest endpoint taken (browsers' are a few hundred bytes).
    public static let maxEndpointLength = 2048

    public init(endpoint: URL, p256dh: [UInt8], auth: [UInt8]) {
        self.init(endpoint: endpoint, p256dh: p256dh, auth: auth, key: nil)
    }

    private init(endpoint: URL, p256dh: [UInt8], auth: [UInt8], key: P256.KeyAgreement.PublicKey?) {
        self.endpoint = endpoint
        self.p256dh = p256dh
        self.auth = auth
        self.key = key
    }

    /// Reads the subscription JSON, naming the field and the rule when it is not one. `allowHTTP` admits `http:`
    /// endpoints (loopback emulators in tests); otherwise only `https:`.
    public init(json: JSONValue, allowHTTP: Bool = false) throws {
        self = try Self.read(
            endpoint: json["endpoint"]?.stringValue,
            p256dh: json["keys"]?["p256dh"]?.stringValue.map { Substring($0) },
            auth: json["keys"]?["auth"]?.stringValue.map { Substring($0) },
            allowHTTP: allowHTTP
        )
    }

    /// The rules of both forms, on the fields' texts (nil: absent or not a string).
    private static func read(
        endpoint text: String?,
        p256dh: Substring?,
        auth: Substring?,
        allowHTTP: Bool
    ) throws
        -> WebPushSubscription
    {
        // The length is the stored one: what the URL writes (characters outside ASCII grow when percent-encoded).
        // No control characters (a browser's endpoint has none; the URL would percent-encode them).
        guard let text, text.utf8.count <= Self.maxEndpointLength, !text.utf8.contains(UInt8(ascii: "#")),
            !text.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F }), let url = URL(string: text),
            url.absoluteString.utf8.count <= Self.maxEndpointLength, let host = url.host, !host.isEmpty,
            url.user == nil, url.password == nil
        else {
            throw WebPushEncryption.Failure(
                "endpoint",
                "endpoint must be the subscription's URL: at most \(Self.maxEndpointLength) bytes once percent-encoded, no user, no fragment, no control characters"
            )
        }
        let scheme = url.scheme?.lowercased()
        guard scheme == "https" || (allowHTTP && scheme == "http") else {
            throw WebPushEncryption.Failure("endpoint-scheme", "endpoint must be an https: URL")
        }
        if let port = url.port, !(1...65_535).contains(port) {
            throw WebPushEncryption.Failure("endpoint-port", "the endpoint's port must be 1 to 65535")
        }
        guard let bytes = p256dh.flatMap({ JWT.decodeBase64URL($0) }),
            let key = try? P256.KeyAgreement.PublicKey(x963Representation: bytes)
        else {
            throw WebPushEncryption.Failure(
                "p256dh",
                "keys.p256dh must be the browser's uncompressed P-256 public key in base64url (65 bytes)"
            )
        }
        guard let secret = auth.flatMap({ JWT.decodeBase64URL($0) }), secret.count == 16 else {
            throw WebPushEncryption.Failure("auth", "keys.auth must be 16 bytes in base64url")
        }
        return WebPushSubscription(endpoint: url, p256dh: Array(bytes), auth: Array(secret), key: key)
    }

    /// The subscription as one string, the form a `web` device's token takes in the registry and the queue:
    /// `<endpoint>#<p256dh>.<auth>` (keys in base64url). Push endpoints carry no fragment, and base64url has no
    /// `.`, so it reads back unambiguously; a search for a token prefix is a search by endpoint.
    public var token: String {
        var base = endpoint.absoluteString
        if let hash = base.firstIndex(of: "#") { base = String(base[..<hash]) }
        return base + "#" + JWT.base64URL(Data(p256dh)) + "." + JWT.base64URL(Data(auth))
    }

    /// The token form of a subscription's JSON taken as it is (checked when the token is read): nil when a field is
    /// missing or not a string.
    public static func tokenForm(of json: JSONValue) -> String? {
        guard let e = json["endpoint"]?.stringValue, let p = json["keys"]?["p256dh"]?.stringValue,
            let a = json["keys"]?["auth"]?.stringValue
        else { return nil }
        return e + "#" + p + "." + a
    }

    /// Reads the token form (``token``), with the same rules as the JSON.
    public init(token: String, allowHTTP: Bool = false) throws {
        let bytes = token.utf8
        guard let hash = Self.hashIndex(inToken: token) else {
            throw WebPushEncryption.Failure(
                "webpush-token",
                "a web device's token is <endpoint>#<p256dh>.<auth>, or register it with \"subscription\""
            )
        }
        let keys = bytes[bytes.index(after: hash)...]
        guard let dot = keys.firstIndex(of: UInt8(ascii: ".")),
            !keys[keys.index(after: dot)...].contains(UInt8(ascii: "."))
        else {
            throw WebPushEncryption.Failure("webpush-token", "the token's keys are <p256dh>.<auth> after the #")
        }
        self = try Self.read(
            endpoint: String(token[..<hash]),
            p256dh: token[token.index(after: hash)..<dot],
            auth: token[token.index(after: dot)...],
            allowHTTP: allowHTTP
        )
    }

    /// The endpoint part of a token (``token``), unchecked: what a sender reads to find the push service without
    /// reading the whole subscription. Nil without a `#`.
    public static func endpoint(ofToken token: String) -> Substring? {
        hashIndex(inToken: token).map { token[..<$0] }
    }

    /// Where the token's endpoint ends: its last `#`, found in the bytes (`#` is ASCII; a search by characters,
    /// grapheme breaking over a few hundred bytes, was about a third of reading a token, which every send does).
    static func hashIndex(inToken token: String) -> String.Index? {
        token.utf8.lastIndex(of: UInt8(ascii: "#"))
    }

    /// The receiver's key for encryption.
    public var publicKey: P256.KeyAgreement.PublicKey {
        get throws { try key ?? P256.KeyAgreement.PublicKey(x963Representation: p256dh) }
    }

    /// Encrypts a message for this subscription.
    public func encrypt(_ plaintext: [UInt8], padding: Int = 0) throws -> [UInt8] {
        try WebPushEncryption.encrypt(
            plaintext,
            p256dh: try publicKey,
            receiverKey: p256dh,
            auth: auth,
            padding: padding
        )
    }
}
