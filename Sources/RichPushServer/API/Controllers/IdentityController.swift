import Crypto
import Foundation
import Hummingbird
import RichPushCore

/// `/v1/apps/{app}/identity/keys`: the keys an app's backend signs identity proofs with (``IdentityProof``), with
/// the `manage` scope. The server makes a key pair and shows its private half once, or the app uploads a public key
/// it made (PEM or JWK); an app holds at most two, so a rotation has an overlap. Only public halves are kept.
struct IdentityController: AppRoutes {
    let store: any ServerStore
    let maxBodyBytes: Int

    func addRoutes(to group: RouterGroup<APIRequestContext>) {
        let managing = group.app(.manage, store: store)
        managing.get("identity/keys", use: listKeys)
        managing.post("identity/keys", use: addKey)
        managing.delete("identity/keys/:kid", use: removeKey)
    }

    func listKeys(_ request: Request, _ context: AppRequestContext) async throws -> IdentityKeyList {
        let app = context.app
        let keys = try await store.identityKeys(appID: app.id)
        return IdentityKeyList(keys: keys.map(\.json))
    }

    /// `POST …/identity/keys`: `{}` makes a key pair (the answer holds the private key in PEM, shown once);
    /// `{"public_key": "<PEM>"}` or `{"jwk": {…}}` adds a public key made elsewhere.
    func addKey(_ request: Request, _ context: AppRequestContext) async throws -> Response {
        let app = context.app
        var r = FieldReader(strict: true, refusesNUL: true)
        let o = r.body(try await bodyJSON(request, upTo: 4096), known: ["public_key", "jwk"])
        var publicKey: P256.Signing.PublicKey?
        var privateKey: P256.Signing.PrivateKey?
        switch (o["public_key"], o["jwk"]) {
        case (_?, _?): r.report.add("jwk", "exclusive", "give public_key or jwk, not both")
        case (_?, nil):
            if let pem = r.text(o, "public_key", at: "", lengths: 1...IdentityKeys.maxPEMLength) {
                switch IdentityKeys.parse(pem: pem) {
                case .success(let k): publicKey = k
                case .failure(let p): r.report.add("public_key", p.rule, p.message)
                }
            }
        case (nil, _?):
            if let jwk = r.object(o["jwk"], at: "jwk") {
                switch IdentityKeys.parse(jwk: jwk) {
                case .success(let k): publicKey = k
                case .failure(let p): r.report.add("jwk", p.rule, p.message)
                }
            }
        case (nil, nil):
            let made = P256.Signing.PrivateKey()
            privateKey = made
            publicKey = made.publicKey
        }
        guard r.report.isValid, let publicKey else { throw APIError.invalid("the identity key", r.report) }
        let key = IdentityKey(appID: app.id, publicKey: publicKey)
        do { try await store.addIdentityKey(key) } catch is IdentityKeys.LimitReached {
            throw APIError(
                .invalid,
                "this app holds \(IdentityKeys.maxPerApp) identity keys",
                issues: [
                    .init(
                        path: "",
                        rule: "identity-keys-per-app",
                        message: "an app holds at most \(IdentityKeys.maxPerApp) identity keys: delete the older first"
                    )
                ]
            )
        } catch is IdentityKeys.Exists {
            throw APIError(
                .keyExists,
                "this app holds this identity key already",
                issues: [.init(path: "", rule: "identity-key-exists", message: "the key '\(key.keyID)' is there")]
            )
        }
        var answer = key.json.objectValue ?? [:]
        if let privateKey {
            answer["private_key"] = .string(privateKey.pemRepresentation)
            answer["note"] =
                "the private key is shown once: keep it on your backend; RichPush keeps the public half only"
        }
        return Response.json(201, .object(answer))
    }

    func removeKey(_ request: Request, _ context: AppRequestContext) async throws -> Removed {
        let app = context.app
        let kid = context.parameters.get("kid") ?? ""
        guard try await store.removeIdentityKey(appID: app.id, keyID: kid) else {
            throw APIError(.notFound, "no identity key '\(kid)' for this app")
        }
        return Removed(removed: kid)
    }
}
