import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOConcurrencyHelpers
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
        let receipts = f.api.backend.receipts
        api.insight = InsightStreams(minimumInterval: 0.2, keepAlive: 0.5, maxWatchers: 3, maxPerNotification: 2) {
            id in
            reads.withLockedValue { $0 += 1 }
            return try await NotificationsController.insightEvent(id, receipts: receipts)
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
            let third = try await Self.onThread { try RawHTTP.read(port: port, request, timeout: 5) { $0.count > 12 } }
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
}
