import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOConcurrencyHelpers
import RichPushAPNs
import RichPushCore
import RichPushFCM
import RichPushSandbox
import RichPushServer
import RichPushTestSupport
import Testing

/// The HTTP API over a real SQLite database.
@Suite struct APITests {
    struct Fixture {
        let api: RichPushAPI
        let queue: SQLiteDeliveryQueue
        let store: SQLiteServerStore
        let registry: SQLiteDeviceRegistry
    }

    static func fixture() throws -> Fixture {
        let backend = try SQLiteBackend(
            path: FileManager.default.temporaryDirectory.appendingPathComponent("api-\(UUID().uuidString).sqlite").path
        )
        let api = RichPushAPI(
            backend: backend,
            adminKey: "admin-secret",
            validation: .init(allowInsecureMedia: true, requireTargets: false)
        )
        return Fixture(
            api: api,
            queue: backend.sqliteQueue,
            store: backend.sqliteStore,
            registry: backend.sqliteRegistry
        )
    }

    typealias Client = any TestClientProtocol

    static func call(
        _ client: Client,
        _ method: HTTPRequest.Method,
        _ uri: String,
        key: String?,
        body: JSONValue? = nil,
        headers extra: [(String, String)] = []
    ) async throws -> (Int, JSONValue) {
        var headers = HTTPFields()
        if let key { headers[.authorization] = "Bearer \(key)" }
        for (n, v) in extra { headers[HTTPField.Name(n)!] = v }
        return try await client.execute(
            uri: uri,
            method: method,
            headers: headers,
            body: body.map { ByteBuffer(bytes: $0.serialized()) }
        ) { response in
            (Int(response.status.code), (try? JSONValue.parse(Array(response.body.readableBytesView))) ?? .null)
        }
    }

    static func createApp(_ client: Client) async throws -> (String, String) {
        let (status, body) = try await call(
            client,
            .post,
            "/v1/apps",
            key: "admin-secret",
            body: ["name": "Shop", "bundle_id": "com.example.app", "fcm_project_id": "richpush-sandbox"]
        )
        #expect(status == 201)
        return (try #require(body["app"]?["id"]?.stringValue), try #require(body["api_key"]?.stringValue))
    }

    @Test func keysAreRequiredScopedAndStoredHashed() async throws {
        let f = try Self.fixture()
        let app = Application(router: f.api.router())
        try await app.test(.router) { client in
            #expect(try await Self.call(client, .get, "/health", key: nil).0 == 200)
            #expect(try await Self.call(client, .post, "/v1/apps", key: nil, body: ["name": "x"]).0 == 401)
            #expect(try await Self.call(client, .post, "/v1/apps", key: "wrong", body: ["name": "x"]).0 == 401)
            let (appID, key) = try await Self.createApp(client)
            #expect(key.hasPrefix("rp_") && key.count > 40)
            // Only the hash is stored.
            #expect(try await f.store.authorize(key: key)?.appID == appID)
            #expect(try await f.store.authorize(key: APIKeys.hash(key)) == nil)
            let (otherApp, otherKey) = try await Self.createApp(client)
            #expect(try await Self.call(client, .get, "/v1/apps/\(appID)/notifications/x", key: otherKey).0 == 403)
            #expect(try await Self.call(client, .get, "/v1/apps/\(otherApp)/notifications/x", key: otherKey).0 == 404)
            #expect(try await Self.call(client, .get, "/v1/apps/\(appID)/notifications/x", key: "rp_unknown").0 == 401)
            #expect(try await Self.call(client, .get, "/v1/nowhere", key: key).0 == 404)
        }
    }

    @Test func badInputIsAnsweredWithEveryProblemNamed() async throws {
        let f = try Self.fixture()
        let app = Application(router: f.api.router())
        try await app.test(.router) { client in
            let (appID, key) = try await Self.createApp(client)
            let (s1, b1) = try await Self.call(
                client,
                .post,
                "/v1/apps/\(appID)/notifications",
                key: key,
                body: ["title": 5, "media": "ftp://x/a.webp", "ttl": -1]
            )
            #expect(s1 == 422)
            let rules = Set((b1["error"]?["issues"]?.arrayValue ?? []).compactMap { $0["path"]?.stringValue })
            #expect(rules.isSuperset(of: ["title", "media[0].url", "ttl", "audience"]), "\(b1)")
            let raw = try await client.execute(
                uri: "/v1/apps/\(appID)/notifications",
                method: .post,
                headers: [.authorization: "Bearer \(key)"],
                body: ByteBuffer(string: "{not json")
            ) { Int($0.status.code) }
            #expect(raw == 400)
            let big = JSONValue.object(["body": .string(String(repeating: "x", count: 300_000))])
            let (bigStatus, bigBody) = try await Self.call(
                client,
                .post,
                "/v1/apps/\(appID)/notifications",
                key: key,
                body: big
            )
            #expect(bigStatus == 413, "\(bigStatus) \(bigBody)")
            let (s2, b2) = try await Self.call(
                client,
                .post,
                "/v1/apps/\(appID)/devices",
                key: key,
                body: ["token": "not-hex", "platform": "ios"]
            )
            #expect(s2 == 422 && b2["error"]?["issues"]?.arrayValue?.first?["rule"] == "apns-token")
        }
    }

    /// A registry send is answered before its fan-out has made a delivery: until the fan-out is done, its outcome
    /// says `fanning_out`, so that a follower (`richpush send --server`, the console) does not read "none queued or
    /// leased" of a notification with no deliveries yet as its end.
    @Test func aNotificationStillFanningOutSaysSo() async throws {
        let f = try Self.fixture()
        let app = Application(router: f.api.router())
        try await app.test(.router) { client in
            let (appID, key) = try await Self.createApp(client)
            for i in 1...3 {
                let (s, _) = try await Self.call(
                    client,
                    .post,
                    "/v1/apps/\(appID)/devices",
                    key: key,
                    body: ["token": .string(String(format: "%064x", i)), "platform": "ios", "tags": ["beta"]]
                )
                #expect(s == 200)
            }
            // Accepted as the route accepts it, its fan-out not yet run (the route runs it after its answer).
            let accepted = try await f.api.intake.accept(
                AcceptPlan(
                    notification: .init(
                        id: "n-pending",
                        appID: appID,
                        message: PushMessage(alert: .init(title: "Hi")).json,
                        response: .null,
                        createdAt: Date()
                    ),
                    idempotencyKey: nil,
                    audience: .tag("beta"),
                    notBefore: Date(),
                    expiresAt: nil
                )
            ) { _ in .null }
            #expect(accepted.fanOutPending)
            let path = "/v1/apps/\(appID)/notifications/n-pending"
            let (s1, before) = try await Self.call(client, .get, path, key: key)
            #expect(s1 == 200 && before["fanning_out"] == true && before["total"] == 0, "\(before)")
            #expect(try await f.api.intake.completeFanOut(notificationID: "n-pending") == 3)
            // The answer read while it was pending stays fresh a while (the counts' cache, a second or more: the
            // longer its read took) and says pending with its counts; every answer is one or the other, never "done"
            // with deliveries missing.
            var after: JSONValue = .null
            for _ in 0..<400 {
                let (s2, a) = try await Self.call(client, .get, path, key: key)
                after = a
                #expect(s2 == 200 && (a["fanning_out"] == true || a["total"] == 3), "\(a)")
                if a["fanning_out"] == false { break }
                try await Task.sleep(nanoseconds: 50_000_000)
            }
            #expect(after["fanning_out"] == false && after["counts"]?["queued"] == 3, "\(after)")
            // A send to named tokens has all its deliveries at its answer.
            let (s3, direct) = try await Self.call(
                client,
                .post,
                "/v1/apps/\(appID)/notifications",
                key: key,
                body: ["title": "t", "audience": ["apns_tokens": [.string(String(format: "%064x", 9))]]]
            )
            let id = try #require(direct["id"]?.stringValue, "\(s3) \(direct)")
            let (_, outcome) = try await Self.call(client, .get, "/v1/apps/\(appID)/notifications/\(id)", key: key)
            #expect(outcome["fanning_out"] == false && outcome["total"] == 1, "\(outcome)")
        }
    }

    @Test func aSendIsAcceptedAtOnceFannedOutAndReplayedByIdempotencyKey() async throws {
        let f = try Self.fixture()
        let app = Application(router: f.api.router())
        try await app.test(.router) { client in
            let (appID, key) = try await Self.createApp(client)
            for i in 0..<30 {
                let ios = i % 3 != 0
                let (s, _) = try await Self.call(
                    client,
                    .post,
                    "/v1/apps/\(appID)/devices",
                    key: key,
                    body: [
                        "token": .string(ios ? String(format: "%064x", i + 1) : "fcm-token-\(i)"),
                        "platform": .string(ios ? "ios" : "android"),
                        "tags": i % 2 == 0 ? ["even"] : [], "user_id": .string("u\(i % 5)"),
                    ]
                )
                #expect(s == 200)
            }
            let message: JSONValue = [
                "title": "Sale", "media": "https://cdn.example.com/a.jpg", "audience": ["tag": "even"],
            ]
            let (s1, b1) = try await Self.call(
                client,
                .post,
                "/v1/apps/\(appID)/notifications",
                key: key,
                body: message,
                headers: [("Idempotency-Key", "order-42")]
            )
            #expect(s1 == 202)
            let id = try #require(b1["id"]?.stringValue)
            let (s2, b2) = try await Self.call(
                client,
                .post,
                "/v1/apps/\(appID)/notifications",
                key: key,
                body: message,
                headers: [("Idempotency-Key", "order-42")]
            )
            #expect(s2 == 202 && b2 == b1)
            await f.api.fanOuts.idle()
            #expect(try await f.queue.deliveries(notificationID: id).count == 15)
            let (s3, b3) = try await Self.call(client, .get, "/v1/apps/\(appID)/notifications/\(id)", key: key)
            #expect(s3 == 200 && b3["total"] == 15 && b3["counts"]?["queued"] == 15)
            // A scheduled send waits in the queue until its time.
            let later = Date().addingTimeInterval(3600).timeIntervalSince1970
            let (_, b4) = try await Self.call(
                client,
                .post,
                "/v1/apps/\(appID)/notifications",
                key: key,
                body: ["body": "later", "audience": ["user": "u1"], "send_at": .double(later)]
            )
            await f.api.fanOuts.idle()
            let scheduled = try await f.queue.deliveries(notificationID: try #require(b4["id"]?.stringValue))
            #expect(
                scheduled.count == 6 && scheduled.allSatisfy { abs($0.notBefore.timeIntervalSince1970 - later) < 0.01 }
            )
            #expect(try await f.queue.claim(owner: "w", limit: 100, now: Date(), lease: 30).count == 15)
            // Receipts from devices, as the device library reports them.
            let report: JSONValue = [
                "attachments": [["uti": "public.jpeg"]],
                "skipped": [["url": "https://x/b.webp", "reason": "unsupported-type"]], "elapsed_ms": 40,
                "deadline_hit": false,
            ]
            #expect(
                try await Self.call(
                    client,
                    .post,
                    "/v1/apps/\(appID)/notifications/\(id)/receipts",
                    key: key,
                    body: ["token": "fcm-token-0", "report": report]
                ).0 == 201
            )
            // One report per delivery; a token the notification was not sent to has none.
            #expect(
                try await Self.call(
                    client,
                    .post,
                    "/v1/apps/\(appID)/notifications/\(id)/receipts",
                    key: key,
                    body: ["token": "fcm-token-0", "report": report]
                ).0 == 409
            )
            #expect(
                try await Self.call(
                    client,
                    .post,
                    "/v1/apps/\(appID)/notifications/\(id)/receipts",
                    key: key,
                    body: ["token": "fcm-token-1", "report": report]
                ).0 == 404
            )
            #expect(
                try await Self.call(
                    client,
                    .post,
                    "/v1/apps/\(appID)/notifications/\(id)/receipts",
                    key: key,
                    body: [
                        "token": .string(String(format: "%064x", 3)),
                        "report": ["attachments": [], "skipped": [["reason": "too-large"]]],
                    ]
                ).0 == 201
            )
            #expect(
                try await Self.call(
                    client,
                    .post,
                    "/v1/apps/\(appID)/notifications/\(id)/receipts",
                    key: key,
                    body: ["report": 5]
                ).0 == 422
            )
            #expect(
                try await Self.call(
                    client,
                    .post,
                    "/v1/apps/\(appID)/notifications/nope/receipts",
                    key: key,
                    body: ["token": "t", "report": [:]]
                ).0 == 404
            )
            let (_, withReceipts) = try await Self.call(client, .get, "/v1/apps/\(appID)/notifications/\(id)", key: key)
            #expect(
                withReceipts["receipts"] == [
                    "count": 2, "with_media": 1, "deadline_hit": 0,
                    "skipped_reasons": ["unsupported-type": 1, "too-large": 1],
                ]
            )
        }
    }

    @Test func endToEndThroughTheWorkerToTheEmulators() async throws {
        let f = try Self.fixture()
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("e2e-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let sandbox = try await Sandbox.start(directory: dir, threads: 1)
        let apns = try sandbox.apnsClient(requestTimeout: 10)
        let fcm = try sandbox.fcmClient(requestTimeout: 10)
        let app = Application(router: f.api.router())
        try await app.test(.router) { client in
            let (appID, key) = try await Self.createApp(client)
            let tokens = [String(repeating: "ab", count: 32), String(repeating: "cd", count: 32)]
            for t in tokens {
                _ = try await Self.call(
                    client,
                    .post,
                    "/v1/apps/\(appID)/devices",
                    key: key,
                    body: ["token": .string(t), "platform": "ios"]
                )
            }
            _ = try await Self.call(
                client,
                .post,
                "/v1/apps/\(appID)/devices",
                key: key,
                body: ["token": "fcm-e2e-token-1", "platform": "android"]
            )
            sandbox.apns.registerDevice(tokens[1], topic: "com.example.app")
            sandbox.apns.unregisterDevice(tokens[1])
            let (_, accepted) = try await Self.call(
                client,
                .post,
                "/v1/apps/\(appID)/notifications",
                key: key,
                body: [
                    "title": "E2E", "media": "https://cdn.example.com/a.jpg", "android_channel_id": "orders",
                    "audience": ["all": true],
                ]
            )
            let id = try #require(accepted["id"]?.stringValue)
            await f.api.fanOuts.idle()

            let sender = ProviderDeliverySender(providers: try .sandbox(sandbox, apns: apns, fcm: fcm)) { id in
                try? await f.store.message(id: id)
            }
            let registry = f.registry
            let worker = DeliveryWorker(
                queue: f.queue,
                sender: sender,
                metrics: f.api.metrics,
                prune: { d, _ in
                    _ = try? await registry.prune(appID: d.appID, token: d.target.stored, invalidSince: nil)
                }
            )
            try await worker.runOnce()
            let (_, outcome) = try await Self.call(client, .get, "/v1/apps/\(appID)/notifications/\(id)", key: key)
            #expect(outcome["counts"] == ["delivered": 2, "pruned": 1], "\(outcome)")
            #expect(try await f.registry.device(appID: appID, token: tokens[1]) == nil)
            #expect(sandbox.apns.recorded(token: tokens[0]).first?.payloadJSON?["rp"]?["id"] == .string(id))
            #expect(sandbox.fcm.acceptedCount == 1)
            // A message field reaches the provider with nothing in the server written for it.
            #expect(sandbox.fcm.recorded().first?.message["android"]?["notification"]?["channel_id"] == "orders")
            let metrics = try await client.execute(uri: "/metrics", method: .get) { String(buffer: $0.body) }
            #expect(
                metrics.contains(
                    #"richpush_delivery_attempts_total{provider="apns",state="delivered",reason="none"} 1"#
                ),
                "\(metrics)"
            )
            #expect(
                metrics.contains(
                    #"richpush_delivery_attempts_total{provider="apns",state="pruned",reason="Unregistered"} 1"#
                )
            )
            #expect(metrics.contains(#"richpush_queue_deliveries{state="delivered"} 2"#))
            // Per app, without the reason.
            #expect(metrics.contains(#"richpush_app_notifications_accepted_total{app="\#(appID)"} 1"#), "\(metrics)")
            #expect(
                metrics.contains(
                    #"richpush_app_delivery_attempts_total{app="\#(appID)",provider="apns",state="delivered"} 1"#
                )
            )
            #expect(metrics.contains("richpush_notifications_accepted_total 1"))
            #expect(metrics.contains(#"richpush_delivery_latency_seconds_count{provider="fcm"} 1"#))
        }
        await apns.shutdown()
        await fcm.shutdown()
        await sandbox.stop()
    }
}

@Suite struct OpenAPITests {
    /// Every route is described, the document is served, and it parses as OpenAPI 3 (checked by Python's YAML parser).
    /// A notification's targets a page at a time: `limit`, then `after` the page's `next_after` until it is absent.
    @Test func outcomesArePagedByNextAfter() async throws {
        let f = try APITests.fixture()
        let app = Application(router: f.api.router())
        try await app.test(.router) { client in
            let (appID, key) = try await APITests.createApp(client)
            let tokens = (1...5).map { String(format: "%064x", $0) }
            let (status, accepted) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(appID)/notifications",
                key: key,
                body: ["title": "t", "audience": ["apns_tokens": .array(tokens.map(JSONValue.string))]]
            )
            #expect(status == 202)
            let id = try #require(accepted["id"]?.stringValue)
            let base = "/v1/apps/\(appID)/notifications/\(id)"
            var seen: [String] = []
            var after: Int64?
            var pages = 0
            repeat {
                let (s, page) = try await APITests.call(
                    client,
                    .get,
                    base + "?limit=2" + (after.map { "&after=\($0)" } ?? ""),
                    key: key
                )
                #expect(s == 200 && page["total"] == 5)
                seen += (page["deliveries"]?.arrayValue ?? []).compactMap { $0["target"]?.stringValue }
                after = page["next_after"]?.intValue
                pages += 1
            } while after != nil && pages < 10
            #expect(pages == 3 && seen == tokens)
            #expect(try await APITests.call(client, .get, base, key: key).1["next_after"] == nil)
            for bad in ["?limit=0", "?limit=1001", "?limit=x", "?after=-1", "?after=1e3"] {
                let (s, body) = try await APITests.call(client, .get, base + bad, key: key)
                #expect(s == 422, "\(bad)")
                #expect(
                    body["error"]?["message"]?.stringValue?.contains(bad.hasPrefix("?limit") ? "limit" : "after")
                        == true
                )
            }
        }
    }

    @Test func theDocumentDescribesEveryRouteAndIsServed() async throws {
        let doc = RichPushAPI.openAPIDocument
        #expect(doc.hasPrefix("openapi: 3"))
        let script = """
            import sys, yaml, json
            from openapi_spec_validator import validate
            d = yaml.safe_load(sys.stdin.read())
            validate(d)
            print(json.dumps(sorted([m + ' ' + p for p, ops in d['paths'].items() for m in ops if m in ('get','head','post','put','delete','patch','options')])))
            """
        let python = try await Python.run(script, stdin: doc)
        #expect(
            python.status == 0,
            "the document is not valid OpenAPI (or python3 -m pip install pyyaml openapi-spec-validator)"
        )
        let documented = try JSONValue.parse(python.output).arrayValue?.compactMap(\.stringValue) ?? []
        #expect(
            documented
                == RichPushAPI.routes(of: try APITests.fixture().api.router()).map { "\($0.method) \($0.path)" }
                .sorted()
        )
        let f = try APITests.fixture()
        let app = Application(router: f.api.router())
        try await app.test(.router) { client in
            let served = try await client.execute(uri: "/openapi.yaml", method: .get) { String(buffer: $0.body) }
            #expect(served == doc)
        }
    }
}

@Suite struct APILimitsTests {
    @Test func wrongMethodsAre405WithAllow() async throws {
        let f = try APITests.fixture()
        let app = Application(router: f.api.router())
        try await app.test(.router) { client in
            try await client.execute(uri: "/v1/apps", method: .put) { r in
                #expect(r.status.code == 405 && r.headers[.allow] == "GET, HEAD, POST")
            }
            try await client.execute(uri: "/v1/apps/x/notifications/y", method: .delete) { r in
                #expect(r.status.code == 405 && r.headers[.allow] == "GET, HEAD")
            }
            try await client.execute(uri: "/v1/apps/x/devices/t", method: .get) { r in
                #expect(r.status.code == 405 && r.headers[.allow] == "DELETE")
            }
            try await client.execute(uri: "/v1/unknown", method: .get) { r in #expect(r.status.code == 404) }
            // HEAD wherever GET is, but for a live view's stream: its place would be held for good by an answer
            // whose body is never written.
            try await client.execute(uri: "/v1/apps/x/notifications/y/events", method: .head) { r in
                #expect(r.status.code == 405 && r.headers[.allow] == "GET")
            }
            try await client.execute(uri: "/health", method: .head) { r in
                #expect(r.status.code == 200 && r.body.readableBytes == 0)
            }
            // Methods no route takes are 405 too, TRACE and OPTIONS included.
            for method in [HTTPRequest.Method.trace, .options] {
                for path in ["/health", "/metrics", "/v1/media", "/v1/apps/x"] {
                    try await client.execute(uri: path, method: method) { r in
                        #expect(r.status.code == 405, "\(method) \(path)")
                    }
                }
            }
        }
    }

    @Test func aKeyOverItsRateGets429WithRetryAfter() async throws {
        var f = try APITests.fixture()
        let clock = ManualClock()
        var api = f.api
        api.limiter = RateLimiter(rate: 2, burst: 3, sweepAbove: 1_000, now: { clock.now })
        api.authFailureLimiter = RateLimiter(rate: 1, burst: 4, now: { clock.now })
        f = APITests.Fixture(api: api, queue: f.queue, store: f.store, registry: f.registry)
        let limiter = f.api.limiter
        let app = Application(router: f.api.router())
        try await app.test(.router) { client in
            let (appID, key) = try await APITests.createApp(client)
            let (_, other) = try await APITests.createApp(client)
            let path = "/v1/apps/\(appID)/notifications/b"
            var statuses: [Int] = []
            for _ in 0..<5 { statuses.append(try await APITests.call(client, .get, path, key: key).0) }
            #expect(statuses == [404, 404, 404, 429, 429])
            try await client.execute(uri: path, method: .get, headers: [.authorization: "Bearer \(key)"]) { r in
                #expect(r.status.code == 429 && r.headers[.retryAfter] == "1")
            }
            // Another key has a bucket of its own.
            #expect(try await APITests.call(client, .get, path, key: other).0 == 403)
            // Unknown keys are counted against the client's address, never given buckets: thousands of random bearers
            // (more than the table holds before it sweeps) neither grow it nor reset the throttled key.
            var unknown: [Int] = []
            for i in 0..<3_000 { unknown.append(try await APITests.call(client, .get, path, key: "rp_random_\(i)").0) }
            #expect(unknown.prefix(4) == [401, 401, 401, 401] && Set(unknown.dropFirst(4)) == [429])
            #expect(limiter.trackedKeys == 3)  // the two apps' keys and the admin key
            #expect(try await APITests.call(client, .get, path, key: key).0 == 429)
            clock.advance(1)
            #expect(try await APITests.call(client, .get, path, key: key).0 == 404)  // refilled
        }
    }

    /// The limiter itself, with more distinct keys than its table sweeps at: a throttled key stays throttled.
    @Test func aThrottledKeyStaysThrottledPastTheSweep() {
        let clock = ManualClock()
        let limiter = RateLimiter(rate: 1, burst: 1, sweepAbove: 100_000, now: { clock.now })
        #expect(limiter.check("victim") == nil)
        #expect(limiter.check("victim") != nil)
        for i in 0..<100_001 { _ = limiter.check("spray-\(i)") }
        #expect(limiter.check("victim") != nil)
        // Full buckets carry no information and are forgotten; the drained ones are kept.
        #expect(limiter.trackedKeys <= 100_002)
        clock.advance(2)
        #expect(limiter.check("victim") == nil)
    }
}

final class ManualClock: Sendable {
    private let box = NIOConcurrencyHelpers.NIOLockedValueBox(Date(timeIntervalSince1970: 1_800_000_000))
    var now: Date { box.withLockedValue { $0 } }
    func advance(_ s: TimeInterval) { box.withLockedValue { $0 = $0.addingTimeInterval(s) } }
}
