import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOConcurrencyHelpers
import RichPushCore
import RichPushSandbox
import RichPushServer
import RichPushTestSupport
import Testing

/// Updates in place through the API against the APNs emulator over TLS HTTP/2: a root and a run of updates to 20
/// devices while two workers send, the emulator answering after random delays and refusing a third of the
/// requests with 503 (retried). Every device's list ends on the newest version, no device is ever sent a version
/// older than one it already got, and every delivery ends delivered or superseded. Then each refusal the route
/// names.
@Suite struct NotificationUpdateServerTests {
    static let admin = "admin-secret-key-0001"

    struct Harness {
        let sandbox: Sandbox
        let backend: SQLiteBackend
        let api: RichPushAPI
        let providers: Providers
        let workers: [DeliveryWorker]

        /// Runs until nothing is queued or leased, at most 90 s (the workers run on their own meanwhile).
        func settled() async throws {
            let started = Date()
            while Date().timeIntervalSince(started) < 90 {
                let c = try await backend.queue.counts()
                if (c[.queued] ?? 0) + (c[.leased] ?? 0) == 0 { return }
                try await Task.sleep(nanoseconds: 50_000_000)
            }
            Issue.record("deliveries still queued after 90 s: \(try await backend.queue.counts())")
        }
    }

    func withHarness(
        delay: ResponseDelay = .none,
        _ body: @escaping @Sendable (Harness, TestClientProtocol) async throws -> Void
    ) async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("upd-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let sandbox = try await Sandbox.start(
            directory: dir,
            apnsConfiguration: .init(responseDelay: delay),
            threads: 1
        )
        let backend = try SQLiteBackend(path: dir.appendingPathComponent("rp.sqlite").path)
        let providers = try Providers.sandbox(sandbox)
        let api = RichPushAPI(
            backend: backend,
            adminKey: Self.admin,
            validation: .init(requireTargets: false),
            providers: providers
        )
        let store = backend.sqliteStore
        let sender = ProviderDeliverySender(
            providers: providers,
            app: { id in (try? await store.app(id: id)).flatMap { $0 } },
            message: { id in try? await store.message(id: id) }
        )
        // Two workers with small batches: versions of one device meet in different workers.
        let workers = (1...2).map { n in
            DeliveryWorker(
                configuration: .init(
                    owner: "w\(n)",
                    batchSize: 7,
                    concurrency: 7,
                    lease: 30,
                    idleWait: 0.02,
                    retry: RetryPolicy(baseDelay: 0.05, maxDelay: 0.3, maxAttempts: 30)
                ),
                queue: backend.sqliteQueue,
                sender: sender,
                updates: backend.updates
            )
        }
        let harness = Harness(sandbox: sandbox, backend: backend, api: api, providers: providers, workers: workers)
        do {
            try await Application(router: api.router()).test(.router) { client in try await body(harness, client) }
        } catch {
            await providers.shutdown()
            await sandbox.stop()
            throw error
        }
        await providers.shutdown()
        await sandbox.stop()
    }

    func call(
        _ client: TestClientProtocol,
        _ method: HTTPRequest.Method,
        _ uri: String,
        _ body: JSONValue? = nil,
        headers: HTTPFields = [:]
    ) async throws -> (Int, JSONValue, HTTPFields) {
        var h = headers
        h[.authorization] = "Bearer \(Self.admin)"
        return try await client.execute(
            uri: uri,
            method: method,
            headers: h,
            body: body.map { ByteBuffer(bytes: $0.serialized()) }
        ) { ($0.status.code, (try? JSONValue.parse(Array($0.body.readableBytesView))) ?? .null, $0.headers) }
    }

    func rules(_ answer: JSONValue) -> [String] {
        answer["error"]?["issues"]?.arrayValue?.compactMap { $0["rule"]?.stringValue } ?? []
    }

    func makeApp(_ client: TestClientProtocol) async throws -> String {
        let (_, created, _) = try await call(
            client,
            .post,
            "/v1/apps",
            ["name": "Scores", "bundle_id": "com.example.app"]
        )
        return try #require(created["app"]?["id"]?.stringValue)
    }

    @Test func devicesEndOnTheNewestVersionAndNeverGoBack() async throws {
        try await withHarness(delay: ResponseDelay(milliseconds: 1, jitterMilliseconds: 60)) { h, client in
            let app = try await makeApp(client)
            let tokens = (0..<20).map { String(format: "%064x", 0xD00 + $0) }
            func message(_ v: Int) -> JSONValue {
                ["alert": ["title": "Score", "body": .string("v\(v)")], "collapse_id": "match-7"]
            }
            let root: JSONValue = [
                "alert": ["title": "Score", "body": "v0"], "collapse_id": "match-7",
                "audience": ["apns_tokens": .array(tokens.map { .string($0) })],
            ]
            let (status, sent, _) = try await call(client, .post, "/v1/apps/\(app)/notifications", root)
            #expect(status == 202)
            let rootID = try #require(sent["id"]?.stringValue)
            var ids = [rootID: 0]

            // The first update comes before any worker runs: every root delivery is superseded at acceptance.
            let (s1, u1, _) = try await call(
                client,
                .post,
                "/v1/apps/\(app)/notifications/\(rootID)/updates",
                message(1)
            )
            #expect(s1 == 202)
            #expect(
                u1["version"] == 1 && u1["deliveries"] == 20 && u1["superseded"] == 20
                    && u1["root_id"] == .string(rootID)
            )
            ids[try #require(u1["id"]?.stringValue)] = 1

            // Then the workers send while updates keep coming, a third of the sends refused with 503 and retried.
            h.sandbox.apns.inject(.status(503, reason: "ServiceUnavailable"), rate: 0.33)
            let running = h.workers.map { w in Task { await w.run() } }
            for v in 2...8 {
                try await Task.sleep(nanoseconds: UInt64.random(in: 10_000_000...120_000_000))
                // Any version's id names the family.
                let via = ids.first { $0.value == v - 1 }!.key
                let (s, u, _) = try await call(
                    client,
                    .post,
                    "/v1/apps/\(app)/notifications/\(via)/updates",
                    message(v)
                )
                #expect(s == 202 && u["version"] == .int(Int64(v)))
                ids[try #require(u["id"]?.stringValue)] = v
            }
            try await h.settled()
            h.sandbox.apns.clearFaults()
            for w in h.workers { w.stop() }
            for t in running { await t.value }

            #expect(h.sandbox.apns.rejectedCounts["ServiceUnavailable", default: 0] > 0)
            for token in tokens {
                let got = h.sandbox.apns.recorded(token: token).compactMap {
                    $0.payloadJSON?["aps"]?["alert"]?["body"]?.stringValue
                }.compactMap { Int($0.dropFirst()) }
                // Never an older state after a newer one, and the newest last.
                #expect(got == got.sorted() && Set(got).count == got.count, "\(token): \(got)")
                #expect(got.last == 8, "\(token): \(got)")
                let shown = h.sandbox.apns.notificationCenter(token: token)
                #expect(shown.count == 1 && shown.first?.collapseID == "match-7")
            }
            // Every delivery ended delivered or superseded; the newest version was delivered everywhere.
            var byState: [DeliveryState: Int] = [:]
            for (id, v) in ids {
                let c = try await h.backend.queue.counts(notificationID: id)
                for (s, n) in c { byState[s, default: 0] += n }
                if v == 8 { #expect(c == [.delivered: 20]) }
                if v == 0 { #expect(c == [.superseded: 20]) }
            }
            #expect(Set(byState.keys).isSubset(of: [.delivered, .superseded]), "\(byState)")
            // The outcomes route tells the version and the newest.
            let (_, outcome, _) = try await call(client, .get, "/v1/apps/\(app)/notifications/\(rootID)")
            #expect(outcome["version"] == 0 && outcome["latest_version"] == 8 && outcome["counts"]?["superseded"] == 20)
        }
    }

    @Test func theRouteNamesEachRefusal() async throws {
        try await withHarness { h, client in
            let app = try await makeApp(client)
            let token = String(format: "%064x", 0xE01)
            let base = "/v1/apps/\(app)/notifications"
            func send(_ m: JSONValue) async throws -> String {
                let (s, a, _) = try await call(client, .post, base, m)
                #expect(s == 202, "\(a)")
                return a["id"]?.stringValue ?? ""
            }
            let plain = try await send(["alert": "hi", "audience": ["apns_tokens": [.string(token)]]])
            let (s1, a1, _) = try await call(client, .post, "\(base)/\(plain)/updates", ["alert": "again"])
            #expect(s1 == 409 && a1["error"]?["code"] == "not-updatable")

            let root = try await send([
                "alert": "hi", "collapse_id": "c1", "audience": ["apns_tokens": [.string(token)]],
            ])
            let (s2, a2, _) = try await call(
                client,
                .post,
                "\(base)/\(root)/updates",
                ["alert": "x", "audience": ["all": true], "send_at": 1, "collapse_id": "other", "live_activity": [:]]
            )
            #expect(s2 == 422)
            #expect(Set(rules(a2)) == ["not-in-update", "update-collapse-id"])
            let (s3, a3, _) = try await call(client, .post, "\(base)/\(root)/updates", ["alert": ["title": 7]])
            #expect(s3 == 422 && !rules(a3).isEmpty)
            let (s4, _, _) = try await call(client, .post, "\(base)/no-such-id/updates", ["alert": "x"])
            #expect(s4 == 404)
            let (s5, _, _) = try await call(client, .post, "\(base)/\(root)/updates", .array([]))
            #expect(s5 == 422)

            // Another app's notification is not found.
            let (_, other, _) = try await call(
                client,
                .post,
                "/v1/apps",
                ["name": "Other", "bundle_id": "com.example.b"]
            )
            let otherApp = try #require(other["app"]?["id"]?.stringValue)
            let (s6, _, _) = try await call(
                client,
                .post,
                "/v1/apps/\(otherApp)/notifications/\(root)/updates",
                ["alert": "x"]
            )
            #expect(s6 == 404)

            // The same Idempotency-Key answers as the first time and takes no version.
            let key: HTTPFields = [HTTPField.Name("Idempotency-Key")!: "upd-1"]
            let (s7, a7, _) = try await call(client, .post, "\(base)/\(root)/updates", ["alert": "v1"], headers: key)
            let (s8, a8, _) = try await call(client, .post, "\(base)/\(root)/updates", ["alert": "v1"], headers: key)
            #expect(s7 == 202 && s8 == 202 && a7 == a8 && a7["version"] == 1)
            let (_, a9, _) = try await call(client, .post, "\(base)/\(root)/updates", ["alert": "v2"])
            #expect(a9["version"] == 2)
        }
    }
}
