import Crypto
import Foundation
import Hummingbird
import NIOCore
import RichPushCore

/// `/v1/apps`, their keys, and `/v1/me`: who a key is. Creating an app takes the admin key; the rest an app key with
/// the `manage` scope (`read` to show an app), or the admin key.
struct AppsController: AppRoutes {
    let store: any ServerStore
    /// Deletes an app with all it holds.
    let backend: any StorageBackend
    let maxBodyBytes: Int
    /// OAuth endpoints a stored service account may name besides Google's: the emulator's, in sandbox mode.
    let extraFCMTokenEndpoints: Set<String>
    /// Whether this server runs the sandbox (the console shows its simulated iPhone then).
    let sandbox: Bool
    /// The sandbox's webhook receiver (`https://127.0.0.1:<port>/hooks/`), when it runs in this process.
    var sandboxWebhooks: String? = nil

    func addRoutes(to group: RouterGroup<APIRequestContext>) {
        let reading = group.app(.read, store: store)
        let managing = group.app(.manage, store: store)
        group.get("me", use: me)
        group.post("apps", use: createApp)
        group.get("apps", use: listApps)
        group.delete("apps/:app", use: deleteApp)
        reading.get("", use: showApp)
        managing.patch("", use: updateApp)
        managing.get("keys", use: listKeys)
        managing.post("keys", use: createKey)
        managing.delete("keys/:key", use: revokeKey)
        managing.post("webpush/keys", use: createWebPushKey)
    }

    /// `GET /v1/me`: the admin key, or an app's key with its scopes and its app. The app is shown as `GET
    /// /v1/apps/{app}` shows it (credentials described) to a key that may read it there (`read` or `manage`); to
    /// another (`register`, the key every page and app ships, or `send` alone) by its id only.
    func me(_ request: Request, _ context: APIRequestContext) async throws -> Me {
        switch try context.requireCaller() {
        case .admin:
            return .admin(sandbox: sandbox, webhooks: sandboxWebhooks)
        case .app(let grant):
            guard let app = try await store.app(id: grant.appID) else {
                throw APIError(.notFound, "this key's app is gone")
            }
            let readsApp = !grant.scopes.isDisjoint(with: [.read, .manage])
            return Me(
                admin: false,
                keyID: grant.keyID,
                scopes: APIScope.allCases.filter(grant.scopes.contains).map(\.rawValue),
                app: readsApp ? app.json : ["id": .string(app.id)],
                sandbox: sandbox,
                // Where webhook endpoints are pointed: for the keys that may make them, not a public key shipped in pages.
                sandboxWebhooks: grant.scopes.contains(.manage) ? sandboxWebhooks : nil
            )
        }
    }

    func createApp(_ request: Request, _ context: APIRequestContext) async throws -> EditedResponse<NewApp> {
        try context.requireAdmin()
        let body = try AppBody.decode(
            try await bodyJSON(request),
            creating: true,
            tokenEndpoints: extraFCMTokenEndpoints
        )
        var app = ServerApp(id: "", name: "", bundleID: "", fcmProjectID: nil)
        body.apply(to: &app)
        let (created, key) = try await store.createApp(app)
        return NewApp(app: created.json, apiKey: key).created
    }

    /// `GET /v1/apps` (admin): every app in id order, a page at a time (`limit`, `after` an app id from
    /// `next_after`): an app whose id was lost is found by its name here.
    func listApps(_ request: Request, _ context: APIRequestContext) async throws -> AppPage {
        try context.requireAdmin()
        let query = request.uri.queryParameters
        let limit = try ListQuery.limit(query, default: 100)
        let after = query.get("after") ?? ""
        guard after.utf8.count <= 64, after.utf8.allSatisfy({ Self.idByte($0) }) else {
            throw APIError(
                .invalid,
                "after is an app id (from next_after)",
                issues: [ValidationIssue(path: "after", rule: "app-id", message: "an app id: letters, digits and _")]
            )
        }
        let page = try await store.apps(after: after, limit: limit)
        return AppPage(apps: page.map(\.json), nextAfter: page.count == limit ? page.last?.id : nil)
    }

    /// `DELETE /v1/apps/{app}` (admin): the app and everything it holds (keys, devices, notifications with their
    /// deliveries, receipts and opens, live tokens, identity keys), for good. Its keys stop working first.
    func deleteApp(_ request: Request, _ context: APIRequestContext) async throws -> Removed {
        try context.requireAdmin()
        let id = context.parameters.get("app") ?? ""
        guard id.utf8.count <= 64, id.utf8.allSatisfy({ Self.idByte($0) }), try await backend.deleteApp(id: id) else {
            throw APIError(.notFound, "no such app")
        }
        context.logger.notice("app deleted with all its data", metadata: ["app": "\(id)"])
        return Removed(removed: id)
    }

    /// ASCII letters, digits and _: what an app's or a key's id is made of.
    static func idByte(_ b: UInt8) -> Bool {
        (b >= 48 && b <= 57) || (b >= 65 && b <= 90) || (b >= 97 && b <= 122) || b == 95
    }

    func showApp(_ request: Request, _ context: AppRequestContext) async throws -> AppReply {
        let app = context.app
        return AppReply(app: app.json)
    }

    /// Changes the name, bundle id or credentials (`"apns": null` removes them).
    func updateApp(_ request: Request, _ context: AppRequestContext) async throws -> AppReply {
        var app = context.app
        try AppBody.decode(try await bodyJSON(request), creating: false, tokenEndpoints: extraFCMTokenEndpoints).apply(
            to: &app
        )
        guard let updated = try await store.updateApp(app) else {
            throw APIError(.notFound, "no such app")
        }
        return AppReply(app: updated.json)
    }

    /// `GET /v1/apps/{app}/keys[?limit=&after=]`: ids, scopes and dates, never a key; by key id, a page at a
    /// time (`limit` 1 to 100, default 100; `next_after` when another page may follow).
    func listKeys(_ request: Request, _ context: AppRequestContext) async throws -> KeyPage {
        let app = context.app
        let query = request.uri.queryParameters
        let limit = try ListQuery.limit(query, default: 100)
        let after = query.get("after") ?? ""
        // A key id (from next_after): ASCII letters, digits and _ only (a NUL would reach the database, which
        // refuses it in text: the API fuzzer found that one).
        guard after.utf8.count <= 64, after.utf8.allSatisfy({ Self.idByte($0) }) else {
            throw APIError(.invalid, "after is a key id (from next_after)")
        }
        let page = try await store.keys(appID: app.id, after: after, limit: limit)
        return KeyPage(keys: page.map(\.json), nextAfter: page.count == limit ? page.last?.keyID : nil)
    }

    func createKey(_ request: Request, _ context: AppRequestContext) async throws -> EditedResponse<NewKey> {
        let app = context.app
        let scopes = try KeyBody.decode(try await bodyJSON(request)).scopes
        let grant: APIGrant
        let key: String
        do { (grant, key) = try await store.createKey(appID: app.id, scopes: scopes) } catch is APIKeys.LimitReached {
            throw APIError(
                .invalid,
                "this app has \(APIKeys.maxPerApp) keys",
                issues: [
                    .init(
                        path: "",
                        rule: "keys-per-app",
                        message: "an app holds at most \(APIKeys.maxPerApp) keys: revoke one first"
                    )
                ]
            )
        }
        return NewKey(id: grant.keyID, key: key, scopes: scopes).created
    }

    /// `POST /v1/apps/{app}/webpush/keys`: a new VAPID key for the app, made here (the private key never leaves
    /// the server, sealed like other credentials). The answer holds the public key a site subscribes with. An app
    /// that has one keeps it unless `"replace": true`: browsers subscribed with the old key cannot be sent to
    /// with a new one.
    func createWebPushKey(
        _ request: Request,
        _ context: AppRequestContext
    ) async throws -> EditedResponse<WebPushKeyReply> {
        var app = context.app
        let body = try WebPushKeyBody.decode(try await bodyJSON(request))
        if app.webPush != nil && !body.replace {
            throw APIError(
                .keyExists,
                "this app has a VAPID key already",
                issues: [
                    .init(
                        path: "replace",
                        rule: "webpush-key-exists",
                        message:
                            "subscriptions made with the current key stop working with a new one: send \"replace\": true to replace it"
                    )
                ]
            )
        }
        app.webPush = WebPushCredentials(
            privateKey: Array(P256.Signing.PrivateKey().rawRepresentation),
            subject: body.subject,
            defaultURL: body.defaultURL
        )
        guard let updated = try await store.updateApp(app) else { throw APIError(.notFound, "no such app") }
        return WebPushKeyReply(webpush: updated.webPush?.publicJSON ?? .null).created
    }

    func revokeKey(_ request: Request, _ context: AppRequestContext) async throws -> Revoked {
        let app = context.app
        let keyID = context.parameters.get("key") ?? ""
        guard try await store.revokeKey(appID: app.id, keyID: keyID) else {
            throw APIError(.notFound, "no key '\(keyID)' for this app")
        }
        return Revoked(revoked: keyID)
    }
}
