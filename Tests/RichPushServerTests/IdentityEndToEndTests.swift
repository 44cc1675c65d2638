import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOConcurrencyHelpers
import RichPushApp
import RichPushBackendExample
import RichPushCore
import RichPushServer
import Testing

#if canImport(UserNotifications)
import UserNotifications
#else
import UserNotificationsStandIn
#endif

/// The identity proof end to end, over real sockets: the app library registers its device for its signed-in user
/// with proofs from a test backend (the example backend's signer, with the key the server made and showed once);
/// an expired proof is asked for again; a proof for another user, or none, never binds the device to a user.
@Suite struct IdentityEndToEndTests {
    static let admin = "admin-secret-key-0001"

    @Test func theAppLibraryRegistersItsUserWithItsBackendsProof() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("identity-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let backend = try SQLiteBackend(path: dir.appendingPathComponent("rp.sqlite").path)
        let api = RichPushAPI(backend: backend, adminKey: Self.admin, validation: .init(requireTargets: false))
        try await Application(router: api.router()).test(.live) { client in
            let base = "http://127.0.0.1:\(try #require(client.port))"
            func call(
                _ method: HTTPRequest.Method,
                _ uri: String,
                key: String,
                _ body: JSONValue
            ) async throws
                -> JSONValue
            {
                try await client.execute(
                    uri: uri,
                    method: method,
                    headers: [.authorization: "Bearer \(key)"],
                    body: ByteBuffer(bytes: body.serialized())
                ) { (try? JSONValue.parse(Array($0.body.readableBytesView))) ?? .null }
            }
            let made = try await call(
                .post,
                "/v1/apps",
                key: Self.admin,
                ["name": "Deli", "bundle_id": "com.example.deli"]
            )
            let app = try #require(made["app"]?["id"]?.stringValue)
            let manage = try #require(made["api_key"]?.stringValue)
            let register = try #require(
                try await call(.post, "/v1/apps/\(app)/keys", key: manage, ["scopes": ["register"]])["api_key"]?
                    .stringValue
            )
            let identity = try await call(.post, "/v1/apps/\(app)/identity/keys", key: manage, [:])
            // The backend keeps the private half the server showed once.
            let signer = try PushIdentitySigner(
                privateKeyPEM: try #require(identity["private_key"]?.stringValue),
                keyID: try #require(identity["kid"]?.stringValue),
                appID: app
            )
            // The test backend: the signed-in session is Bob's; its first answer is a proof that already expired.
            let asked = NIOLockedValueBox(0)
            let backendProof: RichPushApp.IdentityProvider = { user in
                let n = asked.withLockedValue { n in
                    n += 1
                    return n
                }
                guard user == "bob" else { return nil }
                return try? signer.proof(for: user, now: n == 1 ? Date().addingTimeInterval(-7200) : Date())
            }
            func library(_ name: String, identity: RichPushApp.IdentityProvider?) -> RichPushApp {
                RichPushApp(
                    configuration: .init(
                        server: URL(string: base)!,
                        appID: app,
                        key: register,
                        directory: dir.appendingPathComponent(name),
                        allowInsecureHTTP: true,
                        identity: identity
                    ),
                    center: UNUserNotificationCenter()
                )
            }
            let bobs = library("bob", identity: backendProof)
            let token = String(repeating: "b0", count: 32)
            await bobs.register(token: token)
            await bobs.setUser("bob")
            #expect(await bobs.flush() == .init(sent: 1, refused: 0, waiting: 0))
            #expect(asked.withLockedValue { $0 } == 2)
            #expect(try await backend.registry.device(appID: app, token: token)?.userID == "bob")

            // Another device claims Bob, but its backend proves no one: registered, anonymous.
            let claimer = library("claimer", identity: { _ in nil })
            let other = String(repeating: "c0", count: 32)
            await claimer.register(token: other)
            await claimer.setUser("bob")
            #expect(await claimer.flush().sent == 1)
            let stored = try await backend.registry.device(appID: app, token: other)
            #expect(stored != nil && stored?.userID == nil)
            // It re-registers Bob's token as its own, without a proof: Bob's it stays.
            await claimer.register(token: token)
            #expect(await claimer.flush().sent == 1)
            #expect(try await backend.registry.device(appID: app, token: token)?.userID == "bob")
        }
        await backend.close()
    }
}
