import Crypto
import Foundation

/// The app's backend side of identity proofs (docs/identity.md): when its signed-in user's device asks, it signs a
/// short-lived ES256 JWT naming the user, with the identity key RichPush made for the app (its private half, shown
/// once by `POST /v1/apps/{app}/identity/keys`, kept here only). The device sends it with its registration.
///
/// ```swift
/// let signer = try PushIdentitySigner(privateKeyPEM: pem, keyID: kid, appID: "app_…")
/// let proof = try signer.proof(for: session.userID, activities: ["order-42"])   // the answer to the device
/// ```
public struct PushIdentitySigner: Sendable {
    let key: P256.Signing.PrivateKey
    let keyID: String
    let appID: String

    public init(privateKeyPEM: String, keyID: String, appID: String) throws {
        key = try P256.Signing.PrivateKey(pemRepresentation: privateKeyPEM)
        self.keyID = keyID
        self.appID = appID
    }

    /// A proof for `userID`, valid for `lifetime` seconds (RichPush takes at most a day), listing the Live
    /// Activities and push-to-start types the device may register for the user.
    public func proof(
        for userID: String,
        activities: [String] = [],
        pushToStart: [String] = [],
        lifetime: TimeInterval = 3600,
        now: Date = Date()
    ) throws -> String {
        let iat = Int(now.timeIntervalSince1970)
        var claims: [String: Any] = ["sub": userID, "aud": appID, "iat": iat, "exp": iat + Int(lifetime)]
        if !activities.isEmpty { claims["activities"] = activities }
        if !pushToStart.isEmpty { claims["push_to_start"] = pushToStart }
        let header = try JSONSerialization.data(withJSONObject: ["alg": "ES256", "typ": "JWT", "kid": keyID])
        let input = Self.base64URL(header) + "." + Self.base64URL(try JSONSerialization.data(withJSONObject: claims))
        // JWS wants the signature as R‖S (64 bytes), which is swift-crypto's raw representation.
        let signature = try key.signature(for: Data(input.utf8)).rawRepresentation
        return input + "." + Self.base64URL(signature)
    }

    static func base64URL(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
