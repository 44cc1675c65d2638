import Foundation
import Hummingbird
import HummingbirdTesting
import NIOConcurrencyHelpers
import RichPushCore
import Testing

@testable import RichPushServer

/// The read routes' numbers of a notification come from one bounded cache: however many read at once, one read of
/// the database; nothing read again while fresh; a settled notification's deliveries never read again; a failed
/// read not kept; the funnel route and the live view read the same value.
@Suite struct InsightCacheTests {
    /// A cache over reads that count themselves and take `delay` seconds.
    static func cache(
        delay: Double = 0.05,
        states: @escaping @Sendable () -> [DeliveryBreakdown] = {
            [DeliveryBreakdown(state: .queued, reason: "", tried: false, count: 5)]
        },
        minimumInterval: TimeInterval = 1,
        capacity: Int = 10_000,
        failing: NIOLockedValueBox<Bool> = NIOLockedValueBox(false)
    ) -> InsightCache {
        // Lifetimes by the minimum only (the cost of a read here is the machine's, which a loaded run stretches).
        InsightCache(
            minimumInterval: minimumInterval,
            costFactor: 0,
            capacity: capacity,
            deliveries: { _ in
                try await Task.sleep(nanoseconds: UInt64(delay * 1e9))
                if failing.withLockedValue({ $0 }) { throw CancellationError() }
                return states()
            },
            reports: { _ in
                try await Task.sleep(nanoseconds: UInt64(delay * 1e9))
                return (ReceiptSummary(), OpenSummary(opened: 1), [])
            }
        )
    }

    @Test func concurrentReadersShareOneRead() async throws {
        // Fresh for an hour: a reader that a loaded machine starts after the read ended finds its value, as one
        // that came during the read joins it (with a second's freshness, one started 1 s late read again).
        let c = Self.cache(minimumInterval: 3600)
        let all = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<200 { group.addTask { try await c.numbers("n").funnel.stages[0].count } }
            var out: [Int] = []
            for try await n in group { out.append(n) }
            return out
        }
        #expect(all.count == 200 && all.allSatisfy { $0 == 5 })
        #expect(c.readsMade.deliveries == 1 && c.readsMade.reports == 1, "\(c.readsMade)")
        // Fresh: the counts of the outcome and the list read the same.
        #expect(try await c.counts("n") == [.queued: 5])
        _ = try await c.numbers("n")
        #expect(c.readsMade.deliveries == 1 && c.readsMade.reports == 1)
    }

    @Test func aStaleValueIsReadAgainOnceAndAFailureIsNotKept() async throws {
        let failing = NIOLockedValueBox(false)
        let c = Self.cache(delay: 0.001, minimumInterval: 0.05, failing: failing)
        _ = try await c.numbers("n")
        try await Task.sleep(nanoseconds: 100_000_000)
        async let a = c.numbers("n")
        async let b = c.numbers("n")
        _ = try await (a, b)
        #expect(c.readsMade.deliveries == 2 && c.readsMade.reports == 2, "\(c.readsMade)")
        try await Task.sleep(nanoseconds: 100_000_000)
        failing.withLockedValue { $0 = true }
        await #expect(throws: CancellationError.self) { try await c.breakdown("n") }
        failing.withLockedValue { $0 = false }
        #expect(try await c.counts("n") == [.queued: 5])
        #expect(c.readsMade.deliveries == 4)
    }

    /// A read that cost more waits longer before the next (49 times its cost), never longer than 15 s.
    @Test func anExpensiveReadStaysFreshLonger() {
        let c = InsightCache(deliveries: { _ in [] }, reports: { _ in (ReceiptSummary(), OpenSummary(), []) })
        #expect(c.lifetime(cost: 0.001) == 1)
        #expect(abs(c.lifetime(cost: 0.15) - 7.35) < 0.001)
        #expect(c.lifetime(cost: 10) == 15)
    }

    @Test func aSettledNotificationsDeliveriesAreKeptAndTheTableIsBounded() async throws {
        let c = Self.cache(
            delay: 0.001,
            states: { [DeliveryBreakdown(state: .delivered, reason: "", tried: true, count: 3)] },
            minimumInterval: 0.01,
            capacity: 4
        )
        for i in 0..<10 { _ = try await c.numbers("n\(i)") }
        #expect(c.readsMade.deliveries == 10)
        #expect(c.settledCount == 4)
        try await Task.sleep(nanoseconds: 50_000_000)
        // The four most recent are kept for good: their deliveries are not read again, their reports are.
        for i in 6..<10 { #expect(try await c.numbers("n\(i)").byState == [.delivered: 3]) }
        #expect(c.readsMade.deliveries == 10 && c.readsMade.reports == 14, "\(c.readsMade)")
    }

    /// Between two chunks of a fan-out, every delivery made so far may be delivered: such a read is not kept for
    /// good (the next chunk's deliveries would never be counted), and says it was fanning out. Its fan-out's state
    /// is read before its deliveries, so "done" never stands beside deliveries a last chunk had not yet added.
    @Test func aNotificationStillFanningOutIsNeverSettled() async throws {
        let pending = NIOLockedValueBox(true)
        let order = NIOLockedValueBox<[String]>([])
        let c = InsightCache(
            minimumInterval: 0.01,
            costFactor: 0,
            deliveries: { _ in
                order.withLockedValue { $0.append("deliveries") }
                return [DeliveryBreakdown(state: .delivered, reason: "", tried: true, count: 2)]
            },
            fanningOut: { _ in
                order.withLockedValue { $0.append("fan-out") }
                return pending.withLockedValue { $0 }
            },
            reports: { _ in (ReceiptSummary(), OpenSummary(), []) }
        )
        let first = try await c.tally("n")
        #expect(first.fanningOut && first.byState == [.delivered: 2] && c.settledCount == 0)
        #expect(order.withLockedValue { $0 } == ["fan-out", "deliveries"])
        pending.withLockedValue { $0 = false }
        try await Task.sleep(nanoseconds: 50_000_000)
        let done = try await c.tally("n")
        #expect(!done.fanningOut && c.settledCount == 1)
        // Settled: neither part is read again.
        try await Task.sleep(nanoseconds: 50_000_000)
        _ = try await c.counts("n")
        #expect(c.readsMade.deliveries == 2 && order.withLockedValue { $0.count } == 4)
    }

    /// Through the routes, on the server's own cache: a burst of funnel requests and the live view's turns read the
    /// notification's numbers once.
    @Test func theFunnelRouteReadsTheCachedValue() async throws {
        let f = try APITests.fixture()
        let api = f.api
        try await Application(router: api.router()).test(.router) { client in
            let (app, key) = try await DeviceReceiptsTests.token(client)
            let (_, accepted) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/notifications",
                key: key,
                body: ["title": "Hi", "audience": ["apns_tokens": [.string(String(repeating: "ab", count: 32))]]]
            )
            let id = try #require(accepted["id"]?.stringValue)
            let before = api.numbers.readsMade
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<50 {
                    group.addTask {
                        try await APITests.call(client, .get, "/v1/apps/\(app)/notifications/\(id)/funnel", key: key).0
                    }
                }
                var out: [Int] = []
                for try await s in group { out.append(s) }
                return out
            }
            #expect(statuses.count == 50 && statuses.allSatisfy { $0 == 200 })
            _ = try await NotificationsController.insightEvent(id, numbers: api.numbers)
            let after = api.numbers.readsMade
            // One read (two at most: the first request's and one begun after a second passed on a slow machine).
            #expect(after.reports - before.reports <= 2, "\(before) \(after)")
            #expect(after.deliveries - before.deliveries <= 2, "\(before) \(after)")
        }
    }
}
