import Foundation
import Logging
import NIOConcurrencyHelpers
import RichPushCore
import ServiceLifecycle
import Testing

@testable import RichPushServer

/// Several nodes on one PostgreSQL, each a backend of its own in this process: claims never overlap, a dead node's
/// leases and fan-outs are taken over, changes reach every node's cache, one node leads.
@Suite struct PostgresClusterTests {
    /// Two backends (nodes) on one new database.
    static func nodes(_ n: Int = 2, chunk: Int = 50_000) async throws -> [PostgresBackend] {
        let url = try await PostgresFixture.url()
        var out: [PostgresBackend] = []
        for i in 0..<n {
            out.append(
                try await PostgresBackend.open(
                    url: url,
                    sealer: nil,
                    nodeID: "node-\(i + 1)",
                    chunk: chunk,
                    timeout: .seconds(60)
                )
            )
        }
        return out
    }

    /// Runs the nodes' background services (listener, heartbeat, leader with `jobs`) while `body` runs.
    static func running<T: Sendable>(
        _ nodes: [PostgresBackend],
        jobs: @escaping @Sendable (Int) -> [PeriodicJob] = { _ in [] },
        _ body: () async throws -> T
    ) async throws -> T {
        let tasks = nodes.enumerated().flatMap { i, node in
            node.backgroundServices(
                address: "test",
                leaderJobs: jobs(i),
                logger: Logger(label: "test"),
                onNodes: { _ in }
            ).map { service in
                Task { try? await service.run() }
            }
        }
        defer { for t in tasks { t.cancel() } }
        return try await body()
    }

    static let t0 = Date(timeIntervalSince1970: 1_800_000_000)

    /// A node that stops takes its row off the cluster's list on its way out, so the others count one node fewer at
    /// once (not five heartbeats later).
    @Test func aNodeThatStopsLeavesTheList() async throws {
        let nodes = try await Self.nodes(2)
        let heartbeat = PostgresHeartbeat(
            db: nodes[1].database,
            nodeID: "node-2",
            address: "test",
            interval: 0.2,
            onNodes: { _ in }
        )
        let group = ServiceGroup(services: [heartbeat], logger: Logger(label: "test"))
        func listed() async throws -> Int {
            try await nodes[0].database.rows("SELECT count(*) FROM nodes WHERE id = 'node-2'").first?.decode(Int.self)
                ?? 0
        }
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            let deadline = Date().addingTimeInterval(30)
            while try await listed() == 0 {
                #expect(Date() < deadline, "the heartbeat never wrote its row")
                if Date() >= deadline { break }
                try await Task.sleep(nanoseconds: 50_000_000)
            }
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
        #expect(try await listed() == 0)
    }

    /// Two nodes claiming at once, round after round, never hold the same delivery.
    @Test func concurrentClaimsAreDisjoint() async throws {
        let nodes = try await Self.nodes(3)
        try await nodes[0].queue.enqueue(
            (0..<3000).map {
                NewDelivery(notificationID: "n", appID: "a", provider: .apns, target: "t\($0)", notBefore: Self.t0)
            }
        )
        let claimed = NIOLockedValueBox<[Int64: String]>([:])
        let duplicates = NIOLockedValueBox(0)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (i, node) in nodes.enumerated() {
                group.addTask {
                    while true {
                        let batch = try await node.queue.claim(
                            owner: "node-\(i)",
                            limit: 50,
                            now: Self.t0.addingTimeInterval(1),
                            lease: 600
                        )
                        if batch.isEmpty { return }
                        claimed.withLockedValue { c in
                            for d in batch {
                                if c[d.id] != nil { duplicates.withLockedValue { $0 += 1 } }
                                c[d.id] = "node-\(i)"
                            }
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(duplicates.withLockedValue { $0 } == 0)
        #expect(claimed.withLockedValue { $0.count } == 3000)
        // Each node took some (they ran together, not one after the other).
        #expect(Set(claimed.withLockedValue { Array($0.values) }).count == 3)
        #expect(try await nodes[1].queue.counts() == [.leased: 3000])
    }

    /// A node that stops settling loses its leases when they run out; another node claims the deliveries, and
    /// the first node's late outcome is not recorded.
    @Test func anExpiredLeaseIsTakenOverAndTheLateOutcomeRefused() async throws {
        let nodes = try await Self.nodes()
        try await nodes[0].queue.enqueue([
            NewDelivery(notificationID: "n", appID: "a", provider: .apns, target: "t", notBefore: Self.t0)
        ])
        let first = try await nodes[0].queue.claim(owner: "node-1/w1", limit: 10, now: Self.t0, lease: 30)
        #expect(first.count == 1)
        #expect(
            try await nodes[1].queue.claim(
                owner: "node-2/w1",
                limit: 10,
                now: Self.t0.addingTimeInterval(29),
                lease: 30
            ).isEmpty
        )
        let second = try await nodes[1].queue.claim(
            owner: "node-2/w1",
            limit: 10,
            now: Self.t0.addingTimeInterval(31),
            lease: 30
        )
        #expect(
            second.map(\.id) == first.map(\.id) && second.first?.attempts == 2
                && second.first?.leaseOwner == "node-2/w1"
        )
        let late = try await nodes[0].queue.settle(
            [Settlement(id: first[0].id, .finish(.delivered(providerID: "late")))],
            owner: "node-1/w1",
            now: Self.t0.addingTimeInterval(32)
        )
        #expect(late.isEmpty)
        let held = try await nodes[1].queue.settle(
            [Settlement(id: first[0].id, .finish(.delivered(providerID: "p2")))],
            owner: "node-2/w1",
            now: Self.t0.addingTimeInterval(33)
        )
        #expect(held == [first[0].id])
        #expect(try await nodes[0].queue.deliveries(notificationID: "n").first?.providerID == "p2")
    }

    /// A fan-out cut short by a node's death (its progress and lease as that node left them) waits for the lease
    /// to run out, then another node resumes it where it stopped: every device once.
    @Test func aDeadNodesFanOutIsResumedWhereItStopped() async throws {
        let nodes = try await Self.nodes(2, chunk: 100)
        let (a, b) = (nodes[0], nodes[1])
        try await a.registry.upsert(
            contentsOf: (0..<1000).map {
                Device(
                    appID: "app",
                    token: String(format: "%064x", $0),
                    platform: $0 % 4 == 0 ? .android : .ios,
                    tags: ["all"]
                )
            }
        )
        let plan = AcceptPlan(
            notification: .init(id: "n", appID: "app", message: ["title": "t"], response: .null, createdAt: Date()),
            idempotencyKey: nil,
            audience: .tag("all"),
            notBefore: Date(),
            expiresAt: nil
        )
        #expect(try await a.intake.accept(plan) { _ in .null }.fanOutPending)
        // The first 300 devices done by a node that then died, holding the fan-out for one more second.
        let db = a.database
        let cursor = try await db.rows("SELECT id FROM devices ORDER BY id OFFSET 299 LIMIT 1").first!.decode(
            Int64.self
        )
        try await db.rows(
            """
            INSERT INTO deliveries (notification_id, app_id, provider, target, state, not_before, updated_at)
            SELECT 'n', app_id, provider, token, 'queued', now(), now() FROM devices WHERE id <= \(cursor)
            """
        )
        try await db.rows(
            """
            UPDATE notifications SET fanout_owner = 'dead-node', fanout_lease_until = now() + interval '1 second',
                fanout_cursor = \(cursor), fanout_inserted = 300 WHERE id = 'n'
            """
        )
        #expect(try await b.intake.pendingFanOuts().isEmpty)  // held
        #expect(try await b.intake.completeFanOut(notificationID: "n") == 0)
        try await Task.sleep(for: .milliseconds(1200))
        #expect(try await b.intake.pendingFanOuts() == ["n"])
        #expect(try await b.intake.completeFanOut(notificationID: "n") == 700)
        let deliveries = try await b.queue.deliveries(notificationID: "n")
        #expect(deliveries.count == 1000 && Set(deliveries.map(\.target)).count == 1000)
        #expect(try await a.intake.pendingFanOuts().isEmpty)
        #expect(try await a.intake.completeFanOut(notificationID: "n") == 0)
    }

    /// A whole app's fan-out walks the tokens in byte order (so the deliveries' `(notification_id, target)` index
    /// only grows at its end), numbers a spread send's times in that order, and a dead node's fan-out is resumed
    /// after its last token. Tokens of mixed case and punctuation, whose byte order is not the locale's.
    @Test func aWholeAppsFanOutGoesInTokenOrderAndResumesAfterItsLastToken() async throws {
        let nodes = try await Self.nodes(2, chunk: 100)
        let (a, b) = (nodes[0], nodes[1])
        let tokens = (0..<1000).map { i -> String in
            let k = (i * 7919) % 1000
            return k % 4 == 0 ? ["Zk", "a_", "B-", "b:"][k % 16 / 4] + String(k) : String(format: "%064x", k)
        }
        try await a.registry.upsert(
            contentsOf: tokens.map {
                Device(appID: "app", token: $0, platform: $0.count == 64 ? .ios : .android)
            }
        )
        let byteOrder = tokens.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        let start = Date(timeIntervalSince1970: 2_000_000_000)
        let plan = AcceptPlan(
            notification: .init(id: "n", appID: "app", message: ["title": "t"], response: .null, createdAt: start),
            idempotencyKey: nil,
            audience: .all,
            notBefore: start,
            expiresAt: nil,
            spread: 999
        )
        #expect(try await a.intake.accept(plan) { _ in .null }.fanOutPending)
        // The first 300 tokens done by a node that then died, holding the fan-out for one more second.
        let db = a.database
        for token in byteOrder.prefix(300) {
            try await db.rows(
                """
                INSERT INTO deliveries (notification_id, app_id, provider, target, state, not_before, updated_at)
                SELECT 'n', app_id, provider, token, 'queued', now(), now() FROM devices WHERE token = \(token)
                """
            )
        }
        try await db.rows(
            """
            UPDATE notifications SET fanout_owner = 'dead-node', fanout_lease_until = now() + interval '1 second',
                fanout_token = \(byteOrder[299]), fanout_inserted = 300 WHERE id = 'n'
            """
        )
        try await Task.sleep(for: .milliseconds(1200))
        #expect(try await b.intake.completeFanOut(notificationID: "n") == 700)
        let rows = try await db.rows(
            """
            SELECT target, extract(epoch FROM not_before)::float8 FROM deliveries WHERE notification_id = 'n' ORDER BY id
            """
        )
        let inserted = try rows.map { try $0.decode((String, Double).self) }
        #expect(inserted.map(\.0) == byteOrder)
        // The resumed part's times follow the token order on from the 300 done: the 301st token at 300 s.
        let offsets = inserted.dropFirst(300).map { ($0.1 - start.timeIntervalSince1970).rounded() }
        #expect(offsets == (300..<1000).map(Double.init))
        #expect(try await b.intake.pendingFanOuts().isEmpty)
    }

    /// A key revoked and an app changed through one node are forgotten by the other's cache within a second
    /// (its cache would keep them for five).
    @Test func changesReachEveryNodesCacheWithinASecond() async throws {
        let nodes = try await Self.nodes()
        let (a, b) = (nodes[0], nodes[1])
        try await Self.running(nodes) {
            try await Task.sleep(for: .milliseconds(300))  // the listeners are listening
            let (app, key) = try await a.store.createApp(ServerApp(id: "", name: "A", bundleID: "com.example.a"))
            #expect(try await b.store.authorize(key: key) != nil)
            #expect(try await b.store.app(id: app.id)?.name == "A")
            let keyID = APIKeys.id(ofHash: APIKeys.hash(key))
            #expect(try await a.store.revokeKey(appID: app.id, keyID: keyID))
            var renamed = app
            renamed.name = "B"
            _ = try await a.store.updateApp(renamed)
            let start = Date()
            var seen = false
            while Date().timeIntervalSince(start) < 1 {
                if try await b.store.authorize(key: key) == nil, try await b.store.app(id: app.id)?.name == "B" {
                    seen = true
                    break
                }
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(seen, "node 2 still saw the old key or app after a second")
        }
    }

    /// Deliveries queued through one node wake the other's idle worker, and the notice names when the earliest of
    /// them is due (so that the other node's claim marks before that time stay).
    @Test func queuedWorkWakesTheOtherNodes() async throws {
        let nodes = try await Self.nodes()
        let woken = NIOLockedValueBox(0)
        let times = NIOLockedValueBox<[Date?]>([])
        nodes[1].workQueued.listen { woken.withLockedValue { $0 += 1 } }
        nodes[1].workQueued.listenForTimes { t in times.withLockedValue { $0.append(t) } }
        let due = Date(timeIntervalSince1970: 1_900_000_000.25)
        try await Self.running(nodes) {
            try await Task.sleep(for: .milliseconds(300))
            let before = woken.withLockedValue { $0 }
            let plan = AcceptPlan(
                notification: .init(id: "n", appID: "app", message: [:], response: .null, createdAt: Date()),
                idempotencyKey: nil,
                audience: .providerTokens(apns: ["aa"], fcm: []),
                notBefore: due,
                expiresAt: nil
            )
            _ = try await nodes[0].intake.accept(plan) { _ in .null }
            let start = Date()
            while woken.withLockedValue({ $0 }) == before, Date().timeIntervalSince(start) < 2 {
                try await Task.sleep(for: .milliseconds(10))
            }
            #expect(woken.withLockedValue { $0 } > before)
            let heard = times.withLockedValue { $0 }
            #expect(heard.contains { $0 == due }, "the other node heard \(heard)")
        }
    }

    /// One node at a time runs the periodic jobs; when it goes, another takes over.
    @Test func oneNodeLeadsAndAnotherTakesOver() async throws {
        let nodes = try await Self.nodes()
        let runs = NIOLockedValueBox<[Int]>([])
        let jobs: @Sendable (Int) -> [PeriodicJob] = { i in
            [PeriodicJob(name: "tick", interval: 0.2) { runs.withLockedValue { $0.append(i) } }]
        }
        var tasks = nodes.enumerated().map { i, node in
            node.backgroundServices(
                address: "test",
                leaderJobs: jobs(i),
                logger: Logger(label: "test"),
                onNodes: { _ in }
            ).map { service in
                Task { try? await service.run() }
            }
        }
        // A few runs of the job (every 0.2 s): a fixed two seconds measured the machine, and beside the whole suite
        // the first run came later than that.
        let begun = Date()
        while runs.withLockedValue({ $0.count < 5 }), Date().timeIntervalSince(begun) < 60 {
            try await Task.sleep(for: .milliseconds(50))
        }
        let leader = try #require(runs.withLockedValue { $0.first })
        #expect(Set(runs.withLockedValue { $0 }) == [leader], "both nodes ran the job: \(runs.withLockedValue { $0 })")
        for t in tasks[leader] { t.cancel() }
        for t in tasks[leader] { await t.value }
        tasks[leader] = []
        runs.withLockedValue { $0.removeAll() }
        // The lock goes with the leader's connection; the other node tries again every 5 s.
        let start = Date()
        while runs.withLockedValue({ $0.isEmpty }), Date().timeIntervalSince(start) < 60 {
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(runs.withLockedValue { $0.first } == 1 - leader)
        for t in tasks.flatMap({ $0 }) { t.cancel() }
    }

    /// Every node must seal with the same key: one with another key refuses to start.
    @Test func aNodeWithAnotherCredentialsKeyRefusesToStart() async throws {
        let url = try await PostgresFixture.url()
        let key = try CredentialSealer(key: Array(repeating: 7, count: 32))
        let first = try await PostgresBackend.open(url: url, sealer: key, nodeID: "n1")
        let apns = APNsCredentials(
            keyPEM: ServerStoreTests.apnsKey,
            keyID: "ABCDEFGHIJ",
            teamID: "TEAM123456",
            environment: .production
        )
        let (app, _) = try await first.store.createApp(
            ServerApp(id: "", name: "A", bundleID: "com.example.a", apns: apns)
        )
        // Sealed at rest: the key is not in the row.
        let raw = try await first.database.rows("SELECT apns FROM apps WHERE id = \(app.id)").first!.decode(String.self)
        #expect(raw.hasPrefix("sealed:v1:") && !raw.contains("PRIVATE KEY"))
        await #expect(throws: CredentialSealer.Problem.self) {
            _ = try await PostgresBackend.open(
                url: url,
                sealer: try CredentialSealer(key: Array(repeating: 8, count: 32)),
                nodeID: "n2"
            )
        }
        let second = try await PostgresBackend.open(url: url, sealer: key, nodeID: "n3")
        #expect(try await second.store.app(id: app.id)?.apns == apns)
    }

    /// Two nodes started on a new database from two folders: the first makes the credentials key and writes its
    /// file; the second, whose folder has none, refuses to start and writes no key file of its own (a file it
    /// wrote would hold a key the database refuses, at every later start).
    @Test func aNodeThatRefusesToStartWritesNoKeyFile() async throws {
        let url = try await PostgresFixture.url()
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("key-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        var config = ServerConfiguration()
        config.database = url
        config.credentialsKeyFile = dir.appendingPathComponent("one/richpush-credentials.key").path
        let first = try await openBackend(config, nodeID: "one", logger: Logger(label: "test"))
        #expect(FileManager.default.fileExists(atPath: config.resolvedCredentialsKeyFile))
        var second = config
        second.credentialsKeyFile = dir.appendingPathComponent("two/richpush-credentials.key").path
        await #expect(throws: CredentialSealer.Problem.self) {
            _ = try await openBackend(second, nodeID: "two", logger: Logger(label: "test"))
        }
        #expect(!FileManager.default.fileExists(atPath: second.resolvedCredentialsKeyFile))
        _ = first
    }

    /// Hosted media stored by one node is fetched by another, chunk by chunk, and swept when its time is past.
    @Test func sharedMediaIsServedByEveryNodeAndSwept() async throws {
        let nodes = try await Self.nodes()
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("shared-media-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let one = try MediaStore(directory: dir.appendingPathComponent("one"), shared: nodes[0].sharedMedia)
        let two = try MediaStore(directory: dir.appendingPathComponent("two"), shared: nodes[1].sharedMedia)
        // 2.5 MB: three chunks.
        var bytes = [UInt8](repeating: 0, count: 2_500_000)
        bytes.replaceSubrange(0..<8, with: [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])
        for i in 8..<bytes.count { bytes[i] = UInt8(truncatingIfNeeded: i * 31) }
        let item = try one.put(bytes, type: .png)
        try await one.publish(item, keepUntil: Date().addingTimeInterval(3600))
        #expect(two.get(item.name) == nil)
        #expect(await two.materialize(item.name))
        let (buffer, type) = try #require(two.get(item.name))
        #expect(type == .png && Array(buffer.readableBytesView) == bytes)
        #expect(!(await two.materialize(String(repeating: "0", count: 64) + ".png")))
        #expect(try await nodes[1].sharedMedia!.sweep(before: Date()) == (0, 0))
        #expect(try await nodes[1].sharedMedia!.sweep(before: Date().addingTimeInterval(7200)) == (1, 2_500_000))
        #expect(try await nodes[0].database.rows("SELECT count(*) FROM media_chunks").first!.decode(Int.self) == 0)
    }
}
