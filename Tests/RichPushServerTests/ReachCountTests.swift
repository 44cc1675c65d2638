import Foundation
import NIOConcurrencyHelpers
import Testing

@testable import RichPushServer

/// A dry run's reach is counted once per app and audience every few seconds, an app's counts one at a time, and too
/// many waiting for one app are refused: dry runs with a read key cannot hold the database for every app.
@Suite struct ReachCountTests {
    @Test func oneAppsDryRunsCountOnceTakeTurnsAndLeaveOtherAppsAlone() async throws {
        // Counts kept an hour: what is tested is once per lifetime, and on a loaded machine this test outlasted the
        // product's 10 s (counted twice).
        let caches = CountCaches(devicesLifetime: 3600)
        let counted = NIOLockedValueBox(0)
        let otherDone = NIOLockedValueBox(false)
        let sawOtherDone = NIOLockedValueBox(false)
        // The first app's count holds its turn until the other app's dry run has been answered (10 s at most): were
        // the other app waiting behind it, the count would see it not done.
        let slowCount: @Sendable () async throws -> [DeliveryProvider: Int] = {
            counted.withLockedValue { $0 += 1 }
            for _ in 0..<1000 where !otherDone.withLockedValue({ $0 }) { try await Task.sleep(for: .milliseconds(10)) }
            sawOtherDone.withLockedValue { $0 = otherDone.withLockedValue { $0 } }
            return [.apns: 1_000_000]
        }
        async let other: Void = {
            while counted.withLockedValue({ $0 }) == 0 { try await Task.sleep(for: .milliseconds(5)) }
            let quick: [DeliveryProvider: Int] = [.apns: 1]
            _ = try await caches.reach("app-b", .all) { quick }
            otherDone.withLockedValue { $0 = true }
        }()
        // Each outcome: "answered", "refused", or what went wrong.
        let results = await withTaskGroup(of: String.self) { group in
            for _ in 0..<40 {
                group.addTask {
                    do {
                        let n = try await caches.reach("app-a", .all, count: slowCount)
                        return n[.apns] == 1_000_000 ? "answered" : "wrong count"
                    } catch let e as APIError {
                        return e.code == .rateLimited ? "refused" : "\(e)"
                    } catch {
                        return "\(error)"
                    }
                }
            }
            return await group.reduce(into: [String]()) { $0.append($1) }
        }
        let answered = results.filter { $0 == "answered" }.count
        let refused = results.filter { $0 == "refused" }.count
        #expect(counted.withLockedValue { $0 } == 1, "the same app and audience counted once")
        #expect(answered + refused == 40 && answered >= 1, "\(answered) answered, \(refused) refused")
        try await other
        #expect(sawOtherDone.withLockedValue { $0 }, "another app's dry run waited for the first app's count")
        // Another audience of the same app takes its turn after; a cached one answers at once.
        let three: [DeliveryProvider: Int] = [.apns: 3]
        _ = try await caches.reach("app-a", .tag("vip")) { three }
        _ = try await caches.reach("app-a", .all, count: slowCount)
        #expect(counted.withLockedValue { $0 } == 1)
    }

    /// One holder at a time per app, the waiting ones served in order, and past the bound the next is refused at once.
    @Test func turnsAreTakenInOrderAndBounded() async throws {
        let turns = AppTurns(maxWaiting: 3)
        #expect(await turns.enter("a"))
        let order = NIOLockedValueBox<[Int]>([])
        var waiters: [Task<Bool, Never>] = []
        for i in 0..<3 {
            waiters.append(
                Task {
                    let got = await turns.enter("a")
                    order.withLockedValue { $0.append(i) }
                    turns.leave("a")
                    return got
                }
            )
            while turns.waiting("a") < i + 1 { try await Task.sleep(for: .milliseconds(2)) }
        }
        #expect(await !turns.enter("a"), "a fourth waiter is refused")
        #expect(await turns.enter("b"), "another app has its own turn")
        turns.leave("b")
        turns.leave("a")
        for w in waiters { #expect(await w.value) }
        #expect(order.withLockedValue { $0 } == [0, 1, 2])
        #expect(turns.waiting("a") == 0)
        #expect(await turns.enter("a"))
        turns.leave("a")
    }
}
