import Foundation
import NIOConcurrencyHelpers

/// Counts the read routes show, so that polling them costs the database little: a notification's deliveries by
/// state (the console asks every second while a send runs; a million-device send is a million index entries to
/// count), and an app's devices (every device search shows the total).
///
/// A notification whose deliveries have all ended never changes again: its counts are kept (a bounded LRU). One
/// still delivering is counted again at most once every `runningLifetime` on this node, however many ask. An
/// app's device count is kept `devicesLifetime`. Both are ``StoreCache``s: bounded, least recently used out first.
public final class CountCaches: Sendable {
    private let settled = NIOLockedValueBox(LRU<[DeliveryState: Int]>(capacity: 10_000))
    private let running: StoreCache<[DeliveryState: Int]>
    private let devices: StoreCache<Int>
    private let permissions: StoreCache<[String: Int]>

    public init(runningLifetime: TimeInterval = 1, devicesLifetime: TimeInterval = 10) {
        running = StoreCache(lifetime: runningLifetime, capacity: 10_000)
        devices = StoreCache(lifetime: devicesLifetime, capacity: 10_000)
        permissions = StoreCache(lifetime: 60, capacity: 10_000)
    }

    /// A notification's deliveries by state.
    func deliveries(
        _ notificationID: String,
        count: () async throws -> [DeliveryState: Int]
    ) async throws -> [DeliveryState: Int] {
        if let done = settled.withLockedValue({ $0.get(notificationID) }) { return done }
        let counts = try await running.value(notificationID) {
            let fresh = try await count()
            // None queued or leased and at least one delivery: no delivery of it will ever change state again (a
            // fan-out still adding deliveries has queued ones; one not yet fanned out has none, and is not kept).
            if fresh[.queued, default: 0] == 0, fresh[.leased, default: 0] == 0, !fresh.isEmpty {
                settled.withLockedValue { $0.set(notificationID, fresh) }
            }
            return fresh
        }
        return counts ?? [:]
    }

    /// An app's devices.
    func devices(_ appID: String, count: () async throws -> Int) async throws -> Int {
        try await devices.value(appID) { try await count() } ?? 0
    }

    /// An app's devices by notification permission, kept a minute on this node (every device of the app is read to
    /// count them).
    func permissions(_ appID: String, count: () async throws -> [String: Int]) async throws -> [String: Int] {
        try await permissions.value(appID) { try await count() } ?? [:]
    }
}
