import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOConcurrencyHelpers
import RichPushCore
import RichPushFCM
import RichPushSandbox
import RichPushServer
import RichPushTestSupport
import Testing

/// The API, the queue, the worker and the provider clients against both emulators over real TLS HTTP/2, with
/// 429, 503, GOAWAY and connection resets injected at both: sends to a device, a registry tag, a registry topic and an FCM topic, a
/// scheduled send, and a token the emulator says is gone. Every delivery must end delivered or pruned.
@Suite struct ServerThroughFaultsTests {
    @Test func sendsOfEveryAudienceEndDeliveredThroughFaults() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("faults-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let sandbox = try await Sandbox.start(directory: dir, threads: 1)
        let backend = try SQLiteBackend(path: dir.appendingPathComponent("rp.sqlite").path)
        let (store, registry, queue) = (backend.sqliteStore, backend.sqliteRegistry, backend.sqliteQueue)
        let api = RichPushAPI(
            backend: backend,
            adminKey: "admin-secret-key-0001",
            validation: .init(allowInsecureMedia: true, requireTargets: false)
        )
        let account = try ServiceAccount(contentsOf: sandbox.files["service-account"]!)
        let providers = try Providers.sandbox(sandbox)
        let sender = ProviderDeliverySender(
            providers: providers,
            app: { id in (try? await store.app(id: id)).flatMap { $0 } },
            message: { id in try? await store.message(id: id) }
        )
        let worker = DeliveryWorker(
            configuration: .init(
                batchSize: 50,
                concurrency: 50,
                lease: 30,
                retry: RetryPolicy(baseDelay: 0.01, maxDelay: 0.1, maxAttempts: 30)
            ),
            queue: queue,
            sender: sender,
            prune: { d, _ in _ = try? await registry.prune(appID: d.appID, token: d.target.stored, invalidSince: nil) }
        )

        let ios = (0..<20).map { String(format: "%064x", 0xA000 + $0) }
        let android = (0..<20).map { "fcm-android-\($0)" }
        let idBox = NIOLockedValueBox<[String: String]>([:])
        try await Application(router: api.router()).test(.router) { client in
            func call(
                _ method: HTTPRequest.Method,
                _ uri: String,
                key: String,
                _ body: JSONValue
            ) async throws -> JSONValue {
                try await client.execute(
                    uri: uri,
                    method: method,
                    headers: [.authorization: "Bearer \(key)"],
                    body: ByteBuffer(bytes: body.serialized())
                ) {
                    (try? JSONValue.parse(Array($0.body.readableBytesView))) ?? .null
                }
            }
            let created = try await call(
                .post,
                "/v1/apps",
                key: "admin-secret-key-0001",
                ["name": "Shop", "bundle_id": "com.example.app"]
            )
            let app = try #require(created["app"]?["id"]?.stringValue)
            let key = try #require(created["api_key"]?.stringValue)
            for (i, t) in ios.enumerated() {
                _ = try await call(
                    .post,
                    "/v1/apps/\(app)/devices",
                    key: key,
                    [
                        "token": .string(t), "platform": "ios", "tags": i % 2 == 0 ? ["vip"] : [],
                        "topics": i < 5 ? ["news"] : [],
                    ]
                )
            }
            for (i, t) in android.enumerated() {
                _ = try await call(
                    .post,
                    "/v1/apps/\(app)/devices",
                    key: key,
                    [
                        "token": .string(t), "platform": "android", "tags": i % 2 == 0 ? ["vip"] : [],
                        "topics": i < 5 ? ["news"] : [],
                    ]
                )
            }
            // The first iOS device is gone at Apple: its delivery is pruned, with the device.
            sandbox.apns.registerDevice(ios[0], topic: "com.example.app")
            sandbox.apns.unregisterDevice(ios[0])
            for (fault, count) in [
                (APNsFault.status(429, reason: "TooManyRequests", retryAfter: 1), 3),
                (.status(503, reason: "ServiceUnavailable"), 3), (.goAway(reason: "Shutdown"), 2), (.reset, 2),
            ] {
                sandbox.apns.inject(fault, count: count)
            }
            for (fault, count) in [
                (FCMFault.quotaExceeded(retryAfter: 1), 3), (.unavailable(retryAfter: nil), 3), (.goAway, 2),
                (.reset, 2),
            ] {
                sandbox.fcm.inject(fault, count: count)
            }
            let sends: [(String, JSONValue)] = [
                ("device", ["title": "One", "audience": ["tokens": .array([.string(ios[3])])]]),
                ("tag", ["title": "VIP", "media": "https://cdn.example.com/a.jpg", "audience": ["tag": "vip"]]),
                ("topic", ["title": "News", "audience": ["topic": "news"]]),
                ("fcm-topic", ["title": "Sports", "audience": ["fcm_topic": "sports"]]),
                (
                    "scheduled",
                    [
                        "title": "Later", "audience": ["tokens": .array([.string(android[1])])],
                        "send_at": .double(Date().addingTimeInterval(1).timeIntervalSince1970),
                    ]
                ),
            ]
            for (name, body) in sends {
                let id = try #require(
                    try await call(.post, "/v1/apps/\(app)/notifications", key: key, body)["id"]?.stringValue
                )
                idBox.withLockedValue { $0[name] = id }
            }
            await api.fanOuts.idle()
        }
        let ids = idBox.withLockedValue { $0 }
        let started = Date()
        while Date().timeIntervalSince(started) < 60 {
            let c = try await queue.counts()
            if (c[.queued] ?? 0) + (c[.leased] ?? 0) == 0 { break }
            if try await worker.runOnce() == 0 { try await Task.sleep(nanoseconds: 50_000_000) }
        }
        func states(_ name: String) async throws -> [String: Int] {
            var out: [String: Int] = [:]
            for d in try await queue.deliveries(notificationID: ids[name]!) {
                out[d.state.rawValue + (d.reason.map { ":" + $0 } ?? ""), default: 0] += 1
            }
            return out
        }
        #expect(try await states("device") == ["delivered": 1])
        #expect(try await states("tag") == ["delivered": 19, "pruned:Unregistered": 1])
        // ios[0] follows the topic too: its topic delivery, queued before the pruning, is refused the same way.
        #expect(try await states("topic") == ["delivered": 9, "pruned:Unregistered": 1])
        #expect(try await states("fcm-topic") == ["delivered": 1])
        #expect(try await states("scheduled") == ["delivered": 1])
        #expect(
            try await registry.device(appID: (try await store.notification(id: ids["tag"]!))!.appID, token: ios[0])
                == nil
        )
        // Every kind of fault was met, and every send arrived at least once.
        #expect(sandbox.fcm.recorded().contains { $0.json["topic"] == "sports" })
        let records: [RecordedAPNsNotification] = sandbox.apns.recorded()
        let reached: Set<String> = Set(records.map { $0.deviceToken })
        let indices: [Int] = (1..<20).filter { $0 % 2 == 0 || $0 < 5 }
        let expected: Set<String> = Set(indices.map { ios[$0] })
        #expect(reached == expected, "\(expected.subtracting(reached))")
        #expect(sandbox.apns.pendingFaults == 0 && sandbox.fcm.pendingFaults == 0)
        #expect(
            (sandbox.apns.rejectedCounts["TooManyRequests"] ?? 0) == 3
                && (sandbox.apns.rejectedCounts["ServiceUnavailable"] ?? 0) == 3
        )
        await providers.shutdown()
        await sandbox.stop()
    }
}
