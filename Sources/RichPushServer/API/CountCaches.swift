import Foundation
import NIOConcurrencyHelpers

/// Counts the read routes show, so that polling them costs the database little: a notification's deliveries by
/// state (the console asks every second while a send runs; a million-device send is a million index entries to
/// count), and an app's devices (every device search shows the total).
///
/// A notification whose deliveries have all ended never changes again: its counts are kept (a bounded LRU). One
/// still delivering is counted again at most once every `runningLifetime` on this node, however many ask. An
/// app's device count is kept `devicesLifetime`. Every map is a bounded LRU.
public final class CountCaches: Sendable {
    let runningLifetime: TimeInterval
    let devicesLifetime: TimeInterval
    private let settled = NIOLockedValueBox(LRU<[DeliveryState: Int]>(capacity: 10_000))
    private let running = NIOLockedValueBox(LRU<(counts: [DeliveryState: Int], at: Date)>(capacity: 10_000))
    private let devices = NIOLockedValueBox(LRU<(count: Int, at: Date)>(capacity: 10_000))

    public init(runningLifetime: TimeInterval = 1, devicesLifetime: TimeInterval = 10) {
        self.runningLifetime = runningLifetime
        self.devicesLifetime = devicesLifetime
    }

    /// A notification's deliveries by state.
    func deliveries(
        _ notificationID: String,
        count: () async throws -> [DeliveryState: Int]
    ) async throws -> [DeliveryState: Int] {
        if let done = settled.withLockedValue({ $0.get(notificationID) }) { return done }
        if let (counts, at) = running.withLockedValue({ $0.get(notificationID) }),
            Date().timeIntervalSince(at) < runningLifetime
        {
            return counts
        }
        let fresh = try await count()
        // None queued or leased and at least one delivery: no delivery of it will ever change state again (a
        // fan-out still adding deliveries has queued ones; one not yet fanned out has none, and is not kept).
        if fresh[.queued, default: 0] == 0, fresh[.leased, default: 0] == 0, !fresh.isEmpty {
            settled.withLockedValue { $0.set(notificationID, fresh) }
            running.withLockedValue { $0.remove(notificationID) }
        } else {
            running.withLockedValue { $0.set(notificationID, (fresh, Date())) }
        }
        return fresh
    }

    /// An app's devices.
    func devices(_ appID: String, count: () async throws -> Int) async throws -> Int {
        if let (n, at) = devices.withLockedValue({ $0.get(appID) }), Date().timeIntervalSince(at) < devicesLifetime {
            return n
        }
        let fresh = try await count()
        devices.withLockedValue { $0.set(appID, (fresh, Date())) }
        return fresh
    }
}
