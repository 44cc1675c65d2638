import Crypto
import Foundation
import RichPushBackendExample
import RichPushCore
import RichPushServer
import RichPushTestSupport
import RichPushTransport
import Testing

/// The identity proof's reader on its own: what it takes (our proofs, PyJWT's, the example backend's) and each
/// refusal by name: forged, another algorithm, `none`, DER, expired, not yet valid, too long-lived, another app, an
/// unknown key, claims of the wrong type, oversize; and our proofs read by PyJWT.
@Suite struct IdentityProofTests {
    let app = "app_identity"
    let key = P256.Signing.PrivateKey()
    var identityKey: IdentityKey { IdentityKey(appID: app, publicKey: key.publicKey) }
    let now = Date(timeIntervalSince1970: 1_900_000_000)

    func sign(
        _ claims: JSONValue,
        header: JSONValue? = nil,
        with signer: P256.Signing.PrivateKey? = nil
    ) throws
        -> String
    {
        let signer = signer ?? key
        let h = header ?? ["alg": "ES256", "typ": "JWT", "kid": .string(IdentityKey.thumbprint(signer.publicKey))]
        return try JWT.es256(header: h.jsonString, claims: claims.jsonString, key: signer)
    }

    func claims(_ extra: [String: JSONValue] = [:]) -> JSONValue {
        let t = Int64(now.timeIntervalSince1970)
        var o: [String: JSONValue] = ["sub": "bob", "aud": .string(app), "iat": .int(t), "exp": .int(t + 600)]
        for (k, v) in extra { o[k] = v }
        return .object(o)
    }

    func reason(_ token: String, keys: [IdentityKey]? = nil) -> IdentityProblem.Reason? {
        do {
            _ = try IdentityProof.verify(token, appID: app, keys: keys ?? [identityKey], now: now)
            return nil
        } catch { return error.reason }
    }

    @Test func aProofOfOurOwnIsReadWithItsClaims() async throws {
        let proof = try IdentityProof.mint(
            subject: "bob",
            appID: app,
            key: key,
            lifetime: 3600,
            activities: ["order-42"],
            pushToStart: ["DeliveryAttributes"],
            now: now
        )
        let c = try IdentityProof.verify(proof, appID: app, keys: [identityKey], now: now)
        #expect(c.subject == "bob" && c.activities == ["order-42"] && c.pushToStart == ["DeliveryAttributes"])
        #expect(c.keyID == identityKey.keyID && c.expiresAt == now.addingTimeInterval(3600))
        // aud may be a list naming the app.
        #expect(reason(try sign(claims(["aud": ["other", .string(app)]]))) == nil)
    }

    @Test func eachRefusalIsNamed() async throws {
        let t = Int64(now.timeIntervalSince1970)
        let other = P256.Signing.PrivateKey()
        // Forged: signed by another key under this key's id.
        let forged = try sign(
            claims(),
            header: ["alg": "ES256", "kid": .string(identityKey.keyID)],
            with: other
        )
        #expect(reason(forged) == .invalid)
        // A key the app does not hold.
        #expect(reason(try sign(claims(), with: other)) == .unknownKey)
        #expect(reason(try sign(claims(["exp": .int(t - 61), "iat": .int(t - 600)]))) == .expired)
        // Within the clock skew an expired proof still passes.
        #expect(reason(try sign(claims(["exp": .int(t - 30), "iat": .int(t - 600)]))) == nil)
        #expect(reason(try sign(claims(["nbf": .int(t + 120)]))) == .notYetValid)
        #expect(reason(try sign(claims(["iat": .int(t + 120), "exp": .int(t + 600)]))) == .notYetValid)
        #expect(reason(try sign(claims(["aud": "app_other"]))) == .wrongApp)
        // Lives longer than a day, from iat or from now.
        #expect(reason(try sign(claims(["exp": .int(t + 86_401 + 120), "iat": .int(t)]))) == .invalid)
        var noIat = claims().objectValue ?? [:]
        noIat["iat"] = nil
        noIat["exp"] = .int(t + 2 * 86_400)
        #expect(reason(try sign(.object(noIat))) == .invalid)
        // Claims of the wrong type, or missing.
        #expect(reason(try sign(claims(["sub": .int(7)]))) == .invalid)
        #expect(reason(try sign(claims(["sub": .string(String(repeating: "x", count: 129))]))) == .invalid)
        #expect(reason(try sign(claims(["exp": "tomorrow"]))) == .invalid)
        #expect(reason(try sign(claims(["exp": .double(.greatestFiniteMagnitude)]))) == .invalid)
        #expect(reason(try sign(claims(["activities": "order-42"]))) == .invalid)
        #expect(reason(try sign(claims(["activities": .array(Array(repeating: "a", count: 101))]))) == .invalid)
        #expect(reason(try sign(claims(["push_to_start": [.int(1)]]))) == .invalid)
        #expect(reason(try sign(.array([claims()]))) == .invalid)
        // Other algorithms, none, extra headers a reader would act on, a DER signature.
        let kid = JSONValue.string(identityKey.keyID)
        #expect(reason(try sign(claims(), header: ["alg": "ES384", "kid": kid])) == .invalid)
        #expect(
            reason(try sign(claims(), header: ["alg": "ES256", "kid": kid, "jku": "https://evil.example"])) == .invalid
        )
        let body = JWT.base64URL(Data(claims().jsonString.utf8))
        let none = JWT.base64URL(Data(#"{"alg":"none","kid":"\#(identityKey.keyID)"}"#.utf8)) + "." + body + "."
        #expect(reason(none) == .invalid)
        let input = JWT.base64URL(Data(#"{"alg":"ES256","kid":"\#(identityKey.keyID)"}"#.utf8)) + "." + body
        let der = try key.signature(for: Data(input.utf8)).derRepresentation
        #expect(reason(input + "." + JWT.base64URL(der)) == .invalid)
        let raw = try key.signature(for: Data(input.utf8)).rawRepresentation
        #expect(reason(input + "." + JWT.base64URL(raw)) == nil)
        // Sizes are bounded before anything is decoded; stray characters and parts are refused.
        #expect(reason(String(repeating: "a", count: IdentityProof.maxBytes + 1)) == .invalid)
        #expect(reason(input + "." + JWT.base64URL(raw) + ".x") == .invalid)
        #expect(reason(input + "=." + JWT.base64URL(raw)) == .invalid)
        #expect(reason("") == .invalid)
    }

    @Test func keysAreReadFromPEMAndJWKAndAPrivateOneIsRefused() async throws {
        let pem = key.publicKey.pemRepresentation
        guard case .success(let fromPEM) = IdentityKeys.parse(pem: pem) else {
            Issue.record("the PEM was refused")
            return
        }
        #expect(IdentityKey.thumbprint(fromPEM) == identityKey.keyID)
        let jwk = try #require(identityKey.jwk.objectValue)
        guard case .success(let fromJWK) = IdentityKeys.parse(jwk: jwk) else {
            Issue.record("the JWK was refused")
            return
        }
        #expect(fromJWK.rawRepresentation == key.publicKey.rawRepresentation)
        if case .failure(let p) = IdentityKeys.parse(pem: key.pemRepresentation) { #expect(p.rule == "private-key") }
        var privateJWK = jwk
        privateJWK["d"] = "AAAA"
        if case .failure(let p) = IdentityKeys.parse(jwk: privateJWK) { #expect(p.rule == "private-key") }
        if case .failure(let p) = IdentityKeys.parse(jwk: ["kty": "RSA", "n": "x", "e": "AQAB"]) {
            #expect(p.rule == "p256-public-key")
        }
    }

    /// An independent JWT library: PyJWT signs a proof the server reads, and reads ours (signature, audience,
    /// expiry), and computes the same RFC 7638 thumbprint as the key id.
    @Test func pyJWTAndWeReadEachOthersProofs() async throws {
        let script = #"""
            import json, sys, time, jwt
            from jwt.algorithms import ECAlgorithm
            from cryptography.hazmat.primitives import serialization
            args = json.load(sys.stdin)
            private = serialization.load_pem_private_key(args["private"].encode(), None)
            now = int(time.time())
            theirs = jwt.encode({"sub": "alice", "aud": args["app"], "iat": now, "exp": now + 600,
                                 "activities": ["order-7"]}, private, algorithm="ES256", headers={"kid": args["kid"]})
            ours = jwt.decode(args["ours"], private.public_key(), algorithms=["ES256"], audience=args["app"])
            jwk = json.loads(ECAlgorithm.to_jwk(private.public_key()))
            canonical = json.dumps({k: jwk[k] for k in ["crv", "kty", "x", "y"]}, separators=(",", ":"), sort_keys=True)
            import hashlib, base64
            thumb = base64.urlsafe_b64encode(hashlib.sha256(canonical.encode()).digest()).rstrip(b"=").decode()
            print(json.dumps({"theirs": theirs, "ours_sub": ours["sub"], "thumbprint": thumb}))
            """#
        let ours = try IdentityProof.mint(subject: "carol", appID: app, key: key, lifetime: 600)
        let input: JSONValue = [
            "private": .string(key.pemRepresentation), "app": .string(app), "kid": .string(identityKey.keyID),
            "ours": .string(ours),
        ]
        let result = try await Python.run(script, stdin: input.jsonString)
        #expect(result.status == 0)
        let answer = try JSONValue.parse(Array(result.output))
        #expect(answer["ours_sub"]?.stringValue == "carol")
        #expect(answer["thumbprint"]?.stringValue == identityKey.keyID)
        let theirs = try #require(answer["theirs"]?.stringValue)
        let c = try IdentityProof.verify(theirs, appID: app, keys: [identityKey])
        #expect(c.subject == "alice" && c.activities == ["order-7"])
        // PyJWT's proof for another app is refused as such.
        #expect(throws: IdentityProblem.self) {
            try IdentityProof.verify(theirs, appID: "app_else", keys: [identityKey])
        }
    }

    /// The example backend's few lines sign what the server reads.
    @Test func theExampleBackendsProofIsRead() async throws {
        let signer = try PushIdentitySigner(privateKeyPEM: key.pemRepresentation, keyID: identityKey.keyID, appID: app)
        let proof = try signer.proof(for: "dana", activities: ["order-9"], now: now)
        let c = try IdentityProof.verify(proof, appID: app, keys: [identityKey], now: now)
        #expect(c.subject == "dana" && c.activities == ["order-9"])
    }
}
