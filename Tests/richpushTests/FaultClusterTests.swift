import Foundation
import RichPushCore
import RichPushTestSupport
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The database fault test, in a suite of its own: it spends most of its 80 s waiting out the faults it makes (a
/// restart, a 30 s hang, a cut) on a PostgreSQL server of its own, so it runs beside ``ClusterTests`` (whose tests
/// run one at a time) rather than after them.
@Suite struct FaultClusterTests {
    /// The status of an HTTP/1.1 answer's first line (0: no answer).
    static func status(of answer: [UInt8]) -> Int {
        let line = String(decoding: answer.prefix(32), as: UTF8.self).split(separator: " ")
        return line.count > 1 && line[0].hasPrefix("HTTP/") ? Int(line[1]) ?? 0 : 0
    }

    /// What a node's `/health/ready` said, polled four times a second.
    final class ReadyLog: @unchecked Sendable {  // samples behind `lock`
        private let lock = NSLock()
        private var samples: [(at: Date, status: Int)] = []

        func add(_ status: Int) { lock.withLock { samples.append((Date(), status)) } }
        func all() -> [(at: Date, status: Int)] { lock.withLock { samples } }
    }

    /// The issue's fault test: two nodes on one PostgreSQL through a relay, a send to 20,000 devices spread over a
    /// minute; during it the database restarts, then hangs (SIGSTOP, every backend) for 30 s, then the relay cuts
    /// every connection for 10 s. Nothing accepted is lost; the repeats the emulators saw are counted and reported;
    /// both nodes come back to ready by themselves after each fault; and `/health/ready` tells the truth throughout:
    /// never ready once a fault is a few seconds old, always ready from its recovery until the next fault.
    @Test func twoNodesRideOutARestartAHangAndACut() async throws {
        // A server of its own: this test stops it.
        let pg = try PostgresServer.start()
        defer { pg.stop() }
        let url = try await pg.createDatabase()
        let relay = try await TCPRelay.start(to: pg.port)
        defer { relay.stop() }
        let relayed = url.replacingOccurrences(of: ":\(pg.port)/", with: ":\(relay.port)/")
        let scratch = try ClusterTests.Scratch("cluster-faults")
        defer {
            if ProcessInfo.processInfo.environment["KEEP_CLUSTER_LOGS"] == nil {
                try? FileManager.default.removeItem(at: scratch.dir)
            } else {
                print("logs kept in \(scratch.dir.path)")
            }
        }
        #expect(try await ClusterTests.migrate(url).contains("applied"))
        let sandbox = try await ExternalSandbox(dir: scratch.sandbox)
        defer { sandbox.process.terminate() }
        func start(_ name: String) async throws -> ServeTests.Server {
            try await ServeTests.Server(
                db: relayed,
                sandboxDir: scratch.sandbox,
                extra: sandbox.serverArguments + ["--lease", "5", "--node-id", name],
                directory: try scratch.node(name),
                environment: scratch.environment,
                log: scratch.dir.appendingPathComponent("\(name).log")
            )
        }
        let nodes = [try await start("a"), try await start("b")]
        let (_, created) = try await nodes[0].call(
            "POST",
            "/v1/apps",
            key: "test-admin-key-0001",
            body: ["name": "Faults", "bundle_id": "com.example.app"]
        )
        let app = try #require(created["app"]?["id"]?.stringValue)
        let key = try #require(created["api_key"]?.stringValue)
        // 20,000 devices, half iOS and half Android, written straight into the registry.
        try await pg.psql(
            url,
            """
            INSERT INTO devices (app_id, token, platform, provider, updated_at)
            SELECT '\(app)', CASE WHEN g % 2 = 0 THEN lpad(to_hex(g), 64, '0') ELSE 'fault-android-' || g END,
                CASE WHEN g % 2 = 0 THEN 'ios' ELSE 'android' END, CASE WHEN g % 2 = 0 THEN 'apns' ELSE 'fcm' END, now()
            FROM generate_series(1, 20000) g
            """
        )
        let (sent, accepted) = try await nodes[1].call(
            "POST",
            "/v1/apps/\(app)/notifications",
            key: key,
            body: ["title": "Faults", "body": "ride them out", "audience": ["all": true], "spread_seconds": 60]
        )
        #expect(sent == 202, "\(accepted)")
        let id = try #require(accepted["id"]?.stringValue)
        // The fan-out is done before the first fault (its rows are the send's whole outcome).
        let fannedOut = Date()
        while Int(
            try await pg.psql(url, "SELECT count(*) FROM deliveries").trimmingCharacters(in: .whitespacesAndNewlines)
        )
            != 20_000, Date().timeIntervalSince(fannedOut) < 60
        {
            try await Task.sleep(nanoseconds: 100_000_000)
        }

        let logs = [ReadyLog(), ReadyLog()]
        let bases = nodes.map(\.base)
        let polling = Task {
            await withTaskGroup(of: Void.self) { group in
                for (base, log) in zip(bases, logs) {
                    group.addTask {
                        // A socket of its own for each poll, read for 5 s at most: once, on a fresh clone, the
                        // test waited forever on a poll through the URL session after every fault had passed.
                        let port = URL(string: base)?.port ?? 0
                        let request = Array(
                            "GET /health/ready HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".utf8
                        )
                        while !Task.isCancelled {
                            let answer = try? await offThePool {
                                try RawHTTP.read(port: port, request, timeout: 5) { _ in false }
                            }
                            log.add(Self.status(of: answer ?? []))
                            try? await Task.sleep(nanoseconds: 250_000_000)
                        }
                    }
                }
            }
        }
        /// Waits until both nodes said ready (by the polls); the time it took.
        func bothReady(after start: Date) async throws -> TimeInterval {
            while Date().timeIntervalSince(start) < 60 {
                let ready = logs.allSatisfy { log in
                    log.all().last(where: { $0.at > start }).map { $0.status == 200 } ?? false
                }
                if ready { return Date().timeIntervalSince(start) }
                try await Task.sleep(nanoseconds: 100_000_000)
            }
            return .infinity
        }
        var windows: [(name: String, start: Date, end: Date, back: TimeInterval)] = []
        /// Sends the emulators accepted beyond the deliveries recorded as delivered, and those still leased (sent
        /// or being sent): what the first exceeds the second by is at least the repeats so far.
        func tally() async throws -> String {
            let accepted = try await sandbox.acceptedCount()
            let states = try await pg.psql(
                url,
                "SELECT count(*) FILTER (WHERE state = 'delivered'), count(*) FILTER (WHERE state = 'leased') FROM deliveries"
            ).trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "|").map { Int($0) ?? 0 }
            return "accepted \(accepted), delivered \(states.first ?? 0), leased \(states.last ?? 0)"
        }
        var tallies: [String] = []
        func fault(
            _ name: String,
            seconds: UInt64,
            begin: () async throws -> Void,
            end: () async throws -> Void
        ) async throws {
            tallies.append("before the \(name): " + (try await tally()))
            let start = Date()
            try await begin()
            try await Task.sleep(nanoseconds: seconds * 1_000_000_000)
            try await end()
            let ended = Date()
            windows.append((name, start, ended, try await bothReady(after: ended)))
            // Some sending between faults.
            try await Task.sleep(nanoseconds: 2_000_000_000)
            tallies.append("after the \(name): " + (try await tally()))
        }
        try await Task.sleep(nanoseconds: 2_000_000_000)
        try await fault("restart", seconds: 10, begin: { await pg.halt() }, end: { try await pg.resume() })
        try await fault("hang", seconds: 30, begin: { pg.freeze() }, end: { pg.thaw() })
        try await fault("cut", seconds: 10, begin: { relay.cut() }, end: { relay.restore() })

        let totals = try await nodes[0].settledTotals(app: app, key: key, ids: [id], expecting: 20_000)
        // Each outage and each recovery is said in the node's log, with why.
        for name in ["a", "b"] {
            let said =
                (try? String(contentsOf: scratch.dir.appendingPathComponent("\(name).log"), encoding: .utf8)) ?? ""
            #expect(said.contains("the database is unavailable: requests are answered 503"), "node \(name)")
            #expect(said.contains("the database answers again"), "node \(name)")
        }
        polling.cancel()
        await polling.value
        // Why any did not end delivered: the funnel names the reasons.
        let why =
            totals == ["delivered": 20_000]
            ? .null
            : try await nodes[0].call("GET", "/v1/apps/\(app)/notifications/\(id)/funnel", key: key).1["stages"]
                ?? .null
        #expect(totals == ["delivered": 20_000], "\(totals) \(why)")
        let repeats = try await sandbox.acceptedCount() - 20_000

        // The truth of /health/ready: a fault more than `noticed` seconds old is never answered ready; from the
        // poll that first said ready after it until the next fault, every answer is ready.
        let noticed: TimeInterval = 8
        var lies: [String] = []
        for (n, log) in logs.enumerated() {
            let samples = log.all()
            for (i, w) in windows.enumerated() {
                let readyDuring = samples.filter {
                    $0.at > w.start.addingTimeInterval(noticed) && $0.at < w.end && $0.status == 200
                }
                if !readyDuring.isEmpty {
                    lies.append("node \(n) ready \(readyDuring.count) times during the \(w.name)")
                }
                let nextStart = i + 1 < windows.count ? windows[i + 1].start : Date()
                guard let back = samples.first(where: { $0.at > w.end && $0.status == 200 }) else {
                    lies.append("node \(n) never ready after the \(w.name)")
                    continue
                }
                let notReady = samples.filter { $0.at > back.at && $0.at < nextStart && $0.status != 200 }
                if !notReady.isEmpty {
                    lies.append(
                        "node \(n) not ready \(notReady.count) times after the \(w.name) (\(notReady.map(\.status)))"
                    )
                }
            }
        }
        // A lie comes with what the lying node said of its database, and when (the reason of each outage): its
        // changes of state, in full, and the first words of its other lines about the database.
        let said = ["a", "b"].enumerated().filter { n, _ in lies.contains { $0.hasPrefix("node \(n) ") } }.map {
            n,
            name in
            let log =
                (try? String(contentsOf: scratch.dir.appendingPathComponent("\(name).log"), encoding: .utf8)) ?? ""
            let lines = log.split(separator: "\n").filter {
                $0.contains("part=database") || $0.contains("is unavailable")
            }.map { $0.contains("part=database") ? String($0) : String($0.prefix(160)) }
            return "node \(n) (\(name)):\n" + lines.suffix(30).joined(separator: "\n")
        }.joined(separator: "\n")
        let windowTimes = windows.map { "\($0.name) \($0.start)…\($0.end)" }.joined(separator: ", ")
        #expect(lies.isEmpty, "\(lies); faults \(windowTimes)\n\(said)")
        for w in windows { #expect(w.back < 30, "both nodes ready \(w.back) s after the \(w.name)") }
        #expect(repeats >= 0)
        print(
            """
            database fault test: 20,000 deliveries spread over 60 s on two nodes; \(
                windows.map { "\($0.name) \(Int($0.end.timeIntervalSince($0.start))) s, both ready \(String(format: "%.1f", $0.back)) s after" }
                    .joined(separator: "; ")
            ); outcomes \(totals); repeats at the emulators: \(repeats); /health/ready polls: \(logs.map { $0.all().count }); \(tallies.joined(separator: "; "))
            """
        )
        for node in nodes {
            #expect(node.process.isRunning)
            node.process.terminate()
            await node.process.exited()
            #expect(node.process.terminationStatus == 0)
        }
    }
}
