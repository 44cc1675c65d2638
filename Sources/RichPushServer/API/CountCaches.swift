import Foundation
import NIOConcurrencyHelpers

/// Counts the device routes show, so that polling them costs the database little: an app's devices (every device
/// search shows the total) and its devices by notification permission. A notification's counts come from the
/// ``InsightCache``, with its funnel.
///
/// An app's device count is kept `devicesLifetime`, its permissions a minute; both are ``StoreCache``s: bounded,
/// least recently used out first.
public final class CountCaches: Sendable {
    private let devices: StoreCache<Int>
    private let permissions: StoreCache<[String: Int]>

    public init(devicesLifetime: TimeInterval = 10) {
        devices = StoreCache(lifetime: devicesLifetime, capacity: 10_000)
        permissions = StoreCache(lifetime: 60, capacity: 10_000)
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
