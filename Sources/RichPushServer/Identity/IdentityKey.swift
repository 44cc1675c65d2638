import Crypto
import Foundation
import RichPushCore
import RichPushTransport

/// A public key an app's backend signs identity proofs with (``IdentityProof``): a P-256 key for ES256. The server
/// keeps the public half only; its id is the key's RFC 7638 thumbprint, which the proof's `kid` header names.
///
/// An app holds at most ``IdentityKeys/maxPerApp`` at once, so that a rotation has an overlap: add the new key,
/// move the backend to it, then delete the old one.
public struct IdentityKey: Sendable, Hashable {
    public var appID: String
    /// The RFC 7638 JWK thumbprint (SHA-256, base64url): the `kid` a proof names.
    public var keyID: String
    /// The public key's uncompressed point (65 bytes).
    public var publicKey: [UInt8]
    public var createdAt: Date

    public init(appID: String, publicKey: P256.Signing.PublicKey, createdAt: Date = Date()) {
        self.appID = appID
        self.publicKey = Array(publicKey.x963Representation)
        keyID = Self.thumbprint(publicKey)
        self.createdAt = createdAt
    }

    /// A stored key; nil when the bytes are not a point on P-256.
    init?(appID: String, keyID: String, publicKey: [UInt8], createdAt: Date) {
        guard (try? P256.Signing.PublicKey(x963Representation: publicKey)) != nil else { return nil }
        self.appID = appID
        self.keyID = keyID
        self.publicKey = publicKey
        self.createdAt = createdAt
    }

    var signingKey: P256.Signing.PublicKey? { try? P256.Signing.PublicKey(x963Representation: publicKey) }

    /// The key's RFC 7638 thumbprint: SHA-256 over its required JWK members in lexical order, without whitespace.
    public static func thumbprint(_ key: P256.Signing.PublicKey) -> String {
        let (x, y) = coordinates(key)
        let canonical = #"{"crv":"P-256","kty":"EC","x":"\#(x)","y":"\#(y)"}"#
        return JWT.base64URL(Array(SHA256.hash(data: Data(canonical.utf8))))
    }

    /// The point's coordinates in base64url (32 bytes each).
    static func coordinates(_ key: P256.Signing.PublicKey) -> (x: String, y: String) {
        let raw = Array(key.rawRepresentation)
        return (JWT.base64URL(raw[0..<32]), JWT.base64URL(raw[32..<64]))
    }

    /// The key as a JWK (RFC 7517), with its id and use.
    public var jwk: JSONValue {
        guard let key = signingKey else { return .null }
        let (x, y) = Self.coordinates(key)
        return [
            "kty": "EC", "crv": "P-256", "x": .string(x), "y": .string(y), "kid": .string(keyID), "alg": "ES256",
            "use": "sig",
        ]
    }

    /// The key as the API lists it: its id, both public forms and when it was added.
    public var json: JSONValue {
        [
            "kid": .string(keyID), "public_key": .string(signingKey?.pemRepresentation ?? ""), "jwk": jwk,
            "created_at": .string(ISO8601DateFormatter().string(from: createdAt)),
        ]
    }
}

/// How identity keys are read from the API and bounded.
public enum IdentityKeys {
    /// Keys one app holds at once: the current one and the next (a rotation's overlap).
    public static let maxPerApp = 2
    /// The longest PEM text read (a P-256 public key in PEM is 178 characters).
    public static let maxPEMLength = 1024

    /// An app holds ``maxPerApp`` keys already.
    public struct LimitReached: Error {}
    /// The app holds this key already.
    public struct Exists: Error {}

    /// A P-256 public key from its PEM text (SubjectPublicKeyInfo); the problem as a rule and a message when not.
    public static func parse(pem: String) -> Result<P256.Signing.PublicKey, Problem> {
        guard pem.utf8.count <= maxPEMLength else {
            return .failure(Problem("length", "a P-256 public key's PEM is at most \(maxPEMLength) characters"))
        }
        if pem.contains("PRIVATE KEY") {
            return .failure(Problem("private-key", "this is a private key: upload its public half only"))
        }
        guard let key = try? P256.Signing.PublicKey(pemRepresentation: pem) else {
            return .failure(Problem("p256-public-key", "not a P-256 public key in PEM (-----BEGIN PUBLIC KEY-----)"))
        }
        return .success(key)
    }

    /// A P-256 public key from a JWK (RFC 7518 §6.2: kty EC, crv P-256, x and y); a private one is refused.
    public static func parse(jwk o: [String: JSONValue]) -> Result<P256.Signing.PublicKey, Problem> {
        if o["d"] != nil {
            return .failure(Problem("private-key", "this JWK holds a private key (d): send the public half"))
        }
        guard o["kty"]?.stringValue == "EC", o["crv"]?.stringValue == "P-256" else {
            return .failure(Problem("p256-public-key", "the JWK must be kty EC, crv P-256"))
        }
        if let alg = o["alg"], alg.stringValue != "ES256" {
            return .failure(Problem("p256-public-key", "the JWK's alg, when given, is ES256"))
        }
        guard let x = coordinate(o["x"]), let y = coordinate(o["y"]),
            let key = try? P256.Signing.PublicKey(rawRepresentation: x + y)
        else {
            return .failure(Problem("p256-public-key", "x and y are the point's 32-byte coordinates in base64url"))
        }
        return .success(key)
    }

    /// A coordinate: exactly 43 base64url characters (32 bytes), nothing else decoded.
    static func coordinate(_ v: JSONValue?) -> [UInt8]? {
        guard let s = v?.stringValue, s.utf8.count == 43, s.utf8.allSatisfy(IdentityProof.isBase64URL),
            let d = JWT.decodeBase64URL(Substring(s)), d.count == 32
        else { return nil }
        return Array(d)
    }

    /// Why a key was refused: a rule and a message.
    public struct Problem: Error, Sendable, Equatable {
        public var rule: String
        public var message: String
        init(_ rule: String, _ message: String) {
            self.rule = rule
            self.message = message
        }
    }
}
