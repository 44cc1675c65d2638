import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOConcurrencyHelpers
import NIOCore
import RichPushCore
import RichPushTestSupport
import Testing

@testable import RichPushServer

/// The live view's stream over a real socket: every watcher gets the numbers, an event goes out when they change,
/// one read serves all watchers of a notification, and watchers past the bounds get 429.
@Suite struct InsightStreamTests {
    /// Runs blocking work on a thread of its own; the task awaits its result.
    static func onThread<T: Sendable>(_ work: @escaping @Sendable () throws -> T) -> Task<T, Error> {
        Task {
            try await withCheckedThrowingContinuation { c in
                Thread { c.resume(with: Result { try work() }) }.start()
            }
        }
    }

    @Test func watchersShareOneReaderAndSeeChanges() async throws {
        let f = try APITests.fixture()
        var api = f.api
        let reads = NIOLockedValueBox(0)
        let numbers = f.api.numbers
        api.insight = InsightStreams(
            minimumInterval: 0.2,
            keepAlive: 0.5,
            limits: .init(node: 3, perNotification: 2)
        ) { id in
            reads.withLockedValue { $0 += 1 }
            return try await NotificationsController.insightEvent(id, numbers: numbers)
        }
        let insight = api.insight
        try await Application(router: api.router()).test(.live) { client in
            let port = try #require(client.port)
            let (app, key) = try await DeviceReceiptsTests.token(client)
            let tokens = [String(repeating: "ab", count: 32), String(repeating: "cd", count: 32)]
            let (status, accepted) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/notifications",
                key: key,
                body: ["title": "Live", "audience": ["apns_tokens": .array(tokens.map { .string($0) })]]
            )
            #expect(status == 202)
            let id = try #require(accepted["id"]?.stringValue)
            let request = Array(
                "GET /v1/apps/\(app)/notifications/\(id)/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(key)\r\n\r\n"
                    .utf8
            )
            @Sendable func events(_ bytes: [UInt8]) -> [JSONValue] {
                String(decoding: bytes, as: UTF8.self).components(separatedBy: "\n\n").compactMap { block in
                    block.split(separator: "\n").first { $0.hasPrefix("data: ") }.flatMap {
                        try? JSONValue.parse(Array($0.dropFirst(6).utf8))
                    }
                }
            }
            @Sendable func delivered(_ bytes: [UInt8]) -> Bool {
                events(bytes).contains { $0["counts"]?["delivered"] == 1 }
            }
            // Two watchers; a third on the same notification is one too many.
            // Blocking reads on threads of their own: the task pool's two threads serve the server's handlers.
            let watchers = (0..<2).map { _ in
                // A liveness bound: a turn waits 49 times what the last one cost in wall time, which a loaded machine
                // stretches (at most 15 s between turns).
                Self.onThread { try RawHTTP.read(port: port, request, timeout: 45, until: delivered) }
            }
            for _ in 0..<250 where insight.watchers < 2 { try await Task.sleep(nanoseconds: 20_000_000) }
            // The refusal is checked, not its speed: 30 s is a liveness bound (a loaded full run once saw no answer
            // within 5 s).
            let third = try await Self.onThread { try RawHTTP.read(port: port, request, timeout: 30) { $0.count > 12 } }
                .value
            #expect(String(decoding: third.prefix(12), as: UTF8.self) == "HTTP/1.1 429")
            let started = Date()
            // A delivery ends: each watcher sees it in the next event.
            let queue = f.api.backend.queue
            let claimed = try await queue.claim(owner: "t", limit: 1, now: Date(), lease: 30)
            try #require(claimed.count == 1)
            try await queue.finish(id: claimed[0].id, owner: "t", outcome: .delivered(providerID: nil), now: Date())
            for w in watchers {
                let bytes = try await w.value
                let text = String(decoding: bytes, as: UTF8.self)
                #expect(text.hasPrefix("HTTP/1.1 200"))
                #expect(text.lowercased().contains("content-type: text/event-stream"))
                let seen = events(bytes)
                #expect(seen.first?["counts"]?["queued"] == 2)
                #expect(seen.last?["counts"]?["delivered"] == 1)
                #expect(seen.last?["funnel"]?["stages"]?.arrayValue?[2]["count"] == 1)
            }
            // One read per turn for both watchers, a turn at most every 0.2 s.
            let elapsed = Date().timeIntervalSince(started)
            #expect(
                reads.withLockedValue { $0 } <= Int(elapsed / 0.2) + 12,
                "\(reads.withLockedValue { $0 }) in \(elapsed) s"
            )
            // A watcher that left is noticed at the next write: a turn's, which comes later on a loaded machine (a
            // turn waits 49 times what the last cost). Up to 30 s: a liveness bound, not a speed one.
            for _ in 0..<1500 where insight.watchers > 0 { try await Task.sleep(nanoseconds: 20_000_000) }
            #expect(insight.watchers == 0)
        }
    }

    /// The bounds in the order they are met, each naming itself; a watcher that leaves gives its place back to its
    /// app and key.
    @Test func eachBoundIsCountedAndNamed() {
        let streams = InsightStreams(limits: .init(node: 6, perApp: 3, perKey: 2, perNotification: 3)) { _ in [:] }
        // The streams are kept: a stream let go ends its watcher.
        var kept: [AsyncStream<ByteBuffer>] = []
        func watch(_ n: String, _ app: String, _ key: String) -> Result<UUID, InsightStreams.Refusal> {
            streams.watch(n, app: app, key: key).map {
                kept.append($0.1)
                return $0.0
            }
        }
        let a1 = watch("n1", "A", "a-key-1")
        #expect((try? a1.get()) != nil)
        #expect((try? watch("n1", "A", "a-key-1").get()) != nil)
        #expect(throws: InsightStreams.Refusal.key(2)) { try watch("n2", "A", "a-key-1").get() }
        #expect((try? watch("n2", "A", "a-key-2").get()) != nil)
        #expect(throws: InsightStreams.Refusal.app(3)) { try watch("n2", "A", "a-key-3").get() }
        #expect(streams.watchers(app: "A") == 3 && streams.watchers(key: "a-key-1") == 2)
        // Another app is not held back by A; then the notification's bound, and the node's last.
        #expect((try? watch("n1", "B", "b-key").get()) != nil)
        #expect(throws: InsightStreams.Refusal.notification(3)) { try watch("n1", "C", "c-key").get() }
        #expect((try? watch("n3", "C", "c-key").get()) != nil)
        #expect((try? watch("n4", "D", "d-key").get()) != nil)
        #expect(throws: InsightStreams.Refusal.node(6)) { try watch("n5", "E", "e-key").get() }
        #expect(InsightStreams.Refusal.app(100).description.contains("insight.max_views_per_app"))
        // A watcher that leaves gives its places back.
        if case .success(let id) = a1 { streams.stop("n1", id) }
        #expect(streams.watchers(app: "A") == 2 && streams.watchers(key: "a-key-1") == 1 && streams.watchers == 5)
        #expect((try? watch("n2", "A", "a-key-1").get()) != nil)
        streams.closeAll()
        #expect(streams.watchers == 0 && streams.watchers(app: "A") == 0)
        #expect(kept.count == 7)
    }

    /// Over real sockets: app A's key holds its views up to its bound, and past it is answered 429 naming the
    /// bound, while app B's console still opens a view and gets its numbers.
    @Test func oneAppAtItsBoundLeavesRoomForAnother() async throws {
        let f = try APITests.fixture()
        var api = f.api
        let numbers = f.api.numbers
        api.insight = InsightStreams(
            minimumInterval: 0.2,
            keepAlive: 0.5,
            limits: .init(node: 10, perApp: 3, perKey: 3)
        ) {
            try await NotificationsController.insightEvent($0, numbers: numbers)
        }
        let insight = api.insight
        try await Application(router: api.router()).test(.live) { client in
            let port = try #require(client.port)
            func send(_ key: String, _ app: String) async throws -> String {
                let (status, accepted) = try await APITests.call(
                    client,
                    .post,
                    "/v1/apps/\(app)/notifications",
                    key: key,
                    body: ["title": "Live", "audience": ["apns_tokens": [.string(String(repeating: "ab", count: 32))]]]
                )
                #expect(status == 202)
                return try #require(accepted["id"]?.stringValue)
            }
            @Sendable func request(_ app: String, _ id: String, _ key: String) -> [UInt8] {
                Array(
                    "GET /v1/apps/\(app)/notifications/\(id)/events?seconds=30 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(key)\r\n\r\n"
                        .utf8
                )
            }
            let (appA, keyA) = try await APITests.createApp(client)
            let (appB, keyB) = try await APITests.createApp(client)
            let idA = try await send(keyA, appA)
            let idB = try await send(keyB, appB)
            // A's key takes all three of its app's views (held open on threads of their own)...
            let done = NIOLockedValueBox(false)
            let held = (0..<3).map { _ in
                Self.onThread {
                    try RawHTTP.read(port: port, request(appA, idA, keyA), timeout: 30) { _ in
                        done.withLockedValue { $0 }
                    }
                }
            }
            for _ in 0..<500 where insight.watchers(app: appA) < 3 { try await Task.sleep(nanoseconds: 20_000_000) }
            #expect(insight.watchers(app: appA) == 3)
            // ...the fourth is refused, naming the bound...
            let fourth = try await Self.onThread {
                try RawHTTP.read(port: port, request(appA, idA, keyA), timeout: 30) {
                    String(decoding: $0, as: UTF8.self).hasSuffix("}}")
                }
            }.value
            let text = String(decoding: fourth, as: UTF8.self)
            #expect(text.hasPrefix("HTTP/1.1 429"), "\(text)")
            #expect(text.contains("rate-limited") && text.contains("insight.max_views_per_app"), "\(text)")
            // ...and B's console opens its view and gets its numbers.
            let other = try await Self.onThread {
                try RawHTTP.read(port: port, request(appB, idB, keyB), timeout: 30) {
                    String(decoding: $0, as: UTF8.self).contains("event: insight")
                }
            }.value
            let answer = String(decoding: other, as: UTF8.self)
            #expect(answer.hasPrefix("HTTP/1.1 200") && answer.contains("event: insight"), "\(answer)")
            done.withLockedValue { $0 = true }
            for h in held { _ = try? await h.value }
            insight.closeAll()
        }
    }

    /// A key revoked while its view is open ends the view: the stream closes within a few seconds, not at the end
    /// of its lifetime (found by an outsider's attack: it kept sending the funnel, opens recorded after the
    /// revocation included, for as long as `seconds` allowed).
    @Test func aRevokedKeysViewEnds() async throws {
        let f = try APITests.fixture()
        try await Application(router: f.api.router()).test(.live) { client in
            let port = try #require(client.port)
            let (app, manage) = try await APITests.createApp(client)
            let (status, made) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/keys",
                key: manage,
                body: ["scopes": ["read"]]
            )
            #expect(status == 201, "\(made)")
            let readKey = try #require(made["key"]?.stringValue ?? made["api_key"]?.stringValue)
            let keyID = try #require(made["id"]?.stringValue ?? made["key_id"]?.stringValue)
            let (_, accepted) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/notifications",
                key: manage,
                body: ["title": "Live", "audience": ["apns_tokens": [.string(String(repeating: "ab", count: 32))]]]
            )
            let id = try #require(accepted["id"]?.stringValue)
            let request = Array(
                "GET /v1/apps/\(app)/notifications/\(id)/events?seconds=60 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(readKey)\r\n\r\n"
                    .utf8
            )
            let opened = Date()
            // Read until the chunked body's last chunk (the connection itself stays open).
            let view = Self.onThread {
                try RawHTTP.read(port: port, request, timeout: 60) {
                    $0.suffix(5).elementsEqual(Array("0\r\n\r\n".utf8))
                }
            }
            for _ in 0..<500 where f.api.insight.watchers(app: app) < 1 {
                try await Task.sleep(nanoseconds: 20_000_000)
            }
            #expect(f.api.insight.watchers(app: app) == 1)
            let (revoked, _) = try await APITests.call(client, .delete, "/v1/apps/\(app)/keys/\(keyID)", key: manage)
            #expect(revoked == 200)
            let revokedAt = Date()
            _ = try await view.value
            let after = Date().timeIntervalSince(revokedAt)
            #expect(
                after < 20,
                "the view lasted \(after) s after its key was revoked (\(Date().timeIntervalSince(opened)) s in all)"
            )
            #expect(f.api.insight.watchers(app: app) == 0)
        }
    }
}
