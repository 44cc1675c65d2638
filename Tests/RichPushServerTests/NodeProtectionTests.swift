import Foundation
import GRDB
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RichPushCore
import RichPushTestSupport
import ServiceLifecycle
import Testing

@testable import RichPushServer

#if canImport(Glibc)
import Glibc
#endif
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What protects the node itself from its public callers: the client address behind the operator's proxies, a
/// public key's budget per client address, the SQLite WAL bounded under write load and emptied when idle, and the
/// free-disk floor below which nothing more is stored.
@Suite struct NodeProtectionTests {
    typealias H = MediaHostingTests

    // MARK: The client's address

    @Test func rangesParseStrictlyAndContainWhatTheySay() throws {
        let ten = try #require(AddressRange("10.0.0.0/8"))
        #expect(ten.contains(.v4(0x0A01_0203)) && !ten.contains(.v4(0x0B00_0000)))
        let one = try #require(AddressRange("192.0.2.7"))
        let address = try #require(IPAddress(literal: "192.0.2.7"))
        #expect(one.bits == 32 && one.contains(address))
        let six = try #require(AddressRange("2001:db8::/32"))
        #expect(six.contains(try #require(IPAddress(literal: "2001:db8:ffff::1"))))
        #expect(!six.contains(try #require(IPAddress(literal: "2001:db9::1"))))
        #expect(AddressRange("0.0.0.0/0")?.contains(.v4(0xFFFF_FFFF)) == true)
        // Not an address, a prefix longer than the address, a prefix in another spelling, URL-style IPv4.
        for bad in [
            "", "/8", "10.0.0.0/33", "::/129", "10.0.0.0/+8", "10.0.0.0/08a", "0x7f.1", "127.1", "host", "1.2.3.4/",
        ] {
            #expect(AddressRange(bad) == nil, "\(bad)")
        }
    }

    @Test func theClientIsTheFirstUntrustedHopFromTheRight() throws {
        let proxies = try #require(TrustedProxies.parse(["127.0.0.1", "10.0.0.0/8"]).0)
        let peer = IPAddress(literal: "127.0.0.1")
        func key(_ fields: [(HTTPField.Name, String)], peer: IPAddress? = peer) -> String {
            var h = HTTPFields()
            for (n, v) in fields { h.append(HTTPField(name: n, value: v)) }
            return proxies.clientKey(peer: peer, headers: h)
        }
        // No header: the proxy itself.
        #expect(key([]) == "127.0.0.1")
        // What the client wrote on the left proves nothing; the first untrusted hop from the right is the client.
        #expect(key([(.xForwardedFor, "203.0.113.9, 198.51.100.7, 10.1.2.3")]) == "198.51.100.7")
        #expect(key([(.xForwardedFor, "203.0.113.9"), (.xForwardedFor, "198.51.100.7")]) == "198.51.100.7")
        // A hop that is not an address stops the walk at the last trusted hop.
        #expect(key([(.xForwardedFor, "198.51.100.7, unknown, 10.1.2.3")]) == "10.1.2.3")
        // RFC 7239, quoted IPv6 with a port; `Forwarded` wins over X-Forwarded-For.
        #expect(
            key([
                (.forwarded, #"for=192.0.2.60;proto=http, for="[2001:db8:cafe::17]:4711""#),
                (.xForwardedFor, "1.2.3.4"),
            ])
                == "2001:db8:cafe::/64"
        )
        // A peer that is not a trusted proxy is the client, whatever it says.
        #expect(key([(.xForwardedFor, "198.51.100.7")], peer: IPAddress(literal: "192.0.2.1")) == "192.0.2.1")
        // IPv6 clients are counted by /64; an IPv4-mapped peer as IPv4.
        #expect(
            IPAddress(literal: "2001:db8:1:2::1")?.clientKey == IPAddress(literal: "2001:db8:1:2:ffff::9")?.clientKey
        )
        #expect(IPAddress(literal: "2001:db8:1:2::1")?.clientKey != IPAddress(literal: "2001:db8:1:3::1")?.clientKey)
        #expect(IPAddress(host: "::ffff:192.0.2.1")?.clientKey == "192.0.2.1")
        // A list padded past the hops read costs no more: only the last 16 are looked at.
        let padded = Array(repeating: "10.0.0.1", count: 10_000).joined(separator: ",")
        #expect(TrustedProxies.forwardedFor([.xForwardedFor: padded]).count == TrustedProxies.maxHops)
        #expect(TrustedProxies.parse(["10.0.0.0/8", "nope"]).1?.contains("nope") == true)
    }

    @Test func theConfigurationReadsProxiesTheClientRateAndTheDiskFloor() throws {
        var c = ServerConfiguration()
        try c.apply(
            json:
                #"{"trusted_proxies":["10.0.0.0/8","::1"],"public_rate_per_client":3,"disk":{"min_free_megabytes":64}}"#
        )
        #expect(c.trustedProxies.ranges.count == 2 && c.publicRatePerClient == 3 && c.minFreeDiskMegabytes == 64)
        #expect(throws: ServerConfiguration.Problem.self) { try c.apply(json: #"{"trusted_proxies":["10.0.0.0/99"]}"#) }
        #expect(throws: ServerConfiguration.Problem.self) { try c.apply(json: #"{"trusted_proxies":"10.0.0.0/8"}"#) }
        #expect(throws: ServerConfiguration.Problem.self) { try c.apply(json: #"{"public_rate_per_client":0}"#) }
        #expect(throws: ServerConfiguration.Problem.self) { try c.apply(json: #"{"disk":{"min_free":1}}"#) }
    }

    // MARK: A public key's budget per client

    /// An app with a register key and a send key.
    static func appWithKeys(
        _ client: any TestClientProtocol
    ) async throws -> (app: String, register: String, send: String) {
        let (_, _, body) = try await H.call(
            client,
            .post,
            "/v1/apps",
            body: ByteBuffer(string: #"{"name":"Edge","bundle_id":"com.example.edge"}"#)
        )
        let created = try JSONValue.parse(body)
        let app = try #require(created["app"]?["id"]?.stringValue)
        func key(_ scope: String) async throws -> String {
            let (_, _, k) = try await H.call(
                client,
                .post,
                "/v1/apps/\(app)/keys",
                body: ByteBuffer(string: #"{"scopes":["\#(scope)"]}"#)
            )
            return try #require(try JSONValue.parse(k)["api_key"]?.stringValue)
        }
        return (app, try await key("register"), try await key("send"))
    }

    @Test func onePublicClientCannotSpendTheKeysWholeBudget() async throws {
        let backend = try SQLiteBackend(
            path: FileManager.default.temporaryDirectory.appendingPathComponent("edge-\(UUID().uuidString).sqlite").path
        )
        var api = RichPushAPI(backend: backend, adminKey: H.admin)
        api.trustedProxies = TrustedProxies([try #require(AddressRange("127.0.0.1"))])
        api.publicClientLimiter = RateLimiter(rate: 0.01, burst: 5)
        try await Application(router: api.router()).test(.live) { client in
            let keys = try await Self.appWithKeys(client)
            func me(_ key: String, from address: String) async throws -> (Int, HTTPFields, [UInt8]) {
                try await H.call(client, .get, "/v1/me", key: key, headers: [.xForwardedFor: address])
            }
            for _ in 0..<5 { #expect(try await me(keys.register, from: "198.51.100.7").0 == 200) }
            let (refused, headers, body) = try await me(keys.register, from: "198.51.100.7")
            #expect(refused == 429 && headers[.retryAfter] != nil)
            let error = try JSONValue.parse(body)["error"]
            #expect(error?["code"] == "rate-limited")
            #expect(error?["message"]?.stringValue?.contains("client address") == true, "\(String(describing: error))")
            // Another visitor of the same page is not held back, nor is the app's own server with another key.
            #expect(try await me(keys.register, from: "198.51.100.8").0 == 200)
            #expect(try await me(keys.send, from: "198.51.100.7").0 == 200)
            // An IPv6 visitor is one bucket for its whole /64.
            for i in 0..<5 { #expect(try await me(keys.register, from: "2001:db8:7:7::\(i + 1)").0 == 200) }
            #expect(try await me(keys.register, from: "2001:db8:7:7:ffff::1").0 == 429)
            #expect(try await me(keys.register, from: "2001:db8:7:8::1").0 == 200)
        }
    }

    // MARK: The WAL

    static func walBytes(_ path: String) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: path + "-wal"))?[.size] as? Int) ?? 0
    }

    /// Readers that always hold a snapshot keep the log from restarting; without a checkpoint that waits for them
    /// the WAL grew by every write (10 GB in a minute of registrations), and kept its size after.
    @Test func theWALStaysBoundedUnderWritesAndEmptiesWhenIdle() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("wal-\(UUID().uuidString).sqlite").path
        defer { for s in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + s) } }
        let pool = try SQLiteDeliveryQueue.openPool(path: path, backgroundCheckpoints: true)
        try await pool.write { db in try db.execute(sql: "CREATE TABLE filler (id INTEGER PRIMARY KEY, body BLOB)") }
        // 2,000 frames of 4 KB: 8 MB.
        let checkpointer = try WALCheckpointer(pool: pool, interval: 0.05, truncateAbove: 2_000)
        let stop = ManagedAtomicFlag()
        let blob = Data(repeating: 7, count: 3_000)
        var largest = 0
        try await withThrowingTaskGroup(of: Void.self) { group in
            // Readers that overlap, so that some snapshot is always open.
            for _ in 0..<2 {
                group.addTask {
                    while !stop.isSet {
                        try await pool.read { db in
                            _ = try Int.fetchOne(db, sql: "SELECT count(*) FROM filler")
                            usleep(20_000)
                        }
                    }
                }
            }
            group.addTask {
                var previous: Int?
                while !stop.isSet {
                    let look = try await checkpointer.checkpoint(previousFrames: previous)
                    previous = look.truncated ? 0 : look.walFrames
                    try await Task.sleep(nanoseconds: UInt64(checkpointer.pause(after: previous) * 1e9))
                }
            }
            // 180 MB of writes, in transactions of 300 KB.
            for _ in 0..<600 {
                try await pool.write { db in
                    for _ in 0..<100 { try db.execute(sql: "INSERT INTO filler (body) VALUES (?)", arguments: [blob]) }
                }
                largest = max(largest, Self.walBytes(path))
                // As a server's requests do, the writer lets other tasks run between its transactions.
                await Task.yield()
            }
            stop.set()
            try await group.waitForAll()
        }
        // The bound, and what the writes between two looks can add past it: a fixed size, not a share of the
        // 180 MB written.
        #expect(largest < 32 << 20, "the WAL reached \(largest >> 20) MB")
        // Idle: two looks with nothing written, and the file is empty.
        var previous: Int?
        for _ in 0..<3 {
            let look = try await checkpointer.checkpoint(previousFrames: previous)
            previous = look.truncated ? 0 : look.walFrames
        }
        #expect(Self.walBytes(path) == 0, "\(Self.walBytes(path)) bytes left in the WAL when idle")
        let count = try await pool.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM filler") }
        #expect(count == 60_000)
    }

    /// A passive checkpoint never waits, and SQLite answers it "database is locked" when it reads the WAL's index
    /// while a commit rewrites it: a window of microseconds, met now and then by a look every 50 ms beside
    /// 300 KB transactions under the whole suite's load (the WAL test above failed so, once in CI and once here).
    /// Beside a writer that commits without pause it is met often: every look must still answer.
    @Test func aLookBesideACommitDoesNotFail() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("busy-\(UUID().uuidString).sqlite")
            .path
        defer { for s in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + s) } }
        let pool = try SQLiteDeliveryQueue.openPool(path: path, backgroundCheckpoints: true)
        try await pool.write { db in try db.execute(sql: "CREATE TABLE filler (id INTEGER PRIMARY KEY, body BLOB)") }
        let checkpointer = try WALCheckpointer(pool: pool, interval: 0.05, truncateAbove: 1_000_000)
        let stop = ManagedAtomicFlag()
        let blob = Data(repeating: 7, count: 100)
        let looks = try await withThrowingTaskGroup(of: Int.self) { group in
            group.addTask {
                var commits = 0
                while !stop.isSet {
                    try await pool.write { db in
                        try db.execute(sql: "INSERT INTO filler (body) VALUES (?)", arguments: [blob])
                    }
                    commits += 1
                }
                return commits
            }
            var looks = 0
            let end = Date().addingTimeInterval(3)
            while Date() < end {
                _ = try await checkpointer.checkpoint()
                looks += 1
            }
            stop.set()
            _ = try await group.next()
            return looks
        }
        // Alone, thousands of looks in the 3 s, and before the retry one of them failed within about a second; beside
        // the whole suite a few (4 seen), which is the machine's load, not a bound of the checkpointer's.
        #expect(looks >= 1)
        print("WAL looks beside a writer committing without pause: \(looks) in 3 s")
    }

    /// A look that finds no new frame while readers are busy (a writer starved for an interval looks idle):
    /// the truncation waits only for the reads in progress. From a connection of its own it held the write lock
    /// while it waited for readers that overlapped without a gap, and gave up after the busy timeout (10 s).
    @Test func anIdleTruncationDoesNotWaitOutBusyReaders() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("idle-\(UUID().uuidString).sqlite")
            .path
        defer { for s in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + s) } }
        let pool = try SQLiteDeliveryQueue.openPool(path: path, backgroundCheckpoints: true)
        try await pool.write { db in
            try db.execute(sql: "CREATE TABLE filler (id INTEGER PRIMARY KEY, body BLOB)")
            for _ in 0..<100 {
                try db.execute(sql: "INSERT INTO filler (body) VALUES (?)", arguments: [Data(count: 3_000)])
            }
        }
        let checkpointer = try WALCheckpointer(pool: pool, interval: 0.05)
        let stop = ManagedAtomicFlag()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<3 {
                group.addTask {
                    while !stop.isSet {
                        try await pool.read { db in
                            _ = try Int.fetchOne(db, sql: "SELECT count(*) FROM filler")
                            usleep(20_000)
                        }
                    }
                }
            }
            try await Task.sleep(nanoseconds: 100_000_000)
            let first = try await checkpointer.checkpoint()
            let started = Date()
            let second = try await checkpointer.checkpoint(previousFrames: first.walFrames)
            let took = Date().timeIntervalSince(started)
            stop.set()
            try await group.waitForAll()
            // What failed was an error (the busy timeout, 10 s, given up), which `try` above reports; no bound on the
            // time: beside the whole suite this test's task was resumed seconds late, which says nothing of the wait.
            #expect(second.truncated, "\(second), \(took) s")
            print("an idle truncation beside three busy readers: \(String(format: "%.2f", took)) s")
        }
        #expect(Self.walBytes(path) == 0)
    }

    // MARK: Connections

    /// The bounds themselves: per client address (an IPv6 /64 as one), per node, the operator's proxies counted
    /// toward the node only, and every place given back.
    @Test func connectionsAreCountedPerClientAndPerNode() throws {
        let proxies = TrustedProxies([try #require(AddressRange("10.0.0.0/8"))])
        let limits = ConnectionLimits(.init(perClient: 2, total: 5, idleSeconds: 30), proxies: proxies)
        let a = IPAddress(host: "192.0.2.1")
        var keys: [String] = []
        for _ in 0..<2 { keys.append(try limits.admit(peer: a).get()) }
        guard case .failure(let e) = limits.admit(peer: a) else {
            Issue.record("a third from one address")
            return
        }
        #expect(e.refusal == .perClient)
        // One /64: two addresses in it are one client.
        let v6a = IPAddress(host: "2001:db8:0:1::1")
        let v6b = IPAddress(host: "2001:db8:0:1::ffff")
        keys.append(try limits.admit(peer: v6a).get())
        keys.append(try limits.admit(peer: v6b).get())
        guard case .failure = limits.admit(peer: IPAddress(host: "2001:db8:0:1:abcd::9")) else {
            Issue.record("a third from one /64")
            return
        }
        // The node's fifth place goes to the proxy, which no per-client bound holds; then the node is full.
        keys.append(try limits.admit(peer: IPAddress(host: "10.1.2.3")).get())
        guard case .failure(let full) = limits.admit(peer: IPAddress(host: "198.51.100.9")) else {
            Issue.record("a sixth connection on a node of five")
            return
        }
        #expect(full.refusal == .node)
        #expect(limits.open.total == 5 && limits.open.clients == 2)
        for k in keys { limits.release(k) }
        #expect(limits.open.total == 0 && limits.open.clients == 0)
        #expect(ConnectionLimits.Limits.defaultTotal(limit: 1_024) == 64)
        #expect(ConnectionLimits.Limits.defaultTotal(limit: 20_000) == 18_976)
        #expect(ConnectionLimits.Limits.defaultTotal(limit: 1_048_576) == 65_536)
        #expect(ConnectionLimits.Limits().perClient == 1_024 && ConnectionLimits.Limits().idleSeconds == 30)
        // The settings, and a wrong one named.
        var c = ServerConfiguration()
        try c.apply(json: #"{"connections": {"per_client": 8, "max": 100, "idle_seconds": 5}}"#)
        #expect(c.connections == ConnectionLimits.Limits(perClient: 8, total: 100, idleSeconds: 5))
        #expect(throws: ServerConfiguration.Problem.self) {
            try c.apply(json: #"{"connections": {"per_client": 0}}"#)
        }
        do {
            try c.apply(json: #"{"connections": {"idle": 5}}"#)
            Issue.record("an unknown key was taken")
        } catch let p as ServerConfiguration.Problem {
            #expect(p.description.contains("connections"), "\(p)")
        }
    }

    /// A real server with 4 connections per client and 3 s of idleness: a fifth connection from the same address
    /// is closed as soon as it is accepted while the four held answer; held connections with nothing on them, and
    /// one whose request head comes a byte at a time and never ends, are closed; then the address connects again.
    @Test func aClientHoldsItsShareOfConnectionsAndIdleOnesClose() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("conn-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        var config = ApplicationTests.configuration(in: folder)
        config.connections = .init(perClient: 4, idleSeconds: 3)
        let server = try await TestServer.start(config, adminKey: APIKeys.newKey())
        let port = server.port
        let health = Array("GET /health HTTP/1.1\r\nHost: x\r\n\r\n".utf8)
        func answer(_ fd: Int32) async -> String {
            await offThePool {
                var chunk = [UInt8](repeating: 0, count: 4096)
                let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                return n > 0 ? String(decoding: chunk[0..<n], as: UTF8.self) : ""
            }
        }
        // Four connections, each asking at once (the idle time counts from the connection's start), are answered.
        var held: [Int32] = []
        for _ in 0..<4 {
            let fd = try RawHTTP.connected(port)
            #expect(RawHTTP.write(fd, health))
            held.append(fd)
        }
        for fd in held {
            let a = await answer(fd)
            #expect(a.hasPrefix("HTTP/1.1 200"), "\(a.prefix(200))")
        }
        // A fifth from the same address while they are held: closed as soon as it is accepted.
        let fifth = try RawHTTP.connected(port)
        // 15 s only bounds the wait, as below (a loaded full run saw no close within 5).
        #expect(await RawHTTP.closedByServer(fifth, within: 15), "a fifth connection from one address was kept")
        close(fifth)
        // Then nothing more on them: each is closed.
        for fd in held { #expect(await RawHTTP.closedByServer(fd, within: 15), "an idle connection was kept") }
        for fd in held { close(fd) }
        // A head that never ends, a byte every 200 ms.
        let slow = try RawHTTP.connected(port)
        #expect(RawHTTP.write(slow, Array("GET /health HTTP/1.1\r\nHo".utf8)))
        let bytes = await Self.trickle(slow, UInt8(ascii: "x"), upTo: 100)
        #expect(bytes < 100, "a request head sent a byte at a time for 20 s was kept")
        close(slow)
        // Every place was given back: the address connects and is answered.
        var again: [Int32] = []
        defer { for fd in again { close(fd) } }
        for _ in 0..<4 {
            let fd = try RawHTTP.connected(port)
            #expect(RawHTTP.write(fd, health))
            again.append(fd)
        }
        for fd in again {
            let a = await answer(fd)
            #expect(a.hasPrefix("HTTP/1.1 200"), "\(a.prefix(200))")
        }
        try? await server.stop()
    }

    /// Writes `byte` to `fd` every 200 ms, at most `limit` times, until a write fails (the server closed it); the
    /// bytes written.
    static func trickle(_ fd: Int32, _ byte: UInt8, upTo limit: Int) async -> Int {
        await Task.detached {
            var sent = 0
            while RawHTTP.write(fd, [byte]), sent < limit {
                sent += 1
                try? await Task.sleep(nanoseconds: 200_000_000)
            }
            return sent
        }.value
    }

    /// 1 s of idleness: a connection that asks for hosted media alone, 20 answers 100 ms apart, is kept (the
    /// HTTP layer's timer, which never sees a media request, closed it after its idle time); one that asks for a 4 MB
    /// file and reads nothing is reset; one whose media request trickles a body is closed; one with nothing on it is
    /// closed.
    @Test func aConnectionBusyWithMediaAloneIsKeptAndAStalledOneClosed() async throws {
        let node = try await MediaNode.start("media-idle")
        defer { node.removeFolder() }
        let (server, small, large) = (node.server, node.small, node.large)
        let port = server.port

        let busy = try RawHTTP.connected(port)
        defer { close(busy) }
        // Asked 20 times, 100 ms apart: at least 2 s, twice the idle time, however slow the machine (a loaded suite
        // answered once in 3 s, so a loop bounded in time proved nothing); the node must never close it.
        let (answers, ended, idle) = await Self.askForMedia(busy, small.name, size: 50_000, times: 20)
        // Kept, unless this client itself went quiet for most of the 1 s idle time between two requests (a loaded
        // full run once reset it after 19 answers): then the node closing it is the rule, not a fault.
        let seen = "\(answers) answers, then \(ended ?? "kept"); the client idle \(Int(idle * 1000)) ms at most"
        #expect(
            (ended == nil && answers == 20) || idle >= 0.8,
            "a connection asking for media every 100 ms: \(seen); the node's closes: \(server.closes)"
        )

        // 4 MB asked for with a small receive buffer, nothing read: nothing more leaves, and it is closed with a
        // reset, so that the socket does not live on, orphaned, with megabytes still to send.
        let stalled = try Self.askAndReadNothing(port, large.name)
        defer { close(stalled) }
        try await Task.sleep(nanoseconds: 4_000_000_000)
        let ending = await RawHTTP.ending(stalled, within: 10)
        #expect(ending == "reset", "a client that read nothing of its media: \(ending)")

        // A media GET that declares a body and sends it a byte at a time is closed like any idle one.
        let trickling = try RawHTTP.connected(port)
        defer { close(trickling) }
        let declared = "GET /media/\(small.name) HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n"
        #expect(RawHTTP.write(trickling, Array(declared.utf8)))
        #expect(
            await Self.trickle(trickling, UInt8(ascii: "x"), upTo: 50) < 50,
            "a media request's body sent a byte at a time for 10 s was read on"
        )

        let quiet = try RawHTTP.connected(port)
        defer { close(quiet) }
        // Closed after 1 s; 15 s only bounds the wait (a loaded suite's node took more than 5).
        #expect(await RawHTTP.closedByServer(quiet, within: 15), "an idle connection was kept")
        try? await server.stop()
    }

    /// 1 s of idleness, the node's connections on a loop of their own that is busy 1.5 s in every 2 (a loop runs
    /// every due task of a turn before it looks at its sockets again, so its rules ran on what the channel had seen
    /// before the turn): a connection asking for media every 100 ms is still kept (it was reset after 5 answers,
    /// closed as idle with its next request unread, or reset as stalled after its client had read), and so is one
    /// whose body comes at 2.5 KB/s; one that reads nothing of 4 MB is still reset, and an idle one still closed.
    @Test func theRulesAskTheKernelWhenTheLoopWasBusy() async throws {
        // The loop made busy is this test's alone: the other tests' servers run on the process's shared loops.
        let loop = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let node = try await MediaNode.start("busy-loop", connectionLoops: loop)
        defer { node.removeFolder() }
        let (server, small, large, admin) = (node.server, node.small, node.large, node.admin)
        let quiet = try RawHTTP.connected(server.port)
        defer { close(quiet) }
        let stalled = try Self.askAndReadNothing(server.port, large.name)
        defer { close(stalled) }
        let done = ManagedAtomicFlag()
        let hog = Task.detached {
            while !done.isSet {
                loop.next().execute {
                    let end = Date().addingTimeInterval(1.5)
                    while Date() < end {}
                }
                try? await Task.sleep(nanoseconds: 2_000_000_000)
            }
        }
        // A body sent at 2.5 KB/s (the rule asks for 1 KB in each idle time) across the loop's busy turns: the loop
        // reads it only between them. Its pace is kept by the clock, on a thread of its own: paced by sleeps alone
        // (150 bytes, then 100 ms) on the task pool, a loaded run's late wake-ups brought it under 1 KB in a second,
        // and the node closed it as the rule says. What it sent by then, and its longest wait between two writes,
        // are told if it is closed.
        let uploading = try RawHTTP.connected(server.port)
        defer { close(uploading) }
        let body = Array(#"{"name":"Shop","bundle_id":"com.example.app"}"#.utf8) + [UInt8](repeating: 32, count: 10_000)
        let head =
            "POST /v1/apps HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(admin)\r\n"
            + "Content-Type: application/json\r\nContent-Length: \(body.count)\r\n\r\n"
        let upload = Task { () -> String in
            guard RawHTTP.write(uploading, Array(head.utf8)) else { return "the head was not taken" }
            if let closed = await RawHTTP.writePaced(uploading, body, bytesPerSecond: 2_500) {
                return "the body: \(closed)"
            }
            let answer = await RawHTTP.receive(uploading, within: 15) { $0.count >= 12 }
            return String(decoding: answer.prefix(12), as: UTF8.self)
        }
        // Connected just before it asks (opened at the start, with the upload's setup between, a loaded run's
        // connection was idle past 1 s before its first request, and closed as the rule says).
        let busy = try RawHTTP.connected(server.port)
        defer { close(busy) }
        let (answers, ended, idle) = await Self.askForMedia(busy, small.name, size: 50_000, times: 20)
        let seen = "\(answers) answers, then \(ended ?? "kept"); the client idle \(Int(idle * 1000)) ms at most"
        #expect(
            (ended == nil && answers == 20) || idle >= 0.8,
            "media every 100 ms on a busy loop: \(seen); the node's closes: \(server.closes)"
        )
        let uploaded = await upload.value
        #expect(
            uploaded == "HTTP/1.1 201",
            "a body sent at 2.5 KB/s on a busy loop: \(uploaded); the node's closes: \(server.closes)"
        )
        let ending = await RawHTTP.ending(stalled, within: 10)
        #expect(ending == "reset", "a client that read nothing of its media, on a busy loop: \(ending)")
        #expect(await RawHTTP.closedByServer(quiet, within: 15), "an idle connection on a busy loop was kept")
        done.set()
        _ = await hog.value
        try? await server.stop()
        try await loop.shutdownGracefully()
    }

    /// 3 s of idleness, the node's connections on a loop of their own: the loop is busy for 5 s just after an
    /// answer, and the client's next request comes 100 ms into it. The idle rule's look, due 3 s after the answer,
    /// runs when the busy turn ends, 5 s after it, with the request unread in the socket: the request is answered
    /// (its grace was counted from the last activity, already past, and the connection was reset). A try whose
    /// request went later than the idle time after the answer (a loaded run: the fresh clone's took 51 s, with 1 s
    /// of idleness) proves nothing, as the connection was idle then: another is made, three at most.
    @Test func aLookThatRunsLateStillGivesAnUnreadRequestItsGrace() async throws {
        let idle = 3.0
        let loop = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let node = try await MediaNode.start("late-look", idleSeconds: idle, connectionLoops: loop)
        defer { node.removeFolder() }
        let (server, small) = (node.server, node.small)
        var judged = false
        for _ in 0..<3 where !judged {
            let fd = try RawHTTP.connected(server.port)
            defer { close(fd) }
            let (first, firstEnded, _) = await Self.askForMedia(fd, small.name, size: 50_000, times: 1)
            #expect(first == 1 && firstEnded == nil, "the first answer: \(first), \(firstEnded ?? "kept")")
            // The answer was read 100 ms before `askForMedia` returned.
            let answered = Date().addingTimeInterval(-0.1)
            loop.next().execute {
                let end = Date().addingTimeInterval(5)
                while Date() < end {}
            }
            usleep(100_000)
            guard Date().timeIntervalSince(answered) < idle - 0.5 else { continue }
            judged = true
            let (answers, ended, _) = await Self.askForMedia(fd, small.name, size: 50_000, times: 1)
            #expect(
                answers == 1 && ended == nil,
                "a request sent while the loop was busy: \(answers) answers, then \(ended ?? "kept"); closes: \(server.closes)"
            )
        }
        #expect(judged, "every try's request went after the idle time")
        try? await server.stop()
        try await loop.shutdownGracefully()
    }

    /// The kernel's counters are read where its structure puts them: glibc's shorter `tcp_info` agrees on the
    /// shared part, and over a real connection the bytes one side wrote are what the other received and what the
    /// writer sees acknowledged.
    @Test func theKernelsCountersAreReadFromTheirPlaces() async throws {
        #if os(Linux)
        #expect(
            MemoryLayout<tcp_info>.offset(of: \tcp_info.tcpi_last_data_recv) == SocketProgress.lastDataReceivedOffset
        )
        // The 64-bit counters follow glibc's last field, the first of them 8-byte aligned.
        #expect(MemoryLayout<tcp_info>.size == 104)
        #expect(MemoryLayout<SocketProgress.Raw>.size > SocketProgress.bytesReceivedOffset + 8)
        let received = NIOLockedValueBox<Channel?>(nil)
        let listener = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in
                received.withLockedValue { $0 = channel }
                return channel.eventLoop.makeSucceededVoidFuture()
            }
            .bind(host: "127.0.0.1", port: 0).get()
        let port = try #require(listener.localAddress?.port)
        let client = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: "127.0.0.1", port: port).get()
        try await client.writeAndFlush(ByteBuffer(repeating: 7, count: 100_000))
        var sent: SocketProgress?
        var got: SocketProgress?
        for _ in 0..<50 {
            sent = try await client.eventLoop.submit { SocketProgress.read(client) }.get()
            if let server = received.withLockedValue({ $0 }) {
                got = try await server.eventLoop.submit { SocketProgress.read(server) }.get()
            }
            if sent?.bytesAcknowledged ?? 0 >= 100_001, got?.bytesReceived ?? 0 >= 100_000 { break }
            try await Task.sleep(nanoseconds: 20_000_000)
        }
        // The kernel counts the SYN's place in the sequence as one byte acknowledged.
        #expect(sent?.bytesAcknowledged == 100_001, "\(String(describing: sent))")
        #expect(got?.bytesReceived == 100_000, "\(String(describing: got))")
        #expect((got?.lastReceivedMilliseconds ?? .max) < 5_000)
        // Off its loop, the view is not read.
        #expect(SocketProgress.read(client) == nil)
        try await client.close()
        try await listener.close()
        #endif
    }

    /// A request that stops the HTTP/1 parser (an upgrade, CONNECT) is answered with `Connection: close` and its
    /// connection ends; nothing after it is read. Read on, the bytes that followed piled up unparsed in the decoder's
    /// buffer: one connection streaming after `Connection: Upgrade` took a node from 73 MB to 2.6 GB in 10 s.
    @Test func aRequestThatStopsTheParserEndsItsConnection() async throws {
        let node = try await Node.start("upgrade", idleSeconds: 10)
        defer { node.removeFolder() }
        let server = node.server
        for head in [
            "GET /health HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
            "CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\n",
        ] {
            let fd = try RawHTTP.connected(server.port)
            defer { close(fd) }
            #expect(RawHTTP.write(fd, Array(head.utf8)))
            let sent = await Self.flood(fd, for: 3)
            let answer = String(decoding: await RawHTTP.receive(fd, within: 5) { _ in false }, as: UTF8.self)
            #expect(answer.hasPrefix("HTTP/1.1 "), "\(head.prefix(20)): \(answer.prefix(200))")
            #expect(answer.lowercased().contains("connection: close"), "\(answer.prefix(300))")
            // The kernel's buffers take a few MB before the node, reading nothing more, stops the client.
            #expect(sent < 32_000_000, "\(head.prefix(20)): the node took \(sent) bytes after it")
            #expect(await RawHTTP.ending(fd, within: 5) != "open")
        }
        try? await server.stop()
    }

    /// Writes junk on `fd` as fast as the kernel takes it for `seconds` (or until the connection ends); the bytes
    /// taken.
    static func flood(_ fd: Int32, for seconds: TimeInterval) async -> Int {
        await offThePool {
            let flags = fcntl(fd, F_GETFL)
            _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
            defer { _ = fcntl(fd, F_SETFL, flags) }
            let junk = [UInt8](repeating: 0x41, count: 65_536)
            var sent = 0
            let end = Date().addingTimeInterval(seconds)
            while Date() < end {
                let n = junk.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if n > 0 {
                    sent += n
                } else if errno == EAGAIN || errno == EWOULDBLOCK {
                    usleep(10_000)
                } else {
                    break
                }
            }
            return sent
        }
    }

    /// A chunked body of one real byte per chunk wrapped in 2.2 KB of chunk extension, a chunk every 300 ms: far
    /// past 1 KB/s on the wire, 3 bytes a second of body. Closed like any slow body (the kernel's count of what
    /// arrived, credited to the body, kept such a connection for good).
    @Test func aBodyPaddedWithChunkExtensionsIsSlow() async throws {
        let node = try await Node.start("chunk-ext", idleSeconds: 1)
        defer { node.removeFolder() }
        let (server, admin) = (node.server, node.admin)
        let fd = try RawHTTP.connected(server.port)
        defer { close(fd) }
        let head =
            "POST /v1/apps HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(admin)\r\n"
            + "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        #expect(RawHTTP.write(fd, Array(head.utf8)))
        let chunk = Array("1;x=\(String(repeating: "y", count: 2_200))\r\n \r\n".utf8)
        let kept = await offThePool { () -> Double in
            let start = Date()
            while Date().timeIntervalSince(start) < 15, RawHTTP.write(fd, chunk) { usleep(300_000) }
            return Date().timeIntervalSince(start)
        }
        #expect(kept < 8, "a body of 3 bytes a second in 7 KB/s of chunk extensions was read on for \(kept) s")
        try? await server.stop()
    }

    /// Asks `fd` for `/media/<name>` (`size` bytes) `times` times, each answer read whole, 100 ms between them: the
    /// answers read, how the connection ended if it did ("closed", "errno N"), and the longest this client itself
    /// was idle (from its start, or an answer's last byte read, to the next request's write; a loaded machine
    /// stretches the 100 ms). `fd` is connected just before.
    static func askForMedia(_ fd: Int32, _ name: String, size: Int, times: Int) async -> (Int, String?, Double) {
        let ask = Array("GET /media/\(name) HTTP/1.1\r\nHost: x\r\n\r\n".utf8)
        return await offThePool { () -> (Int, String?, Double) in
            var wait = timeval(tv_sec: 1, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, socklen_t(MemoryLayout<timeval>.size))
            var chunk = [UInt8](repeating: 0, count: 65536)
            var answered = 0
            var pending: [UInt8] = []
            var (lastRead, longest) = (Date(), 0.0)
            for _ in 0..<times {
                longest = max(longest, Date().timeIntervalSince(lastRead))
                guard RawHTTP.write(fd, ask) else { return (answered, "a write failed", longest) }
                // An answer is its head and the file: read to the end of this one (a slow moment is waited out).
                let patience = Date().addingTimeInterval(30)
                while true {
                    if let head = pending.firstRange(of: Array("\r\n\r\n".utf8)),
                        pending.count >= head.upperBound + size
                    {
                        pending.removeFirst(head.upperBound + size)
                        break
                    }
                    let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                    if n == 0 { return (answered, "closed", longest) }
                    if n < 0 {
                        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) && Date() < patience { continue }
                        return (answered, "errno \(errno)", longest)
                    }
                    pending += chunk[0..<n]
                }
                answered += 1
                lastRead = Date()
                usleep(100_000)
            }
            return (answered, nil, longest)
        }
    }

    /// A connection with a 4 KB receive buffer that asks for `/media/<name>` and reads nothing.
    static func askAndReadNothing(_ port: Int, _ name: String) throws -> Int32 {
        let fd = try RawHTTP.connected(port, receiveBuffer: 4096)
        #expect(RawHTTP.write(fd, Array("GET /media/\(name) HTTP/1.1\r\nHost: x\r\n\r\n".utf8)))
        return fd
    }

    /// A node of its own (a scratch folder, its admin key) whose connections go idle after `idleSeconds`.
    struct Node {
        let server: TestServer
        let admin: String
        let folder: URL

        static func start(
            _ name: String,
            idleSeconds: Double,
            connectionLoops: (any EventLoopGroup)? = nil
        ) async throws -> Node {
            let folder = FileManager.default.temporaryDirectory.appendingPathComponent("\(name)-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            var config = ApplicationTests.configuration(in: folder)
            config.connections = .init(idleSeconds: idleSeconds)
            let admin = APIKeys.newKey()
            let server = try await TestServer.start(config, adminKey: admin, connectionLoops: connectionLoops)
            return Node(server: server, admin: admin, folder: folder)
        }

        func removeFolder() { try? FileManager.default.removeItem(at: folder) }
    }

    /// A node with 1 s of idleness and two hosted PNGs, of 50 KB and 4 MB, in a folder of its own.
    struct MediaNode {
        let server: TestServer
        let small: MediaStore.Item
        let large: MediaStore.Item
        let admin: String
        let folder: URL

        static func start(
            _ name: String,
            idleSeconds: Double = 1,
            connectionLoops: (any EventLoopGroup)? = nil
        ) async throws -> MediaNode {
            let node = try await Node.start(name, idleSeconds: idleSeconds, connectionLoops: connectionLoops)
            let store = try #require(node.server.application.api.media?.store)
            return MediaNode(
                server: node.server,
                small: try store.put(MediaSamples.file(MediaSamples.png, size: 50_000), type: .png),
                large: try store.put(MediaSamples.file(MediaSamples.png, size: 4_000_000), type: .png),
                admin: node.admin,
                folder: node.folder
            )
        }

        func removeFolder() { try? FileManager.default.removeItem(at: folder) }
    }

    /// 1 s of idleness: a client asks for an answer small enough to fit in the node's socket buffer, then reads
    /// nothing. The connection, idle once the answer has left the channel, is closed; the kernel must not keep its
    /// socket, with the answer still queued, for as long as the client keeps its end open (it did, orphaned in
    /// FIN-WAIT-1; the kernel now drops it once the queued data has waited twice the idle time, 10 s at least).
    @Test func anAnswerLeftUnreadInTheKernelDoesNotOutliveItsConnection() async throws {
        let node = try await Node.start("orphan", idleSeconds: 1)
        defer { node.removeFolder() }
        let server = node.server
        let store = try #require(server.application.api.media?.store)
        let file = try store.put(MediaSamples.file(MediaSamples.png, size: 40_000), type: .png)
        let client = try RawHTTP.connected(server.port, receiveBuffer: 4096)
        defer { close(client) }
        #expect(RawHTTP.write(client, Array("GET /media/\(file.name) HTTP/1.1\r\nHost: x\r\n\r\n".utf8)))
        let clientPort = Self.localPort(client)
        func nodeSide() -> (state: String, queued: Int)? {
            Self.nodeSide(serverPort: server.port, clientPort: clientPort)
        }
        // The answer is sent, mostly into the kernel's buffers, and the connection closed when idle (about 1 s).
        var seen: [String] = []
        let start = Date()
        var gone = false
        while Date().timeIntervalSince(start) < 40 {
            guard let side = nodeSide() else {
                gone = true
                break
            }
            let s = "\(side.state)/\(side.queued)"
            if seen.last != s { seen.append(s) }
            try await Task.sleep(nanoseconds: 100_000_000)
        }
        // 01 established, 04 FIN-WAIT-1 (closed by the node, its answer still queued). Either with bytes queued shows
        // the answer waited unread: a poll delayed on a loaded machine can miss the established second entirely
        // (a CI run saw only ["01/0", "04/36207"]), and FIN-WAIT-1 with the answer queued is the very orphan.
        #expect(
            seen.contains { ($0.hasPrefix("01/") || $0.hasPrefix("04/")) && !$0.hasSuffix("/0") },
            "the answer never waited: \(seen)"
        )
        #expect(gone, "the node's socket still queues the unread answer after 40 s: \(seen)")
        try? await server.stop()
    }

    /// The local port of a connected socket.
    static func localPort(_ fd: Int32) -> Int {
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    /// The node's end of a connection as /proc/net/tcp shows it: its state (hex, 01 established) and the bytes it
    /// still queues; nil once the node holds no such socket. A node listening on every address takes IPv4
    /// connections on an IPv6 socket (tcp6 lists those). Read to its end: a string read of the file took only its
    /// first page, which a loaded suite's hundreds of sockets outgrow.
    static func nodeSide(serverPort: Int, clientPort: Int) -> (state: String, queued: Int)? {
        let table = ["/proc/net/tcp", "/proc/net/tcp6"].map(Self.wholeFile).joined(separator: "\n")
        func hex(_ port: Int) -> String {
            let digits = String(port, radix: 16, uppercase: true)
            return ":" + String(repeating: "0", count: max(0, 4 - digits.count)) + digits
        }
        let (local, remote) = (hex(serverPort), hex(clientPort))
        for line in table.split(separator: "\n") {
            let f = line.split(separator: " ")
            guard f.count > 4, f[1].hasSuffix(local), f[2].hasSuffix(remote) else { continue }
            let queues = f[4].split(separator: ":")
            return (String(f[3]), Int(queues.first ?? "0", radix: 16) ?? 0)
        }
        return nil
    }

    /// A file read with `read` until it ends (a /proc file says it is empty and grows as it is read).
    static func wholeFile(_ path: String) -> String {
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { return "" }
        defer { close(fd) }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            out += chunk[0..<n]
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// 3 s of idleness: a body sent a byte at a time is cut off; a small body that takes a second is read and
    /// answered; a client that pipelines 2,000 requests for a 116 KB answer and reads nothing is answered one at a
    /// time (the node does not read ahead) and closed once nothing of the answers leaves.
    @Test func aSlowBodyOrAnUnreadAnswerEndsItsConnection() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("slow-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        var config = ApplicationTests.configuration(in: folder)
        config.connections = .init(idleSeconds: 3)
        let server = try await TestServer.start(config, adminKey: APIKeys.newKey())
        let port = server.port
        // A body of 100,000 bytes declared, a byte every 200 ms.
        let slow = try RawHTTP.connected(port)
        defer { close(slow) }
        let head = "POST /v1/apps/none/devices HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"
        #expect(RawHTTP.write(slow, Array(head.utf8)))
        #expect(
            await Self.trickle(slow, UInt8(ascii: " "), upTo: 100) < 100,
            "a body sent a byte at a time for 20 s was read on"
        )

        // A small body in three parts over a second: answered (401, no key; what matters is that it was read).
        let small = try RawHTTP.connected(port)
        defer { close(small) }
        let body = #"{"token":"ab","platform":"ios"}"#
        #expect(
            RawHTTP.write(
                small,
                Array(
                    "POST /v1/apps/none/devices HTTP/1.1\r\nHost: x\r\nContent-Length: \(body.utf8.count)\r\n\r\n".utf8
                )
            )
        )
        for piece in [body.prefix(10), body.dropFirst(10).prefix(10), body.dropFirst(20)] {
            try await Task.sleep(nanoseconds: 400_000_000)
            #expect(RawHTTP.write(small, Array(piece.utf8)))
        }
        let answered = await offThePool {
            var chunk = [UInt8](repeating: 0, count: 4096)
            let n = chunk.withUnsafeMutableBytes { recv(small, $0.baseAddress, $0.count, 0) }
            return n > 0 ? String(decoding: chunk[0..<n], as: UTF8.self) : ""
        }
        #expect(answered.hasPrefix("HTTP/1.1 401"), "\(answered.prefix(200))")

        // Pipelined and never read, with a small receive buffer.
        let reader = try RawHTTP.connected(port, receiveBuffer: 4096)
        defer { close(reader) }
        var flags = fcntl(reader, F_GETFL)
        flags |= O_NONBLOCK
        _ = fcntl(reader, F_SETFL, flags)
        let request = Array("GET /openapi.yaml HTTP/1.1\r\nHost: x\r\n\r\n".utf8)
        var pipelined: [UInt8] = []
        for _ in 0..<2_000 { pipelined += request }
        var written = 0
        while written < pipelined.count {
            let n = pipelined[written...].withUnsafeBytes {
                send(reader, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
            }
            if n <= 0 { break }
            written += n
        }
        // Ended by the node within a few idle intervals, unread: its socket gone or no longer established. (The
        // client's state alone does not say: when the kernel's TCP_USER_TIMEOUT ends the connection before the
        // node's own check, as on a loaded machine, no reset is sent and the client's socket stays ESTABLISHED.)
        let readerPort = Self.localPort(reader)
        let started = Date()
        var open = true
        var node = "01"
        while open && Date().timeIntervalSince(started) < 30 {
            try await Task.sleep(nanoseconds: 250_000_000)
            node = Self.nodeSide(serverPort: port, clientPort: readerPort)?.state ?? "gone"
            open = node == "01"
        }
        #expect(!open, "a connection whose answers nobody read was kept 30 s by the node")
        try? await server.stop()
    }

    // MARK: The disk floor

    /// A small file system of its own where the test may mount one (root, as CI runs), else the test's folder with
    /// the floor set just above what it has free (the same refusal, on a large disk).
    static func smallDisk() throws -> (folder: URL, mounted: Bool) {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("disk-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        guard geteuid() == 0 else { return (folder, false) }
        let mount = Spawn()
        mount.executableURL = URL(fileURLWithPath: "/bin/mount")
        mount.arguments = ["-t", "tmpfs", "-o", "size=48m", "tmpfs", folder.path]
        try mount.run()
        mount.waitUntilExit()
        return (folder, mount.terminationStatus == 0)
    }

    static func unmount(_ folder: URL, _ mounted: Bool) {
        if mounted {
            let p = Spawn()
            p.executableURL = URL(fileURLWithPath: "/bin/umount")
            p.arguments = ["-l", folder.path]
            try? p.run()
            p.waitUntilExit()
        }
        try? FileManager.default.removeItem(at: folder)
    }

    @Test func belowTheDiskFloorWritesAreRefusedReadsGoOnAndNothingIsCorrupted() async throws {
        let (folder, mounted) = try Self.smallDisk()
        defer { Self.unmount(folder, mounted) }
        var config = ApplicationTests.configuration(in: folder)
        config.sandboxDirectory =
            FileManager.default.temporaryDirectory
            .appendingPathComponent("disk-sandbox-\(UUID().uuidString)").path
        // On the 48 MB disk: a floor of 16 MB. Elsewhere: 16 MB less than the disk has free now, so that the
        // filler below crosses it.
        let free = try #require(DiskFloor.freeBytes(folder.path))
        let floor: Int64 = mounted ? 16 << 20 : max(1 << 20, free - (16 << 20))
        config.minFreeDiskMegabytes = Double(floor) / 1_048_576
        let admin = APIKeys.newKey()
        let server = try await TestServer.start(config, adminKey: admin)
        let port = server.port
        let base = "http://127.0.0.1:\(port)"
        func call(_ method: String, _ url: String, _ key: String, _ body: JSONValue?) async throws -> (Int, JSONValue) {
            try await ApplicationTests.call(method, url, key: key, body: body)
        }
        let (_, created) = try await call(
            "POST",
            base + "/v1/apps",
            admin,
            ["name": "Disk", "bundle_id": "com.example.d"]
        )
        let app = try #require(created["app"]?["id"]?.stringValue)
        let key = try #require(created["api_key"]?.stringValue)
        let token = String(repeating: "ab", count: 32)
        let device: JSONValue = ["token": .string(token), "platform": "ios"]
        #expect(try await call("POST", base + "/v1/apps/\(app)/devices", key, device).0 == 200)

        // Fill the disk to below the floor (what is left above the floor, and 8 MB more).
        let filler = folder.appendingPathComponent("filler")
        let room = try #require(DiskFloor.freeBytes(folder.path)) - floor
        FileManager.default.createFile(atPath: filler.path, contents: Data(count: Int(room + (8 << 20))))
        try await Task.sleep(nanoseconds: 1_100_000_000)

        let (refused, body) = try await call("POST", base + "/v1/apps/\(app)/devices", key, device)
        #expect(refused == 507, "\(body)")
        #expect(body["error"]?["code"] == "insufficient-storage")
        #expect(body["error"]?["message"]?.stringValue?.contains("disk.min_free_megabytes") == true)
        let (sendRefused, _) = try await call(
            "POST",
            base + "/v1/apps/\(app)/notifications",
            key,
            ["title": "Hi", "audience": ["all": true]]
        )
        #expect(sendRefused == 507)
        // Reads go on.
        let (read, devices) = try await call("GET", base + "/v1/apps/\(app)/devices", key, nil)
        #expect(read == 200 && devices["total"] == 1)
        let (_, metrics) = try await Self.text(base + "/metrics", admin)
        #expect(metrics.contains("richpush_writes_refused_total{reason=\"disk\"}"))
        #expect(metrics.contains("richpush_disk_free_bytes{disk=\"database\"}"))

        // Space given back: writes go on, and the database is whole.
        try FileManager.default.removeItem(at: filler)
        try await Task.sleep(nanoseconds: 1_100_000_000)
        #expect(try await call("POST", base + "/v1/apps/\(app)/devices", key, device).0 == 200)
        try await server.stop()
        let check = try DatabaseQueue(path: config.database)
        let integrity = try await check.read { db in try String.fetchAll(db, sql: "PRAGMA integrity_check") }
        #expect(integrity == ["ok"])
    }

    static func text(_ url: String, _ key: String) async throws -> (Int, String) {
        var request = URLRequest(url: URL(string: url)!)
        request.setValue("Bearer \(key)", forHTTPHeaderField: "Authorization")
        let (data, response) = try await URLSession.shared.data(for: request)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: data, as: UTF8.self))
    }
}

/// A flag set once, read from any task.
final class ManagedAtomicFlag: Sendable {
    private let flag = NIOLockedValueBox(false)
    var isSet: Bool { flag.withLockedValue { $0 } }
    func set() { flag.withLockedValue { $0 = true } }
}

/// A real server with a configuration on a free port of 127.0.0.1, its logs quiet, until ``stop()``.
struct TestServer {
    let port: Int
    let group: ServiceGroup
    let running: Task<Void, Error>
    /// What `buildApplication` built (its backend; its sandbox, when the configuration runs one).
    let application: RichPushApplication

    static func start(
        _ config: ServerConfiguration,
        adminKey: String,
        connectionLoops: (any EventLoopGroup)? = nil
    ) async throws -> TestServer {
        var logger = Logger(label: "richpush-test")
        logger.logLevel = .critical
        let (ports, sink) = AsyncStream<Int>.makeStream()
        let server = try await buildApplication(
            config,
            adminKey: adminKey,
            logger: logger,
            connectionLoops: connectionLoops
        ) { port, _, _ in
            sink.yield(port)
        }
        let group = ServiceGroup(services: [server], logger: logger)
        let running = Task { try await group.run() }
        var port = 0
        for await p in ports {
            port = p
            break
        }
        return TestServer(port: port, group: group, running: running, application: server)
    }

    /// The node's closes by rule (``ReadDemandTests/closes(_:)``).
    var closes: String { ReadDemandTests.closes(application.api.metrics) }

    /// Shuts the server down gracefully and waits for it.
    func stop() async throws {
        await group.triggerGracefulShutdown()
        try await running.value
    }
}
