import Foundation
import Hummingbird
import HummingbirdTesting
import NIOConcurrencyHelpers
import RichPushCore
import RichPushServer
import RichPushTestSupport
import Testing

/// The media fast path on a real listener, where it sits in front of the HTTP/1 codec: media pipelined behind
/// routed requests, and media another node stored (fetched to this node's disk first), are answered from the file
/// by the fast path, in order, never by the router.
@Suite struct MediaFastPathTests {
    /// Shared media whose fetches take a while and are counted.
    final class SlowShared: SharedMediaFiles {
        let files = NIOLockedValueBox<[String: [UInt8]]>([:])
        let fetches = NIOLockedValueBox(0)
        let delay: UInt64

        init(delay: UInt64) { self.delay = delay }

        func put(name: String, file: URL, keepUntil: Date) async throws {
            let bytes = try [UInt8](Data(contentsOf: file))
            files.withLockedValue { $0[name] = bytes }
        }

        func fetch(name: String, to destination: URL) async throws -> Date? {
            fetches.withLockedValue { $0 += 1 }
            try await Task.sleep(nanoseconds: delay)
            guard let bytes = files.withLockedValue({ $0[name] }) else { return nil }
            try Data(bytes).write(to: destination)
            return Date().addingTimeInterval(3600)
        }

        func keep(name: String, until: Date) async throws -> Bool { files.withLockedValue { $0[name] != nil } }
        func sweep(before cutoff: Date) async throws -> (files: Int, bytes: Int) { (0, 0) }
    }

    @Test func pipelinedAndSharedMediaIsAnsweredInOrderByTheFastPath() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("fast-path-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let shared = SlowShared(delay: 300_000_000)
        // Another node stored the picture: this node's disk does not have it yet.
        let other = try MediaStore(directory: dir.appendingPathComponent("other"), shared: shared)
        let bytes = MediaSamples.file(MediaSamples.png, size: 200_000)
        let item = try other.put(bytes, type: .png)
        try await other.publish(item)
        let store = try MediaStore(directory: dir.appendingPathComponent("here"), shared: shared)
        #expect(store.file(item.name) == nil)
        let jpeg = MediaSamples.jpeg(marker: 0xE0)
        let local = try store.put(jpeg, type: .jpeg)

        let router = Router()
        router.get("/slow") { _, _ -> String in
            try await Task.sleep(nanoseconds: 200_000_000)
            return "slow"
        }
        router.post("/echo") { request, _ -> String in
            String(buffer: try await request.body.collect(upTo: 1024))
        }
        let status = MediaFastPath.Status()
        let app = Application(
            router: router,
            server: .http1(
                configuration: .init(additionalChannelHandlers: [MediaFastPath(store: store, status: status)])
            )
        )
        try await app.test(.live) { client in
            let port = try #require(client.port)
            let requests = [
                "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n",
                "GET /media/\(item.name) HTTP/1.1\r\nHost: x\r\n\r\n",  // behind a routed answer, and fetched
                "GET /media/\(local.name) HTTP/1.1\r\nHost: x\r\n\r\n",  // behind the fetch
                "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
                "HEAD /media/\(item.name) HTTP/1.1\r\nHost: x\r\n\r\n",  // on disk now
                "GET /media/\(item.name) HTTP/1.1\r\nHost: x\r\nRange: bytes=10-19\r\n\r\n",
                "GET /media/\(String(repeating: "0", count: 64)).png HTTP/1.1\r\nHost: x\r\n\r\n",  // nowhere
                "GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            ]
            let raw = try await RawHTTP.exchanged(port: port, Array(requests.joined().utf8))
            let answers = RawHTTP.split(raw, heads: [false, false, false, false, true, false, false, false])
            #expect(answers.map(\.status) == [200, 200, 200, 200, 200, 206, 404, 200], "\(answers.map(\.status))")
            guard answers.count == 8 else { return }
            #expect(String(decoding: answers[0].body, as: UTF8.self) == "slow")
            #expect(answers[1].body == bytes && answers[1].headers["content-type"] == "image/png")
            #expect(answers[2].body == jpeg)
            #expect(String(decoding: answers[3].body, as: UTF8.self) == "hello")
            #expect(answers[4].body.isEmpty && answers[4].headers["content-length"] == String(bytes.count))
            #expect(answers[5].body == Array(bytes[10...19]))
            // Only the router's answers carry a date.
            #expect(answers.map { $0.headers["date"] != nil } == [true, false, false, true, false, false, false, true])
        }
        #expect(shared.fetches.withLockedValue { $0 } == 2, "the stored file once, the missing one once")
        #expect(store.file(item.name)?.size == bytes.count)
        #expect(status.installed >= 1 && status.missed == 0)
    }

    /// Anyone may ask for any name: requests for one name share a fetch, a name shared media lacks is asked for once
    /// in a while, and names fetched at once are capped.
    @Test func fetchesFromSharedMediaAreSharedRememberedAndCapped() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("fetch-cap-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let shared = SlowShared(delay: 200_000_000)
        let other = try MediaStore(directory: dir.appendingPathComponent("other"), shared: shared)
        let item = try other.put(MediaSamples.file(MediaSamples.png, size: 5000), type: .png)
        try await other.publish(item)
        let store = try MediaStore(directory: dir.appendingPathComponent("here"), shared: shared)
        let found = await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<20 { group.addTask { await store.materialize(item.name) } }
            return await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
        #expect(found == 20 && shared.fetches.withLockedValue { $0 } == 1)
        let absent = String(repeating: "1", count: 64) + ".png"
        for _ in 0..<5 { #expect(!(await store.materialize(absent))) }
        #expect(shared.fetches.withLockedValue { $0 } == 2)
        let names = (0..<40).map { String(format: "%064x", $0 + 100) + ".png" }
        let none = await withTaskGroup(of: Bool.self) { group in
            for n in names { group.addTask { await store.materialize(n) } }
            return await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
        let asked = shared.fetches.withLockedValue { $0 } - 2
        #expect(none == 0 && asked >= 1 && asked <= store.maxFetches, "\(asked) fetches for 40 names at once")

        // One client's made-up names: a lookup each up to its burst of misses, then refused without one (not
        // "absent"); another client still gets its lookups, a name already here is answered whoever asks, and
        // names that exist never count against the client.
        let fast = SlowShared(delay: 0)
        let node = try MediaStore(directory: dir.appendingPathComponent("node"), shared: fast)
        let burst = Int(MediaStore.sharedMissesPerClient.burst)
        var answers: [MediaStore.Lookup] = []
        let started = Date()
        for i in 0..<(burst + 50) {
            answers.append(await node.lookUp(String(format: "%064x", i + 1000) + ".png", client: "10.0.0.1"))
        }
        // The bucket refills while the loop runs: what it may have let through is counted from the time taken.
        let refill = Int((Date().timeIntervalSince(started) * MediaStore.sharedMissesPerClient.rate).rounded(.up))
        let looked = answers.filter { $0 == .absent }.count
        #expect(answers.prefix(burst).allSatisfy { $0 == .absent })
        #expect(looked >= burst && looked <= burst + refill, "\(looked) lookups, refill \(refill)")
        #expect(answers.allSatisfy { if case .limited(let s) = $0 { s >= 1 } else { $0 == .absent } })
        #expect(fast.fetches.withLockedValue { $0 } == looked)
        #expect(await node.lookUp(String(format: "%064x", 5) + ".png", client: "10.0.0.2") == .absent)
        let publisher = try MediaStore(directory: dir.appendingPathComponent("publisher"), shared: fast)
        let copy = try publisher.put(MediaSamples.file(MediaSamples.png, size: 6000), type: .png)
        try await publisher.publish(copy)
        #expect(await node.lookUp(copy.name, client: "10.0.0.3") == .here)
        #expect(await node.lookUp(copy.name, client: "10.0.0.1") == .here)
        var existing = 0
        for i in 0..<(burst * 2) {
            let more = try publisher.put(MediaSamples.file(MediaSamples.png, size: 7000 + i), type: .png)
            try await publisher.publish(more)
            if await node.lookUp(more.name, client: "10.0.0.3") == .here { existing += 1 }
        }
        #expect(existing == burst * 2, "a client asking for names that exist is never held back")

        // Every lookup slot taken: a new name is answered busy, not absent.
        let slow = SlowShared(delay: 1_000_000_000)
        let busyNode = try MediaStore(directory: dir.appendingPathComponent("busy"), shared: slow)
        let lookups = (0..<busyNode.maxFetches).map { i in
            Task { await busyNode.lookUp(String(format: "%064x", i + 5000) + ".png", client: "10.0.0.\(i % 4)") }
        }
        while slow.fetches.withLockedValue({ $0 }) < busyNode.maxFetches {
            try await Task.sleep(nanoseconds: 5_000_000)
        }
        #expect(await busyNode.lookUp(String(format: "%064x", 9999) + ".png", client: "10.0.0.9") == .busy)
        for l in lookups { _ = await l.value }
    }
}
