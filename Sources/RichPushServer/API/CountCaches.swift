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
    /// A dry run's reach by provider, per app and audience.
    private let reach: StoreCache<[DeliveryProvider: Int]>
    /// An app's reach counts take turns: one at a time per app on this node.
    let reachTurns = AppTurns(maxWaiting: 16)

    public init(devicesLifetime: TimeInterval = 10) {
        devices = StoreCache(lifetime: devicesLifetime, capacity: 10_000)
        permissions = StoreCache(lifetime: 60, capacity: 10_000)
        reach = StoreCache(lifetime: devicesLifetime, capacity: 10_000)
    }

    /// How many devices an audience reaches per provider, for a dry run: counted at most once per app and audience
    /// every ten seconds on this node, and an app's counts one at a time (a count of every device of a large app
    /// takes a second or more: thirty-two dry runs at once with a read key held every connection of the database
    /// and stalled another app's registrations for 46 s). Past ``AppTurns/maxWaiting`` counts waiting for one app,
    /// 429 with Retry-After.
    func reach(
        _ appID: String,
        _ audience: Audience,
        count: () async throws -> [DeliveryProvider: Int]
    ) async throws -> [DeliveryProvider: Int] {
        let key = appID + "\u{0}" + String(reflecting: audience)
        if let hit = reach.fresh(key) { return hit }
        guard await reachTurns.enter(appID) else {
            throw APIError(
                .rateLimited,
                "this app's dry runs are counted one at a time, and many are waiting: try again",
                retryAfter: 1
            )
        }
        defer { reachTurns.leave(appID) }
        return try await reach.value(key) { try await count() } ?? [:]
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

/// Turns per app: one holder at a time, the others waiting in order; past `maxWaiting` waiting for one app, entering
/// is refused at once (the caller answers 429). A waiter is resumed by the holder's leaving, so a turn is never
/// skipped; cancellation does not shorten a wait (each is one bounded count long).
final class AppTurns: Sendable {
    let maxWaiting: Int
    private let state = NIOLockedValueBox<[String: [CheckedContinuation<Void, Never>]]>([:])

    init(maxWaiting: Int) { self.maxWaiting = maxWaiting }

    /// Takes the app's turn, waiting for it; false when too many wait already.
    func enter(_ app: String) async -> Bool {
        enum Decision { case mine, wait, refused }
        let first = state.withLockedValue { s -> Decision in
            guard let waiting = s[app] else {
                s[app] = []
                return .mine
            }
            return waiting.count >= maxWaiting ? .refused : .wait
        }
        switch first {
        case .mine: return true
        case .refused: return false
        case .wait:
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                let now = state.withLockedValue { s -> Bool in
                    // The holder may have left between the check above and here.
                    guard s[app] != nil else {
                        s[app] = []
                        return true
                    }
                    s[app]!.append(c)
                    return false
                }
                if now { c.resume() }
            }
            return true
        }
    }

    /// How many wait for the app's turn now.
    func waiting(_ app: String) -> Int { state.withLockedValue { $0[app]?.count ?? 0 } }

    /// Gives the app's turn to the next waiter, or frees it.
    func leave(_ app: String) {
        let next = state.withLockedValue { s -> CheckedContinuation<Void, Never>? in
            guard var waiting = s[app], !waiting.isEmpty else {
                s[app] = nil
                return nil
            }
            let c = waiting.removeFirst()
            s[app] = waiting
            return c
        }
        next?.resume()
    }
}
