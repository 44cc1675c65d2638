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

/// Live Activities through the server against the APNs emulator over TLS HTTP/2: tokens registered by the app,
/// a push-to-start, updates and an end by activity id, a late retry the device ignores, a broadcast channel, and
/// each refusal the API names.
@Suite struct LiveActivityServerTests {
    static let admin = "admin-secret-key-0001"

    struct Harness {
        let sandbox: Sandbox
        let backend: SQLiteBackend
        let api: RichPushAPI
        let providers: Providers
        let worker: DeliveryWorker

        /// Runs the worker until nothing is queued or leased (due or not), at most 60 s.
        func drain() async throws {
            let started = Date()
            while Date().timeIntervalSince(started) < 60 {
                let c = try await backend.queue.counts()
                if (c[.queued] ?? 0) + (c[.leased] ?? 0) == 0 { return }
                if try await worker.runOnce() == 0 { try await Task.sleep(nanoseconds: 20_000_000) }
            }
            Issue.record("deliveries still queued after 60 s")
        }

        func states(_ id: String) async throws -> [String: Int] {
            var out: [String: Int] = [:]
            for d in try await backend.queue.deliveries(notificationID: id) {
                out[d.state.rawValue + (d.reason.map { ":" + $0 } ?? ""), default: 0] += 1
            }
            return out
        }
    }

    func withHarness(
        budget: Int? = nil,
        limiter: RateLimiter? = nil,
        maxTokens: Int? = nil,
        _ body: @escaping @Sendable (Harness, TestClientProtocol) async throws -> Void
    ) async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("live-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let sandbox = try await Sandbox.start(directory: dir, threads: 1)
        let backend = try SQLiteBackend(path: dir.appendingPathComponent("rp.sqlite").path)
        let providers = try Providers.sandbox(sandbox)
        var api = RichPushAPI(
            backend: backend,
            adminKey: Self.admin,
            validation: .init(requireTargets: false),
            providers: providers
        )
        api.liveBudget = budget.map { RateLimiter(rate: Double($0) / 3600, burst: Double($0)) }
        if let limiter { api.limiter = limiter }
        if let maxTokens { api.maxTokensPerRequest = maxTokens }
        let store = backend.sqliteStore
        let sender = ProviderDeliverySender(
            providers: providers,
            app: { id in (try? await store.app(id: id)).flatMap { $0 } },
            message: { id in try? await store.message(id: id) }
        )
        let worker = DeliveryWorker(
            configuration: .init(
                batchSize: 50,
                concurrency: 10,
                lease: 30,
                retry: RetryPolicy(baseDelay: 2, maxDelay: 2, maxAttempts: 5)
            ),
            queue: backend.sqliteQueue,
            sender: sender,
            prune: { _, _ in }
        )
        let harness = Harness(sandbox: sandbox, backend: backend, api: api, providers: providers, worker: worker)
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
        _ body: JSONValue? = nil
    ) async throws -> (Int, JSONValue) {
        try await client.execute(
            uri: uri,
            method: method,
            headers: [.authorization: "Bearer \(Self.admin)"],
            body: body.map { ByteBuffer(bytes: $0.serialized()) }
        ) { ($0.status.code, (try? JSONValue.parse(Array($0.body.readableBytesView))) ?? .null) }
    }

    func rules(_ answer: JSONValue) -> [String] {
        answer["error"]?["issues"]?.arrayValue?.compactMap { $0["rule"]?.stringValue } ?? []
    }

    @Test func startUpdateEndByActivityIDAndALateRetryIsIgnored() async throws {
        try await withHarness { h, client in
            let (_, created) = try await call(
                client,
                .post,
                "/v1/apps",
                ["name": "Deli", "bundle_id": "com.example.app"]
            )
            let app = try #require(created["app"]?["id"]?.stringValue)
            let p2s = String(repeating: "a1", count: 32)
            h.sandbox.apns.registerPushToStartToken(p2s, attributesType: "DeliveryAttributes")
            let (registered, _) = try await call(
                client,
                .post,
                "/v1/apps/\(app)/live/tokens",
                [
                    "kind": "push_to_start", "token": .string(p2s), "activity_type": "DeliveryAttributes",
                    "user_id": "u1",
                ]
            )
            #expect(registered == 200)

            // Start: to every push-to-start token of the message's type (one user's here).
            let (startStatus, start) = try await call(
                client,
                .post,
                "/v1/apps/\(app)/notifications",
                [
                    "title": "Order A-17", "body": "Preparing",
                    "live_activity": [
                        "event": "start", "attributes_type": "DeliveryAttributes", "attributes": ["order": "A-17"],
                        "content_state": ["eta": 20], "input_push_token": true,
                    ],
                    "audience": ["live_start": ["user": "u1"]],
                ]
            )
            #expect(startStatus == 202 && start["deliveries"] == 1, "\(start)")
            try await h.drain()
            #expect(try await h.states(start["id"]!.stringValue!) == ["delivered": 1])
            let activity = try #require(h.sandbox.apns.activities().first)
            let updateToken = try #require(activity.updateToken)
            // The server dated the state when it accepted it.
            #expect(abs(activity.timestamp - Int64(Date().timeIntervalSince1970)) < 30)

            // The app registers the activity's token under its own id.
            #expect(
                try await call(
                    client,
                    .post,
                    "/v1/apps/\(app)/live/tokens",
                    [
                        "kind": "activity", "token": .string(updateToken), "activity_type": "DeliveryAttributes",
                        "activity_id": "order-A-17",
                    ]
                ).0 == 200
            )

            // Update 1 meets a 503 (Retry-After 10) and waits; update 2, dated later, goes first; update 1's retry
            // arrives last and the device keeps update 2. The updates carry their own timestamps, so that nothing
            // waits on the clock's second.
            let t0 = activity.timestamp
            func update(_ eta: Int, event: String = "update", timestamp: Int64? = nil) async throws -> String {
                var live: [String: JSONValue] = ["event": .string(event), "content_state": ["eta": .int(Int64(eta))]]
                if let timestamp { live["timestamp"] = .int(timestamp) }
                let (status, answer) = try await call(
                    client,
                    .post,
                    "/v1/apps/\(app)/notifications",
                    ["live_activity": .object(live), "audience": ["live_activity": "order-A-17"]]
                )
                #expect(status == 202, "\(answer)")
                return answer["id"]?.stringValue ?? ""
            }
            h.sandbox.apns.inject(.status(503, reason: "ServiceUnavailable", retryAfter: 10), count: 1)
            // Update 1 is dated now; update 2 and the end later, by whole seconds, however long the steps before took
            // on a loaded machine (the start's own date was set by the server, checked above).
            let t1 = max(t0, Int64(Date().timeIntervalSince1970))
            let first = try await update(12, timestamp: t1)
            _ = try await h.worker.runOnce()
            let second = try await update(5, timestamp: t1 + 5)
            _ = try await h.worker.runOnce()
            #expect(try await h.states(second) == ["delivered": 1])
            let waiting = try await h.states(first)
            #expect(
                waiting == ["queued:ServiceUnavailable": 1],
                "update 1's retry is due 10 s after its 503: \(waiting)"
            )
            #expect(h.sandbox.apns.activity(updateToken: updateToken)?.contentState == ["eta": 5])
            try await h.drain()
            #expect(try await h.states(first) == ["delivered": 1])
            #expect(h.sandbox.apns.activity(updateToken: updateToken)?.contentState == ["eta": 5])
            #expect(h.sandbox.apns.liveIgnoredCounts["older-timestamp"] == 1)

            let end = try await update(0, event: "end", timestamp: t1 + 6)
            try await h.drain()
            #expect(try await h.states(end) == ["delivered": 1])
            let ended = try #require(h.sandbox.apns.activity(updateToken: updateToken))
            #expect(
                ended.ended && ended.contentState == ["eta": 0] && ended.history == [t0, t1 + 5, t1 + 6],
                "\(ended.history) \(h.sandbox.apns.liveIgnoredCounts) \(h.sandbox.apns.rejectedCounts)"
            )

            // What was sent: the documented push type and topic.
            let last = try #require(h.sandbox.apns.recorded(token: updateToken).last)
            #expect(last.pushType == "liveactivity" && last.topic == "com.example.app.push-type.liveactivity")

            // An unknown activity id reaches nobody; a removed token is gone.
            let (_, nobody) = try await call(
                client,
                .post,
                "/v1/apps/\(app)/notifications",
                ["live_activity": ["event": "end"], "audience": ["live_activity": "no-such-order"]]
            )
            #expect(nobody["deliveries"] == 0)
            #expect(try await call(client, .delete, "/v1/apps/\(app)/live/tokens/\(updateToken)").0 == 200)
            #expect(try await call(client, .delete, "/v1/apps/\(app)/live/tokens/\(updateToken)").0 == 404)
        }
    }

    @Test func aChannelIsCreatedBroadcastToAndDeleted() async throws {
        try await withHarness { h, client in
            let (_, created) = try await call(
                client,
                .post,
                "/v1/apps",
                ["name": "Scores", "bundle_id": "com.example.app"]
            )
            let app = try #require(created["app"]?["id"]?.stringValue)
            let (status, channel) = try await call(
                client,
                .post,
                "/v1/apps/\(app)/live/channels",
                ["storage_policy": "most_recent"]
            )
            #expect(status == 201 && channel["storage_policy"] == "most_recent", "\(channel)")
            let id = try #require(channel["id"]?.stringValue)
            let escaped = id.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? id
            let (_, listed) = try await call(client, .get, "/v1/apps/\(app)/live/channels")
            #expect(listed["channels"] == [.string(id)])
            let (readStatus, read) = try await call(client, .get, "/v1/apps/\(app)/live/channels/\(escaped)")
            #expect(readStatus == 200 && read["storage_policy"] == "most_recent", "\(read)")

            // Three fans start the match's activity on the channel by push-to-start.
            for i in 0..<3 {
                let token = String(format: "%064x", 0xF00 + i)
                h.sandbox.apns.registerPushToStartToken(token)
                _ = try await call(
                    client,
                    .post,
                    "/v1/apps/\(app)/live/tokens",
                    ["kind": "push_to_start", "token": .string(token), "activity_type": "MatchAttributes"]
                )
            }
            let (_, started) = try await call(
                client,
                .post,
                "/v1/apps/\(app)/notifications",
                [
                    "title": "Kick-off", "body": "0 – 0",
                    "live_activity": [
                        "event": "start", "attributes_type": "MatchAttributes", "attributes": ["match": "7"],
                        "content_state": ["home": 0, "away": 0], "input_push_channel": .string(id),
                    ],
                    "audience": ["live_start": [:]],
                ]
            )
            #expect(started["deliveries"] == 3)
            try await h.drain()
            #expect(h.sandbox.apns.activities().count == 3)

            // One request updates all three.
            try await Task.sleep(nanoseconds: 1_100_000_000)
            let (goalStatus, goal) = try await call(
                client,
                .post,
                "/v1/apps/\(app)/notifications",
                [
                    "title": "Goal!", "body": "1 – 0",
                    "live_activity": ["event": "update", "content_state": ["home": 1, "away": 0]],
                    "audience": ["apns_channel": .string(id)],
                ]
            )
            #expect(goalStatus == 202 && goal["deliveries"] == 1, "\(goal)")
            try await h.drain()
            #expect(try await h.states(goal["id"]!.stringValue!) == ["delivered": 1])
            #expect(h.sandbox.apns.activities().allSatisfy { $0.contentState == ["home": 1, "away": 0] })
            #expect(h.sandbox.apns.recorded().last?.channelID == id)

            // A broadcast to a channel APNs does not know ends failed with its reason.
            let (_, stray) = try await call(
                client,
                .post,
                "/v1/apps/\(app)/notifications",
                [
                    "live_activity": ["event": "end", "content_state": [:]],
                    "audience": ["apns_channel": "bm8tc3VjaC1jaGFubmVs"],
                ]
            )
            try await h.drain()
            let strayStates = try await h.states(stray["id"]!.stringValue!)
            #expect(strayStates == ["failed:ChannelNotRegistered": 1], "\(strayStates)")

            #expect(try await call(client, .delete, "/v1/apps/\(app)/live/channels/\(escaped)").0 == 200)
            #expect(try await call(client, .get, "/v1/apps/\(app)/live/channels/\(escaped)").0 == 404)
            #expect(try await call(client, .delete, "/v1/apps/\(app)/live/channels/\(escaped)").0 == 404)
        }
    }

    /// With a budget of 2 priority-10 updates an hour, the third update of one activity goes at priority 5 and the
    /// answer says so; another activity has its own budget; priority normal spends nothing; a dry run spends nothing.
    @Test func priorityTenUpdatesSpendTheActivitysBudget() async throws {
        try await withHarness(budget: 2) { h, client in
            let (_, created) = try await call(client, .post, "/v1/apps", ["name": "B", "bundle_id": "com.example.app"])
            let app = try #require(created["app"]?["id"]?.stringValue)
            for (i, activity) in ["a", "b"].enumerated() {
                _ = try await call(
                    client,
                    .post,
                    "/v1/apps/\(app)/live/tokens",
                    [
                        "kind": "activity", "token": .string(String(format: "%064x", 0xE0 + i)), "activity_type": "T",
                        "activity_id": .string(activity),
                    ]
                )
            }
            func update(_ activity: String, priority: String? = nil, dryRun: Bool = false) async throws -> JSONValue {
                var body: [String: JSONValue] = [
                    "live_activity": ["event": "update", "content_state": ["n": 1]],
                    "audience": ["live_activity": .string(activity)],
                ]
                if let priority { body["priority"] = .string(priority) }
                if dryRun { body["dry_run"] = true }
                return try await call(client, .post, "/v1/apps/\(app)/notifications", .object(body)).1
            }
            _ = try await update("a", dryRun: true)
            _ = try await update("a", priority: "normal")
            let warned = { (answer: JSONValue) in
                answer["warnings"]?.arrayValue?.contains { $0["rule"] == "live-budget" } == true
            }
            #expect(!warned(try await update("a")))
            #expect(!warned(try await update("a", priority: "high")))
            #expect(warned(try await update("a")))
            #expect(!warned(try await update("b")))
            try await h.drain()
            let a = h.sandbox.apns.recorded(token: String(format: "%064x", 0xE0)).map(\.priority)
            // Sent concurrently, they may arrive in any order: two at 10, the normal one and the one past the budget at 5.
            #expect(a.sorted() == [5, 5, 10, 10], "\(a)")
            #expect(h.sandbox.apns.recorded(token: String(format: "%064x", 0xE1)).map(\.priority) == [10])
        }
    }

    /// Many activities updated in one request, each with its own state: each item becomes its own notification with
    /// its own answer (in order), the devices show each activity's state, an item whose activity has no token reaches
    /// nobody, and the same Idempotency-Key replays the answers (another body with it is refused).
    @Test func manyActivitiesAreUpdatedInOneRequest() async throws {
        try await withHarness { h, client in
            let (_, created) = try await call(
                client,
                .post,
                "/v1/apps",
                ["name": "Orders", "bundle_id": "com.example.app"]
            )
            let app = try #require(created["app"]?["id"]?.stringValue)
            // Three activities started by push-to-start, each with its own update token.
            for i in 0..<3 {
                let p2s = String(format: "%064x", 0xA10 + i)
                h.sandbox.apns.registerPushToStartToken(p2s, attributesType: "OrderAttributes")
                let (status, _) = try await call(
                    client,
                    .post,
                    "/v1/apps/\(app)/live/tokens",
                    ["kind": "push_to_start", "token": .string(p2s), "activity_type": "OrderAttributes"]
                )
                #expect(status == 200)
            }
            let (started, start) = try await call(
                client,
                .post,
                "/v1/apps/\(app)/notifications",
                [
                    "title": "Orders", "body": "Preparing",
                    "live_activity": [
                        "event": "start", "attributes_type": "OrderAttributes", "attributes": [:],
                        "content_state": ["eta": 30], "input_push_token": true,
                    ],
                    "audience": ["live_start": [:]],
                ]
            )
            #expect(started == 202, "\(start)")
            try await h.drain()
            let tokens = h.sandbox.apns.activities().compactMap(\.updateToken).sorted()
            try #require(tokens.count == 3)
            for (i, token) in tokens.enumerated() {
                let (status, _) = try await call(
                    client,
                    .post,
                    "/v1/apps/\(app)/live/tokens",
                    [
                        "kind": "activity", "token": .string(token), "activity_type": "OrderAttributes",
                        "activity_id": .string("order-\(i)"),
                    ]
                )
                #expect(status == 200)
            }
            func item(_ activity: String, _ eta: Int, event: String = "update") -> JSONValue {
                [
                    "live_activity": ["event": .string(event), "content_state": ["eta": .int(Int64(eta))]],
                    "audience": ["live_activity": .string(activity)],
                ]
            }
            let body: JSONValue = [
                "items": [item("order-0", 7), item("order-1", 8), item("order-2", 0, event: "end"), item("nobody", 1)]
            ]
            func batch(_ body: JSONValue, key: String) async throws -> (Int, JSONValue) {
                try await client.execute(
                    uri: "/v1/apps/\(app)/live/updates",
                    method: .post,
                    headers: [.authorization: "Bearer \(Self.admin)", HTTPField.Name("Idempotency-Key")!: key],
                    body: ByteBuffer(bytes: body.serialized())
                ) { ($0.status.code, (try? JSONValue.parse(Array($0.body.readableBytesView))) ?? .null) }
            }
            let (status, answer) = try await batch(body, key: "round-1")
            #expect(status == 202, "\(answer)")
            let notes = answer["notifications"]?.arrayValue ?? []
            #expect(notes.map { $0["deliveries"] } == [1, 1, 1, 0], "\(answer)")
            #expect(Set(notes.compactMap { $0["id"]?.stringValue }).count == 4)
            #expect(notes.allSatisfy { $0["status"] == "accepted" })
            try await h.drain()
            for id in notes.prefix(3).compactMap({ $0["id"]?.stringValue }) {
                #expect(try await h.states(id) == ["delivered": 1])
            }
            #expect(h.sandbox.apns.activity(updateToken: tokens[0])?.contentState == ["eta": 7])
            #expect(h.sandbox.apns.activity(updateToken: tokens[1])?.contentState == ["eta": 8])
            let ended = try #require(h.sandbox.apns.activity(updateToken: tokens[2]))
            #expect(ended.ended && ended.contentState == ["eta": 0])
            // Each is a notification of its own, listed and read like any other.
            let (_, outcome) = try await call(
                client,
                .get,
                "/v1/apps/\(app)/notifications/\(notes[1]["id"]!.stringValue!)"
            )
            #expect(outcome["counts"]?["delivered"] == 1)

            // The same key and body: the first answers, nothing sent again; another body with it: refused.
            let (again, replay) = try await batch(body, key: "round-1")
            #expect(again == 202 && replay["notifications"] == answer["notifications"], "\(replay)")
            try await h.drain()
            #expect(h.sandbox.apns.recorded(token: tokens[0]).count == 1)
            let (reused, refusal) = try await batch(["items": [item("order-0", 6)]], key: "round-1")
            #expect(reused == 422 && refusal["error"]?["code"] == "idempotency-key-reused", "\(refusal)")
        }
    }

    /// A batch is checked whole before anything is stored: each problem names its item, one bad item refuses them
    /// all; each item counts as a request against the key's rate limit.
    @Test func aBatchIsCheckedWholeAndCountedItemByItem() async throws {
        // The limiter's clock moves only when the test moves it: 10 s before each call refills the bucket (5 at most).
        let clock = NIOLockedValueBox(Date())
        let limiter = RateLimiter(rate: 1, burst: 5, now: { clock.withLockedValue { $0 } })
        @Sendable func later() { clock.withLockedValue { $0 += 10 } }
        try await withHarness(limiter: limiter) { h, client in
            let (_, created) = try await call(client, .post, "/v1/apps", ["name": "R", "bundle_id": "com.example.app"])
            let app = try #require(created["app"]?["id"]?.stringValue)
            let good: JSONValue = [
                "live_activity": ["event": "update", "content_state": ["n": 1]], "audience": ["live_activity": "a"],
            ]
            let cases: [(JSONValue, String, String)] = [
                (
                    ["items": [good, ["body": "plain", "audience": ["tag": "x"]]]], "items[1].audience",
                    "live-activity-only"
                ),
                (
                    ["items": [good, ["body": "plain", "audience": ["live_activity": "x"]]]],
                    "items[1].audience.live_activity", "needs-live-activity"
                ),
                (
                    ["items": [["live_activity": ["event": "update"], "audience": ["live_activity": "x"]]]],
                    "items[0].live_activity.content_state", "needs-content-state"
                ),
                (
                    [
                        "items": [
                            good,
                            [
                                "live_activity": ["event": "update", "content_state": ["n": 1]],
                                "audience": ["live_activity": "a"], "dry_run": true,
                            ],
                        ]
                    ], "items[1].dry_run", "no-dry-run"
                ),
                (["items": [good, "text"]], "items[1]", "invalid"),
                (["items": []], "items", "count"),
                (["items": .array(Array(repeating: good, count: 1001))], "items", "count"),
                (["items": [good], "extra": 1], "extra", "unknown-field"),
                (["updates": [good]], "items", "required"),
                (["items": .array(Array(repeating: good, count: 6))], "items", "over-rate-burst"),
            ]
            for (body, path, rule) in cases {
                later()
                let (status, answer) = try await call(client, .post, "/v1/apps/\(app)/live/updates", body)
                let issues = answer["error"]?["issues"]?.arrayValue ?? []
                #expect(
                    status == 422
                        && issues.contains { $0["path"]?.stringValue == path && $0["rule"]?.stringValue == rule },
                    "\(path) \(rule): \(status) \(answer)"
                )
            }
            // Nothing of a refused batch was stored.
            #expect(try await h.backend.queue.counts().values.reduce(0, +) == 0)
            #expect(
                try await call(client, .get, "/v1/apps/\(app)/notifications").1["notifications"]?.arrayValue?.isEmpty
                    == true
            )
            // A full bucket (5): a batch of 5 spends it all, and the next request waits.
            later()
            let five: JSONValue = [
                "items": .array(
                    (0..<5).map {
                        [
                            "live_activity": ["event": "update", "content_state": ["n": 1]],
                            "audience": ["live_activity": .string("a\($0)")],
                        ]
                    }
                )
            ]
            let (first, _) = try await call(client, .post, "/v1/apps/\(app)/live/updates", five)
            let (second, limited) = try await call(client, .post, "/v1/apps/\(app)/live/updates", ["items": [good]])
            #expect(first == 202 && second == 429, "\(limited)")
        }
    }

    /// A batch reaches at most as many tokens in all as one send may: past it, it is refused whole.
    @Test func aBatchReachesNoMoreTokensThanOneSend() async throws {
        try await withHarness(maxTokens: 2) { h, client in
            let (_, created) = try await call(client, .post, "/v1/apps", ["name": "M", "bundle_id": "com.example.app"])
            let app = try #require(created["app"]?["id"]?.stringValue)
            for (i, activity) in ["a", "a", "b"].enumerated() {
                let (status, _) = try await call(
                    client,
                    .post,
                    "/v1/apps/\(app)/live/tokens",
                    [
                        "kind": "activity", "token": .string(String(format: "%064x", 0xF0 + i)), "activity_type": "T",
                        "activity_id": .string(activity),
                    ]
                )
                #expect(status == 200)
            }
            func item(_ activity: String) -> JSONValue {
                [
                    "live_activity": ["event": "update", "content_state": ["n": 1]],
                    "audience": ["live_activity": .string(activity)],
                ]
            }
            let (one, answer) = try await call(client, .post, "/v1/apps/\(app)/live/updates", ["items": [item("a")]])
            #expect(one == 202 && answer["notifications"]?.arrayValue?.first?["deliveries"] == 2, "\(answer)")
            let (two, refusal) = try await call(
                client,
                .post,
                "/v1/apps/\(app)/live/updates",
                ["items": [item("a"), item("b")]]
            )
            #expect(two == 422 && rules(refusal) == ["live-audience-too-large"], "\(refusal)")
            #expect(try await h.backend.queue.counts().values.reduce(0, +) == 2)
        }
    }

    /// What an outsider tried against the batch: a body of thousands of made-up keys gets a short answer; an
    /// activity named twice is refused; ids that differ only in Unicode normalization are two activities, as the
    /// database holds them; a single send's Idempotency-Key cannot name a batch's item; a refused batch spends no
    /// activity's priority-10 budget.
    @Test func theBatchHoldsAgainstWhatAnOutsiderTried() async throws {
        try await withHarness(budget: 1) { h, client in
            let (_, created) = try await call(client, .post, "/v1/apps", ["name": "O", "bundle_id": "com.example.app"])
            let app = try #require(created["app"]?["id"]?.stringValue)
            let composed = "caf\u{E9}"
            let decomposed = "cafe\u{301}"
            for (i, activity) in [composed, decomposed, "a", "fresh"].enumerated() {
                let (status, _) = try await call(
                    client,
                    .post,
                    "/v1/apps/\(app)/live/tokens",
                    [
                        "kind": "activity", "token": .string(String(format: "%064x", 0xD0 + i)), "activity_type": "T",
                        "activity_id": .string(activity),
                    ]
                )
                #expect(status == 200)
            }
            func item(_ activity: String, _ n: Int, title: String? = nil) -> JSONValue {
                var o: [String: JSONValue] = [
                    "live_activity": ["event": "update", "content_state": ["n": .int(Int64(n))]],
                    "audience": ["live_activity": .string(activity)],
                ]
                if let title { o["title"] = .string(title) }
                return .object(o)
            }
            func batch(_ body: JSONValue, key: String? = nil) async throws -> (Int, JSONValue, Int) {
                var headers: HTTPFields = [.authorization: "Bearer \(Self.admin)"]
                if let key { headers[HTTPField.Name("Idempotency-Key")!] = key }
                return try await client.execute(
                    uri: "/v1/apps/\(app)/live/updates",
                    method: .post,
                    headers: headers,
                    body: ByteBuffer(bytes: body.serialized())
                ) {
                    (
                        $0.status.code, (try? JSONValue.parse(Array($0.body.readableBytesView))) ?? .null,
                        $0.body.readableBytes
                    )
                }
            }

            // Thousands of made-up keys: 20 named, the rest counted in one issue; the answer is a few kilobytes.
            var junk: [String: JSONValue] = [:]
            for k in 0..<20_000 { junk["k\(k)"] = 0 }
            let (status, refusal, bytes) = try await batch(["items": [.object(junk)]])
            let issues = refusal["error"]?["issues"]?.arrayValue ?? []
            #expect(
                status == 422 && issues.count <= 100 && bytes < 16_384,
                "\(status), \(issues.count) issues, \(bytes) bytes"
            )
            #expect(issues.contains { $0["message"]?.stringValue?.contains("more unknown fields") == true })
            // Many bad items: at most 100 issues listed, the rest counted.
            let (_, many, _) = try await batch(["items": .array(Array(repeating: ["body": "x"], count: 300))])
            #expect((many["error"]?["issues"]?.arrayValue?.count ?? 0) <= 100)

            // An activity named twice.
            let (twice, again, _) = try await batch(["items": [item("a", 1), item("a", 2)]])
            #expect(twice == 422 && rules(again) == ["duplicate-activity"], "\(again)")

            // Two spellings of one word are two activities, each reaching its own token.
            let (both, answer, _) = try await batch(["items": [item(composed, 1), item(decomposed, 2)]])
            #expect(both == 202, "\(answer)")
            let ids = answer["notifications"]?.arrayValue?.compactMap { $0["id"]?.stringValue } ?? []
            try #require(ids.count == 2)
            #expect(
                try await h.backend.queue.deliveries(notificationID: ids[0]).map(\.target.stored) == [
                    String(format: "%064x", 0xD0)
                ]
            )
            #expect(
                try await h.backend.queue.deliveries(notificationID: ids[1]).map(\.target.stored) == [
                    String(format: "%064x", 0xD1)
                ]
            )

            // A single send under the key "K [item 0]" (the shape a batch item's key once had) and then a batch under
            // "K": both stored, neither the other's.
            let (single, _) = try await client.execute(
                uri: "/v1/apps/\(app)/notifications",
                method: .post,
                headers: [.authorization: "Bearer \(Self.admin)", HTTPField.Name("Idempotency-Key")!: "K [item 0]"],
                body: ByteBuffer(bytes: item("a", 3).serialized())
            ) { ($0.status.code, 0) }
            #expect(single == 202)
            let (keyed, keyedAnswer, _) = try await batch(["items": [item("a", 4)]], key: "K")
            #expect(keyed == 202 && keyedAnswer["notifications"]?.arrayValue?.count == 1, "\(keyedAnswer)")

            // A batch refused for its second item's size spends nothing of the first item's budget (1 an hour):
            // the next update of that activity still goes at priority 10, without the live-budget warning.
            let (tooBig, bigAnswer, _) = try await batch([
                "items": [item("fresh", 6), item(decomposed, 7, title: String(repeating: "x", count: 6000))]
            ])
            #expect(tooBig == 422 && rules(bigAnswer).contains("payload-too-large"), "\(bigAnswer)")
            let budget = { (answer: JSONValue) in
                answer["notifications"]?.arrayValue?.first?["warnings"]?.arrayValue?.contains {
                    $0["rule"] == "live-budget"
                } == true
            }
            #expect(!budget(try await batch(["items": [item("fresh", 8)]]).1))
            #expect(budget(try await batch(["items": [item("fresh", 9)]]).1), "the second is past the budget")
        }
    }

    @Test func everyRefusalNamesItsRule() async throws {
        try await withHarness { h, client in
            let (_, created) = try await call(client, .post, "/v1/apps", ["name": "R", "bundle_id": "com.example.app"])
            let app = try #require(created["app"]?["id"]?.stringValue)
            let cases: [(JSONValue, String)] = [
                (
                    [
                        "title": "t",
                        "live_activity": [
                            "event": "start", "attributes_type": "A", "attributes": [:], "content_state": [:],
                        ],
                        "audience": ["live_activity": "x"],
                    ], "start-by-push-to-start"
                ),
                (["body": "plain", "audience": ["live_activity": "x"]], "needs-live-activity"),
                (["live_activity": ["event": "end"], "audience": ["live_start": [:]]], "needs-start"),
                (["body": "plain", "audience": ["apns_channel": "YWJj"]], "channel-needs-live-activity"),
                (
                    [
                        "title": "t",
                        "live_activity": [
                            "event": "start", "attributes_type": "A", "attributes": [:], "content_state": [:],
                        ],
                        "audience": ["apns_channel": "YWJj"],
                    ], "channel-start"
                ),
                (["live_activity": ["event": "end"], "audience": ["apns_channel": "not a channel!"]], "channel-id"),
                (["live_activity": ["event": "update"], "audience": ["live_activity": "x"]], "needs-content-state"),
            ]
            for (body, rule) in cases {
                let (status, answer) = try await call(client, .post, "/v1/apps/\(app)/notifications", body)
                #expect(status == 422 && rules(answer).contains(rule), "\(rule): \(answer)")
            }
            let tokenCases: [(JSONValue, String)] = [
                (["kind": "activity", "token": "aabb", "activity_type": "A"], "required"),
                (
                    ["kind": "push_to_start", "token": "aabb", "activity_type": "A", "activity_id": "x"],
                    "push-to-start"
                ),
                (["kind": "later", "token": "aabb", "activity_type": "A"], "enum"),
                (["kind": "activity", "token": "zz", "activity_type": "A", "activity_id": "x"], "length"),
                (
                    [
                        "kind": "activity", "token": .string(String(repeating: "z", count: 64)), "activity_type": "A",
                        "activity_id": "x",
                    ],
                    "apns-token"
                ),
            ]
            for (body, rule) in tokenCases {
                let (status, answer) = try await call(client, .post, "/v1/apps/\(app)/live/tokens", body)
                #expect(status == 422 && rules(answer).contains(rule), "\(rule): \(answer)")
            }
            let (badPolicy, answer) = try await call(
                client,
                .post,
                "/v1/apps/\(app)/live/channels",
                ["storage_policy": "forever"]
            )
            #expect(badPolicy == 422 && rules(answer).contains("enum"))
            _ = h
        }
    }
}
