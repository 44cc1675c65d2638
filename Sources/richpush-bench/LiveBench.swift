import ArgumentParser
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import RichPushCore

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// `richpush-bench live-updates`: ACTIVITIES Live Activities, each updated once a second for SECONDS through a
/// node's API (one request per update, `audience.live_activity`), against the APNs emulator of a sandbox in
/// another process. Reports the API's answer times, how far the rounds fell behind the clock, whether every
/// activity ended on its last state with none applied out of order, and the time from each request to its arrival at
/// the emulator (the last records the emulator keeps). `Benchmarks/live_activities.sh` runs it with the node.
struct LiveUpdatesBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "live-updates",
        abstract: "Live Activities updated once a second through a node's API, timed to the APNs emulator."
    )

    @Option(help: "The node's base URL.") var base: String
    @Option(help: "An API key of the app with the send and manage scopes.") var key: String
    @Option(help: "The app's id.") var app: String
    @Option(help: "The sandbox's admin URL.") var sandboxAdmin: String
    @Option var activities = 10_000
    @Option var seconds = 60
    @Option(help: "HTTP/1.1 connections to the node, each one request at a time.") var connections = 128
    @Option(
        help:
            "Updates per request: 1 sends each to POST /notifications; more sends them in batches to POST /live/updates."
    )
    var batch = 1

    /// One keep-alive HTTP/1.1 connection, a request at a time.
    final class Connection: Sendable {
        let channel: NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>
        let host: String

        init(host: String, port: Int, group: EventLoopGroup) async throws {
            self.host = host
            channel = try await ClientBootstrap(group: group).connect(host: host, port: port) { ch in
                ch.eventLoop.makeCompletedFuture {
                    try ch.pipeline.syncOperations.addHTTPClientHandlers()
                    return try NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>(
                        wrappingChannelSynchronously: ch
                    )
                }
            }
        }
    }

    struct Sample: Sendable {
        var status: Int
        var seconds: Double
        /// The updates the request carried.
        var items = 1
    }

    func run() async throws {
        guard let url = URL(string: base), let host = url.host, let port = url.port else {
            throw ValidationError("--base is http://HOST:PORT")
        }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let activities = self.activities
        let seconds = self.seconds
        let connections = min(self.connections, activities)
        let batch = max(1, min(self.batch, 1000))
        // The rounds' requests: one per activity, or one per batch of activities.
        let requests = (activities + batch - 1) / batch
        let sendConnections = min(self.connections, requests)
        let (key, app) = (self.key, self.app)
        let started = Date()
        let answers = NIOLockedValueBox<[Sample]>([])
        let lagMax = NIOLockedValueBox<Double>(0)
        answers.withLockedValue { $0.reserveCapacity(activities * seconds) }

        /// Requests on one connection: each a POST of `body(i)` to `path(i)` for i in its share.
        func drive(
            _ conn: Connection,
            share: StrideTo<Int>,
            rounds: Int,
            path: @escaping @Sendable (Int) -> String,
            body: @escaping @Sendable (Int, Int) -> [UInt8],
            items: @escaping @Sendable (Int) -> Int = { _ in 1 },
            record: Bool
        ) async throws {
            try await conn.channel.executeThenClose { inbound, outbound in
                var responses = inbound.makeAsyncIterator()
                for round in 1...rounds {
                    if rounds > 1 {
                        // Round r starts r - 1 seconds after the first; a late round starts at once.
                        let due = started.addingTimeInterval(Double(round - 1))
                        let wait = due.timeIntervalSinceNow
                        if wait > 0 { try await Task.sleep(nanoseconds: UInt64(wait * 1e9)) }
                        let late = -due.timeIntervalSinceNow
                        lagMax.withLockedValue { $0 = max($0, late) }
                    }
                    var local: [Sample] = []
                    for i in share {
                        let bytes = body(i, round)
                        var head = HTTPRequestHead(version: .http1_1, method: .POST, uri: path(i))
                        head.headers.add(name: "host", value: conn.host)
                        head.headers.add(name: "authorization", value: "Bearer \(key)")
                        head.headers.add(name: "content-type", value: "application/json")
                        head.headers.add(name: "content-length", value: String(bytes.count))
                        let t0 = DispatchTime.now().uptimeNanoseconds
                        try await outbound.write(.head(head))
                        try await outbound.write(.body(.byteBuffer(ByteBuffer(bytes: bytes))))
                        try await outbound.write(.end(nil))
                        var status = 0
                        reading: while let part = try await responses.next() {
                            switch part {
                            case .head(let h): status = Int(h.status.code)
                            case .body: break
                            case .end: break reading
                            }
                        }
                        let t1 = DispatchTime.now().uptimeNanoseconds
                        if record {
                            local.append(Sample(status: status, seconds: Double(t1 - t0) / 1e9, items: items(i)))
                        }
                    }
                    if record { answers.withLockedValue { $0 += local } }
                }
            }
        }

        func allConnections(_ count: Int) async throws -> [Connection] {
            var out: [Connection] = []
            for _ in 0..<count { out.append(try await Connection(host: host, port: port, group: group)) }
            return out
        }

        // 1. Each activity's update token, registered as the app would.
        let tokensStart = Date()
        let registering = try await allConnections(connections)
        try await withThrowingTaskGroup(of: Void.self) { g in
            for (c, conn) in registering.enumerated() {
                g.addTask {
                    try await drive(
                        conn,
                        share: stride(from: c, to: activities, by: connections),
                        rounds: 1,
                        path: { _ in "/v1/apps/\(app)/live/tokens" },
                        body: { i, _ in
                            Array(
                                #"{"kind":"activity","token":"\#(String(format: "%064x", 0x1_0000 + i))","activity_type":"BenchAttributes","activity_id":"act-\#(i)"}"#
                                    .utf8
                            )
                        },
                        record: false
                    )
                }
            }
            try await g.waitForAll()
        }
        print(
            String(
                format: "  %d activity tokens registered in %.1f s",
                activities,
                Date().timeIntervalSince(tokensStart)
            )
        )

        // 2. The rounds: every activity once a second, its state carrying the round and the time it was sent.
        let sending = try await allConnections(sendConnections)
        let clock = Date()
        /// One activity's update, carrying the round and the time it was sent.
        @Sendable func update(_ i: Int, _ round: Int) -> String {
            let ms = Int64(Date().timeIntervalSince1970 * 1000)
            return
                #"{"priority":"normal","live_activity":{"event":"update","content_state":{"round":\#(round),"sent_ms":\#(ms)}},"audience":{"live_activity":"act-\#(i)"}}"#
        }
        @Sendable func members(_ r: Int) -> Range<Int> { (r * batch)..<min(activities, (r + 1) * batch) }
        try await withThrowingTaskGroup(of: Void.self) { g in
            for (c, conn) in sending.enumerated() {
                g.addTask {
                    try await drive(
                        conn,
                        share: stride(from: c, to: requests, by: sendConnections),
                        rounds: seconds,
                        path: { _ in batch == 1 ? "/v1/apps/\(app)/notifications" : "/v1/apps/\(app)/live/updates" },
                        body: { r, round in
                            if batch == 1 { return Array(update(r, round).utf8) }
                            return Array(
                                (#"{"items":["# + members(r).map { update($0, round) }.joined(separator: ",") + "]}")
                                    .utf8
                            )
                        },
                        items: { members($0).count },
                        record: true
                    )
                }
            }
            try await g.waitForAll()
        }
        let sendTime = Date().timeIntervalSince(clock)
        try await group.shutdownGracefully()

        let samples = answers.withLockedValue { $0 }
        let accepted = samples.filter { $0.status == 202 }.reduce(0) { $0 + $1.items }
        let sent = samples.reduce(0) { $0 + $1.items }
        let times = samples.map(\.seconds).sorted()
        func pct(_ p: Double, _ sorted: [Double]) -> Double {
            sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
        }
        print(
            String(
                format:
                    "  %d updates sent in %d requests in %.1f s (%.0f/s; the plan: %d/s for %d s); %d answered 202; the latest round started %.2f s behind the clock",
                sent,
                samples.count,
                sendTime,
                Double(sent) / sendTime,
                activities,
                seconds,
                accepted,
                lagMax.withLockedValue { $0 }
            )
        )
        print(
            String(
                format: "  API answer (per request): p50 %.1f ms, p99 %.1f ms, max %.1f ms",
                pct(0.5, times) * 1000,
                pct(0.99, times) * 1000,
                (times.last ?? 0) * 1000
            )
        )

        // 3. What the emulator received and what its devices show.
        let expected = activities * seconds
        var received = 0
        let waitStart = Date()
        while Date().timeIntervalSince(waitStart) < 600 {
            let stats = try await Self.get("\(sandboxAdmin)/apns/stats")
            received = Int(stats["accepted"]?.intValue ?? 0)
            if received >= expected { break }
            try await Task.sleep(nanoseconds: 500_000_000)
        }
        let drained = Date().timeIntervalSince(clock)
        print(
            String(
                format: "  the emulator accepted %d of %d, the last %.1f s after the first update was sent",
                received,
                expected,
                drained
            )
        )
        let shown = try await Self.get("\(sandboxAdmin)/apns/activities?limit=\(activities + 1)")
        let list = shown["activities"]?.arrayValue ?? []
        var onLast = 0
        var inOrder = 0
        var applied = 0
        for a in list {
            if a["content_state"]?["round"]?.intValue == Int64(seconds) { onLast += 1 }
            applied += Int(a["applied"]?.intValue ?? 0)
            let history = a["history"]?.arrayValue?.compactMap(\.intValue) ?? []
            if zip(history, history.dropFirst()).allSatisfy({ $0 <= $1 }) { inOrder += 1 }
        }
        let ignored = shown["ignored"]?.objectValue ?? [:]
        print(
            "  devices: \(list.count) activities; \(onLast) show the last round; \(applied) states applied; "
                + "ignored \(ignored.isEmpty ? "none" : ignored.map { "\($0.key) \($0.value)" }.sorted().joined(separator: ", "))"
        )
        // 4. Request to emulator: the last records the emulator keeps.
        let recent = try await Self.get("\(sandboxAdmin)/apns/notifications?limit=100000")
        var delays: [Double] = []
        var lastRound: [String: Int64] = [:]
        var outOfOrder = 0
        for r in recent["notifications"]?.arrayValue ?? [] {
            guard let state = r["payload"]?["aps"]?["content-state"], let sent = state["sent_ms"]?.intValue,
                let round = state["round"]?.intValue, let at = r["received_at"]?.doubleValue,
                let token = r["token"]?.stringValue
            else { continue }
            delays.append(at - Double(sent) / 1000)
            // Records are in arrival order: a round below one the token already got arrived out of order.
            if let before = lastRound[token], round < before { outOfOrder += 1 }
            lastRound[token] = max(round, lastRound[token] ?? 0)
        }
        delays.sort()
        print(
            String(
                format: "  request to emulator (the last %d updates): p50 %.1f ms, p99 %.1f ms, max %.1f ms",
                delays.count,
                pct(0.5, delays) * 1000,
                pct(0.99, delays) * 1000,
                (delays.last ?? 0) * 1000
            )
        )
        print(
            "  order: \(outOfOrder) of those arrived after a later round of the same activity; \(inOrder) of \(list.count) histories ascend"
        )
    }

    static func get(_ url: String) async throws -> JSONValue {
        guard let u = URL(string: url) else { throw ValidationError("bad URL \(url)") }
        let (data, _) = try await URLSession.shared.data(from: u)
        return try JSONValue.parse(Array(data))
    }
}
