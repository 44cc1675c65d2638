import Crypto
import Foundation
import RichPushCore
import RichPushTransport

/// What a verified identity proof says: who the device's user is (`sub`), and which Live Activities and
/// push-to-start types the app's backend lets the device register under that user.
public struct IdentityClaims: Sendable, Hashable {
    /// The user id (`sub`).
    public var subject: String
    /// Activity ids the device may register update tokens for (`activities`; empty when absent).
    public var activities: Set<String>
    /// `ActivityAttributes` types the device may register push-to-start tokens for under the user (`push_to_start`).
    public var pushToStart: Set<String>
    public var expiresAt: Date
    /// The key that signed it.
    public var keyID: String
}

/// Why a proof was refused: the reason (an error code the API answers with) and a message naming what is wrong.
public struct IdentityProblem: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Reason: String, Sendable, CaseIterable {
        /// Not a compact ES256 JWS as this server reads it, a signature that does not verify, a claim of the wrong
        /// type, or a lifetime past the bound.
        case invalid = "identity-invalid"
        /// The `kid` names no key of this app (never uploaded, deleted, or another app's).
        case unknownKey = "identity-unknown-key"
        case expired = "identity-expired"
        case notYetValid = "identity-not-yet-valid"
        /// `aud` does not name this app.
        case wrongApp = "identity-wrong-app"
    }
    public var reason: Reason
    public var message: String
    public var description: String { "\(reason.rawValue): \(message)" }

    init(_ reason: Reason, _ message: String) {
        self.reason = reason
        self.message = message
    }
}

/// The identity proof an app's backend signs for its signed-in user, and the device sends with its registration
/// (header ``header``): a compact JWS (RFC 7515) signed with ES256 (RFC 7518 §3.4) by one of the app's
/// ``IdentityKey``s, named by the `kid` header. Claims (RFC 7519): `sub` the user id, `aud` the app id, `exp`
/// (and optionally `iat`, `nbf`), and optionally `activities` and `push_to_start` (lists of strings).
///
/// Read strictly, with every size bounded before anything is decoded: `alg` must be ES256 (no `none`, no other
/// header but `kid` and `typ`), the signature the raw 64-byte R‖S form, every known claim of its type. A proof may
/// live at most ``maxLifetime`` (`exp - iat`, and `exp - now`); times allow ``clockSkew`` either way.
public enum IdentityProof {
    /// The request header a proof travels in.
    public static let header = "RichPush-Identity"
    /// The longest proof read: far above a real one (about 400 bytes with a few activities).
    public static let maxBytes = 4096
    /// The longest life a proof may have, counted from `iat` and from now.
    public static let maxLifetime: TimeInterval = 24 * 3600
    /// Clocks of the backend and the server may disagree by this much.
    public static let clockSkew: TimeInterval = 60
    /// The longest `sub` (the longest user id a registration takes, in UTF-8 bytes).
    public static let maxSubjectBytes = 128
    /// Entries `activities` and `push_to_start` may hold.
    public static let maxActivities = 100
    public static let maxPushToStartTypes = 32

    static func isBase64URL(_ b: UInt8) -> Bool {
        (b >= 65 && b <= 90) || (b >= 97 && b <= 122) || (b >= 48 && b <= 57) || b == 45 || b == 95
    }

    /// Verifies a proof for an app against its keys at `now`; the claims, or why not.
    public static func verify(
        _ token: String,
        appID: String,
        keys: [IdentityKey],
        now: Date = Date()
    ) throws(IdentityProblem) -> IdentityClaims {
        let bytes = token.utf8
        guard (1...maxBytes).contains(bytes.count) else {
            throw IdentityProblem(.invalid, "a proof is 1 to \(maxBytes) bytes")
        }
        // Three base64url parts; the signature is 64 bytes, so 86 characters.
        let parts = token.split(separator: ".", maxSplits: 3, omittingEmptySubsequences: false)
        guard parts.count == 3, parts.allSatisfy({ !$0.isEmpty && $0.utf8.allSatisfy(isBase64URL) }) else {
            throw IdentityProblem(.invalid, "not a compact JWS: three base64url parts joined by dots")
        }
        guard parts[0].utf8.count <= 512, parts[2].utf8.count == 86,
            let headerBytes = JWT.decodeBase64URL(parts[0]), let payloadBytes = JWT.decodeBase64URL(parts[1]),
            let signatureBytes = JWT.decodeBase64URL(parts[2]), signatureBytes.count == 64
        else {
            throw IdentityProblem(
                .invalid,
                "the header is at most 512 characters and the signature 64 bytes (ES256's R‖S)"
            )
        }
        let keyID = try Self.header(headerBytes)
        guard let key = keys.first(where: { $0.appID == appID && $0.keyID == keyID }), let publicKey = key.signingKey
        else {
            throw IdentityProblem(.unknownKey, "this app has no identity key '\(keyID)'")
        }
        guard let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signatureBytes),
            publicKey.isValidSignature(signature, for: Data((parts[0] + "." + parts[1]).utf8))
        else {
            throw IdentityProblem(.invalid, "the signature does not verify with key '\(keyID)'")
        }
        return try Self.claims(payloadBytes, appID: appID, keyID: keyID, now: now)
    }

    /// The header's `kid`, once `alg` is ES256 and nothing else is asked of the reader.
    static func header(_ bytes: Data) throws(IdentityProblem) -> String {
        guard case .object(let h)? = try? JSONValue.parse(bytes, maxDepth: 2) else {
            throw IdentityProblem(.invalid, "the header is not a JSON object")
        }
        guard h["alg"]?.stringValue == "ES256" else {
            throw IdentityProblem(.invalid, "alg must be ES256 (found \(h["alg"]?.jsonString ?? "none"))")
        }
        if let extra = h.keys.sorted().first(where: { !["alg", "kid", "typ"].contains($0) }) {
            throw IdentityProblem(.invalid, "the header may hold alg, kid and typ only ('\(extra)' found)")
        }
        if let typ = h["typ"], typ.stringValue?.uppercased() != "JWT" {
            throw IdentityProblem(.invalid, "typ, when given, is JWT")
        }
        guard let kid = h["kid"]?.stringValue, (1...128).contains(kid.utf8.count) else {
            throw IdentityProblem(.invalid, "kid names the signing key (1 to 128 characters)")
        }
        return kid
    }

    static func claims(
        _ bytes: Data,
        appID: String,
        keyID: String,
        now: Date
    ) throws(IdentityProblem) -> IdentityClaims {
        guard case .object(let c)? = try? JSONValue.parse(bytes, maxDepth: 2) else {
            throw IdentityProblem(.invalid, "the claims are not a JSON object")
        }
        guard let sub = c["sub"]?.stringValue, (1...maxSubjectBytes).contains(sub.utf8.count),
            !sub.unicodeScalars.contains("\u{0}")
        else {
            throw IdentityProblem(.invalid, "sub is the user id: a string of 1 to \(maxSubjectBytes) bytes")
        }
        let audiences: [String]
        switch c["aud"] {
        case .string(let a)?: audiences = [a]
        case .array(let a)? where (1...8).contains(a.count) && a.allSatisfy({ $0.stringValue != nil }):
            audiences = a.compactMap(\.stringValue)
        default: throw IdentityProblem(.invalid, "aud is the app id (a string, or a list of up to 8)")
        }
        for name in ["iss", "jti"] where c[name] != nil && c[name]?.stringValue == nil {
            throw IdentityProblem(.invalid, "\(name), when given, is a string")
        }
        guard let exp = try time(c, "exp", required: true) else {
            throw IdentityProblem(.invalid, "exp is required (seconds since 1970)")
        }
        let iat = try time(c, "iat", required: false)
        let nbf = try time(c, "nbf", required: false)
        let activities = try list(c, "activities", max: maxActivities)
        let types = try list(c, "push_to_start", max: maxPushToStartTypes)
        // The time rules after the types: every claim of the proof was read before any is judged.
        let t = now.timeIntervalSince1970
        if let iat, exp - iat > maxLifetime {
            throw IdentityProblem(
                .invalid,
                "the proof lives \(Int(exp - iat)) s from iat: at most \(Int(maxLifetime)) s"
            )
        }
        if exp - t > maxLifetime + clockSkew {
            throw IdentityProblem(.invalid, "the proof expires in \(Int(exp - t)) s: at most \(Int(maxLifetime)) s")
        }
        if exp + clockSkew < t { throw IdentityProblem(.expired, "the proof expired \(Int(t - exp)) s ago") }
        if let nbf, nbf - clockSkew > t {
            throw IdentityProblem(.notYetValid, "the proof is valid from nbf, \(Int(nbf - t)) s from now")
        }
        if let iat, iat - clockSkew > t {
            throw IdentityProblem(.notYetValid, "the proof was issued (iat) \(Int(iat - t)) s in the future")
        }
        guard audiences.contains(appID) else {
            throw IdentityProblem(.wrongApp, "the proof is for \(audiences.joined(separator: ", ")), not \(appID)")
        }
        return IdentityClaims(
            subject: sub,
            activities: activities,
            pushToStart: types,
            expiresAt: Date(timeIntervalSince1970: exp),
            keyID: keyID
        )
    }

    /// A NumericDate (seconds since 1970), range-checked before it becomes a `Double` anything is computed with.
    static func time(_ c: [String: JSONValue], _ name: String, required: Bool) throws(IdentityProblem) -> Double? {
        guard let v = c[name] else {
            if required { throw IdentityProblem(.invalid, "\(name) is required (seconds since 1970)") }
            return nil
        }
        let seconds: Double
        switch v {
        case .int(let i) where (0...100_000_000_000).contains(i): seconds = Double(i)
        case .double(let d) where d.isFinite && (0...100_000_000_000).contains(d): seconds = d
        default: throw IdentityProblem(.invalid, "\(name) is a number of seconds since 1970")
        }
        return seconds
    }

    /// A list claim of at most `max` strings of 1 to 256 bytes (an activity id, an attributes type).
    static func list(_ c: [String: JSONValue], _ name: String, max: Int) throws(IdentityProblem) -> Set<String> {
        guard let v = c[name] else { return [] }
        guard case .array(let a) = v, a.count <= max else {
            throw IdentityProblem(.invalid, "\(name) is a list of at most \(max) strings")
        }
        var out = Set<String>()
        for e in a {
            guard let s = e.stringValue, (1...256).contains(s.utf8.count), !s.unicodeScalars.contains("\u{0}") else {
                throw IdentityProblem(.invalid, "each of \(name) is a string of 1 to 256 bytes")
            }
            out.insert(s)
        }
        return out
    }

    /// Signs a proof (what an app's backend does; the command line and the tests use it).
    ///
    /// ```swift
    /// let proof = try IdentityProof.mint(subject: "u-42", appID: "app_…", key: privateKey, lifetime: 3600)
    /// ```
    public static func mint(
        subject: String,
        appID: String,
        key: P256.Signing.PrivateKey,
        lifetime: TimeInterval = 3600,
        activities: [String] = [],
        pushToStart: [String] = [],
        now: Date = Date()
    ) throws -> String {
        let iat = Int64(now.timeIntervalSince1970)
        var claims: [String: JSONValue] = [
            "sub": .string(subject), "aud": .string(appID), "iat": .int(iat),
            "exp": .int(iat + Int64(lifetime.rounded())),
        ]
        if !activities.isEmpty { claims["activities"] = .array(activities.map(JSONValue.string)) }
        if !pushToStart.isEmpty { claims["push_to_start"] = .array(pushToStart.map(JSONValue.string)) }
        let header: JSONValue = ["alg": "ES256", "typ": "JWT", "kid": .string(IdentityKey.thumbprint(key.publicKey))]
        return try JWT.es256(header: header.jsonString, claims: JSONValue.object(claims).jsonString, key: key)
    }
}
