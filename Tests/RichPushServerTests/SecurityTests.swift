import Foundation
import GRDB
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RichPushCore
import RichPushSandbox
import RichPushTestSupport
import Testing

@testable import RichPushServer

/// The holes the server had, each closed and kept closed.
@Suite(.serialized) struct SecurityTests {
    /// A TCP listener on 127.0.0.1 that counts the connections made to it.
    final class Listener: Sendable {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let accepted = NIOLockedValueBox(0)
        let channel: Channel

        init() async throws {
            let accepted = self.accepted
            channel = try await ServerBootstrap(group: group)
                .childChannelInitializer { channel in
                    accepted.withLockedValue { $0 += 1 }
                    return channel.close()
                }
                .bind(host: "127.0.0.1", port: 0).get()
        }

        var port: Int { channel.localAddress?.port ?? 0 }
        var connections: Int { accepted.withLockedValue { $0 } }

        func stop() async throws {
            try await channel.close()
            try await group.shutdownGracefully()
        }
    }

    static func serviceAccount(tokenURI: String) throws -> String {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("sa-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let files = try SandboxCredentials.generate().write(to: dir, tokenURI: tokenURI)
        return try String(contentsOf: try #require(files["service-account"]), encoding: .utf8)
    }

    @Test func aTokenEndpointOtherThanGooglesIsRefusedAndNeverConnected() async throws {
        let listener = try await Listener()
        let account = try Self.serviceAccount(tokenURI: "https://127.0.0.1:\(listener.port)/token")
        let f = try APITests.fixture()
        try await Application(router: f.api.router()).test(.router) { client in
            let (status, body) = try await APITests.call(
                client,
                .post,
                "/v1/apps",
                key: "admin-secret",
                body: ["name": "Shop", "bundle_id": "com.example.app", "fcm": ["service_account": .string(account)]]
            )
            #expect(status == 422)
            #expect(body["error"]?["issues"]?.arrayValue?.first?["path"] == "fcm.service_account.token_uri")
            #expect(body["error"]?["issues"]?.arrayValue?.first?["rule"] == "token-endpoint")
        }
        // A row stored before the check (or edited in the database) is refused again before any connection.
        let fcmProvider = FCMProvider()
        let app = ServerApp(
            id: "app_x",
            name: "Shop",
            bundleID: "com.example.app",
            fcm: FCMCredentials(serviceAccountJSON: account, projectID: "p", clientEmail: "c@example.com")
        )
        #expect(fcmProvider.client(for: app) == nil)
        try await Task.sleep(nanoseconds: 300_000_000)
        #expect(listener.connections == 0)
        await fcmProvider.shutdown()
        // In sandbox mode the emulator's endpoint is the one allowed.
        var sandboxAPI = f.api
        sandboxAPI.extraFCMTokenEndpoints = ["https://127.0.0.1:\(listener.port)/token"]
        try await Application(router: sandboxAPI.router()).test(.router) { client in
            let (status, _) = try await APITests.call(
                client,
                .post,
                "/v1/apps",
                key: "admin-secret",
                body: ["name": "Shop", "bundle_id": "com.example.app", "fcm": ["service_account": .string(account)]]
            )
            #expect(status == 201)
        }
        try await listener.stop()
    }

    @Test func onlyMediaAPlatformAttachesIsHostedAndEveryAnswerIsSandboxed() async throws {
        let (api, _, server, _, _) = try await MediaHostingTests.api(routes: [:])
        try await Application(router: api.router()).test(.router) { client in
            let svg = Array(
                #"<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg"><script>alert(document.domain)</script></svg>"#
                    .utf8
            )
            let pdf = Array("%PDF-1.7\n%\u{e2}\u{e3}\n1 0 obj".utf8) + Array(repeating: 0x20, count: 200)
            for refused in [
                svg, pdf, Array("<!DOCTYPE html><html><script>x</script></html>".utf8),
                MediaSamples.file(MediaSamples.ftyp("heic", ["mif1"]), size: 300),
            ] {
                let (s, _, body) = try await MediaHostingTests.call(
                    client,
                    .post,
                    "/v1/media",
                    body: ByteBuffer(bytes: refused)
                )
                #expect(s == 422, "\(String(decoding: body, as: UTF8.self))")
                let rule = try JSONValue.parse(body)["error"]?["issues"]?.arrayValue?.first?["rule"]?.stringValue
                #expect(rule == "not-attachable" || rule == "unknown-type")
            }
            // Nothing else can store one either.
            #expect(throws: MediaStore.NotHostable.self) { try api.media!.store.put(svg, type: .svg) }
            let (s, _, body) = try await MediaHostingTests.call(
                client,
                .post,
                "/v1/media",
                body: ByteBuffer(bytes: MediaPreflightTests.jpeg)
            )
            #expect(s == 201)
            let path = String(
                try #require(JSONValue.parse(body)["url"]?.stringValue).dropFirst("https://push.example.com".count)
            )
            let etag = "\"" + path.dropFirst("/media/".count).prefix(64) + "\""
            let answers: [(HTTPRequest.Method, HTTPFields, Int)] = [
                (.get, [:], 200), (.head, [:], 200), (.get, [.ifNoneMatch: etag], 304),
                (.get, [.range: "bytes=0-1"], 206),
                (.get, [.range: "bytes=99999999-"], 416),
            ]
            for (method, headers, expected) in answers {
                let (status, h, _) = try await MediaHostingTests.call(client, method, path, key: nil, headers: headers)
                #expect(status == expected)
                #expect(h[HTTPField.Name("X-Content-Type-Options")!] == "nosniff", "\(method) \(expected)")
                #expect(
                    h[HTTPField.Name("Content-Security-Policy")!]?.hasPrefix("sandbox") == true,
                    "\(method) \(expected)"
                )
            }
            let (missing, mh, _) = try await MediaHostingTests.call(
                client,
                .get,
                "/media/" + String(repeating: "a", count: 64) + ".svg",
                key: nil
            )
            #expect(missing == 404 && mh[HTTPField.Name("X-Content-Type-Options")!] == "nosniff")
        }
        try await server.shutdown()
    }

    /// Uploads go to disk as they arrive: the stored file is the body byte for byte, and one over the limit is
    /// refused (413) with nothing left behind.
    @Test func uploadsStreamToDiskAndAnOversizedOneLeavesNothing() async throws {
        let (api, _, server, _, _) = try await MediaHostingTests.api(routes: [:])
        let store = try #require(api.media?.store)
        try await Application(router: api.router()).test(.live) { client in
            let clip = MediaSamples.file(MediaSamples.ftyp("isom", ["iso2", "mp41"]), size: 3_000_000)
            let (s, _, body) = try await MediaHostingTests.call(
                client,
                .post,
                "/v1/media",
                body: ByteBuffer(bytes: clip)
            )
            #expect(s == 201)
            let name = try #require(JSONValue.parse(body)["name"]?.stringValue)
            let stored = try #require(store.file(name))
            #expect(stored.size == clip.count && stored.type == .mp4)
            #expect(FileManager.default.contents(atPath: stored.path).map(Array.init) == clip)
            let tooBig = MediaSamples.file(MediaSamples.ftyp("isom", ["mp41"]), size: MediaRules.largestAppleLimit + 1)
            let (big, _, bigBody) = try await MediaHostingTests.call(
                client,
                .post,
                "/v1/media",
                body: ByteBuffer(bytes: tooBig)
            )
            #expect(big == 413, "\(String(decoding: bigBody.prefix(300), as: UTF8.self))")
        }
        let parts =
            (try? FileManager.default.contentsOfDirectory(atPath: store.directory.appendingPathComponent("up").path))
            ?? []
        #expect(parts.isEmpty, "\(parts)")
        try await server.shutdown()
    }

    /// A client out of failed attempts is refused before any key of its is looked up: the answer is 429 even for a
    /// key that exists (no database work was done to find out), until its budget refills; a key this node found
    /// valid before is still looked up (one address may carry a flood and a legitimate caller).
    @Test func aClientOutOfFailedAttemptsIsRefusedBeforeItsKeyIsLookedUp() async throws {
        let f = try APITests.fixture()
        var api = f.api
        api.authFailureLimiter = RateLimiter(rate: 0.001, burst: 5)
        try await Application(router: api.router()).test(.router) { client in
            let (app, key) = try await APITests.createApp(client)
            #expect(try await APITests.call(client, .get, "/v1/apps/\(app)", key: key).0 == 200)
            let (made, fresh) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/keys",
                key: key,
                body: ["scopes": ["read"]]
            )
            let unused = try #require(fresh["api_key"]?.stringValue, "\(made) \(fresh)")
            for i in 0..<5 {
                #expect(try await APITests.call(client, .get, "/v1/apps/\(app)", key: "made-up-\(i)").0 == 401)
            }
            let (status, body) = try await APITests.call(client, .get, "/v1/apps/\(app)", key: "made-up-6")
            #expect(status == 429 && body["error"]?["code"] == "rate-limited")
            #expect(try await APITests.call(client, .get, "/v1/apps/\(app)", key: unused).0 == 429)
            #expect(try await APITests.call(client, .get, "/v1/apps/\(app)", key: key).0 == 200)
            #expect(try await APITests.call(client, .get, "/v1/apps/\(app)", key: "made-up-7").0 == 429)
            // The admin key is compared in memory, not looked up: it still passes.
            #expect(try await APITests.call(client, .get, "/v1/apps/\(app)", key: "admin-secret").0 == 200)
        }
    }

    /// Anyone may ask whether a node is up; only the operator learns which node it is and why its database is down.
    @Test func healthWithoutAKeySaysTheStatusOnly() async throws {
        let f = try APITests.fixture()
        var api = f.api
        api.nodeID = "host-123-abcdef"
        try await Application(router: api.router()).test(.router) { client in
            for path in ["/health", "/health/live", "/health/ready"] {
                let (status, open) = try await APITests.call(client, .get, path, key: nil)
                #expect(status == 200)
                #expect(Set(open.objectValue?.keys ?? [:].keys) == ["live", "ready", "database"], "\(path): \(open)")
                let (_, wrong) = try await APITests.call(client, .get, path, key: "not-the-admin-key")
                #expect(wrong["node"] == nil)
                let (_, operator_) = try await APITests.call(client, .get, path, key: "admin-secret")
                #expect(operator_["node"] == "host-123-abcdef" && operator_["database_since"] != nil)
                #expect(operator_["version"]?.stringValue == RichPushVersion.current)
            }
        }
    }

    @Test func aReceiptIsBoundToItsDeliveryOnceAndUntilTheEnd() async throws {
        let f = try APITests.fixture()
        let receipts = DeviceReceipts(
            secret: try await f.store.secret(named: "receipts"),
            base: "https://push.example.com"
        )
        var api = f.api
        api.receipts = receipts
        try await Application(router: api.router()).test(.router) { client in
            let (app, key) = try await APITests.createApp(client)
            func send() async throws -> (String, Int64) {
                let (_, accepted) = try await APITests.call(
                    client,
                    .post,
                    "/v1/apps/\(app)/notifications",
                    key: key,
                    body: [
                        "title": "T", "media": "https://cdn.example.com/a.jpg", "ttl": 60,
                        "audience": ["apns_tokens": [.string(String(repeating: "ab", count: 32))]],
                    ]
                )
                let id = try #require(accepted["id"]?.stringValue)
                return (id, try #require(try await f.queue.deliveries(notificationID: id).first?.id))
            }
            let (id, delivery) = try await send()
            let (otherID, otherDelivery) = try await send()
            let report: JSONValue = ["attachments": [], "skipped": []]
            func post(
                _ n: String,
                _ d: Int64,
                until: Date = Date().addingTimeInterval(60)
            ) async throws -> (Int, JSONValue) {
                try await APITests.call(
                    client,
                    .post,
                    "/v1/receipts/" + receipts.token(for: n, delivery: d, until: until),
                    key: nil,
                    body: ["device": "d1", "report": report]
                )
            }
            let expired = try await post(id, delivery, until: Date().addingTimeInterval(-1))
            #expect(expired.0 == 410 && expired.1["error"]?["code"] == "receipt-expired")
            #expect(try await post(id, delivery).0 == 201)
            // One report per delivery, whatever device id the body claims.
            let repeated = try await post(id, delivery)
            #expect(repeated.0 == 409 && repeated.1["error"]?["code"] == "already-reported")
            // A signed address of this notification naming another notification's delivery, or none, records
            // nothing.
            #expect(try await post(id, otherDelivery).0 == 404)
            #expect(try await post(id, 999_999).0 == 404)
            #expect(try await post(otherID, otherDelivery).0 == 201)
            let outcome = try await APITests.call(client, .get, "/v1/apps/\(app)/notifications/\(id)", key: key).1
            #expect(outcome["receipts"]?["count"] == 1)
        }
    }

    @Test func theReceiptSecretIsSealedAtRest() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("sealed-\(UUID().uuidString).sqlite")
            .path
        defer { try? FileManager.default.removeItem(atPath: path) }
        // A secret made before sealing is sealed the first time it is read with a key, and reads the same after.
        let before = try await SQLiteServerStore(pool: SQLiteDeliveryQueue.openPool(path: path)).secret(
            named: "receipts"
        )
        let sealer = try CredentialSealer(key: Array(repeating: 3, count: 32))
        let pool = try SQLiteDeliveryQueue.openPool(path: path)
        let sealedStore = try SQLiteServerStore(pool: pool, sealer: sealer)
        #expect(try await sealedStore.secret(named: "receipts") == before)
        let stored = try await pool.read { db in
            try Data.fetchOne(db, sql: "SELECT value FROM secrets WHERE name = 'receipts'")
        }
        #expect(String(decoding: try #require(stored), as: UTF8.self).hasPrefix("sealed:v1:"))
        #expect(try await SQLiteServerStore(pool: pool, sealer: sealer).secret(named: "receipts") == before)
        let fresh = try await sealedStore.secret(named: "other")
        #expect(fresh.count == 32)
        // Without the key, a sealed secret is an error, never a new secret.
        await #expect(throws: CredentialSealer.Problem.self) {
            try await SQLiteServerStore(pool: pool).secret(named: "receipts")
        }
    }

    @Test func sandboxModeStaysOnLoopbackUnlessForced() throws {
        var c = ServerConfiguration()
        c.sandbox = true
        for host in ["127.0.0.1", "localhost", "::1", "127.8.9.10"] {
            c.host = host
            #expect(throws: Never.self) { try c.check() }
        }
        for host in ["0.0.0.0", "::", "192.168.1.4", "example.com", "127.0.0.1.example.com"] {
            c.host = host
            #expect(throws: ServerConfiguration.Problem.self) { try c.check() }
        }
        c.sandboxPublic = true
        #expect(throws: Never.self) { try c.check() }
        c.sandboxPublic = false
        c.sandbox = false
        #expect(throws: Never.self) { try c.check() }
        // Numbers from flags are range-checked like the file's.
        c.rateLimit = 0
        #expect(throws: ServerConfiguration.Problem.self) { try c.check() }
        c.rateLimit = 10
        c.leaseSeconds = .infinity
        #expect(throws: ServerConfiguration.Problem.self) { try c.check() }
    }
}
