import Foundation
import NIOConcurrencyHelpers

/// A token bucket per key (an authenticated API key, or a client address): `rate` requests a second on average,
/// bursts up to `burst`.
///
/// On a cluster the rate is the cluster's: each of N live nodes allows `rate / N` (``share(among:)``), so with a
/// load balancer spreading requests the whole cluster holds a key to `rate`. Should all of a key's requests reach
/// one node, that key gets `rate / N` (stricter, never looser).
///
/// Only keys a caller has proven (or addresses, for failed authentication) get a bucket, and when the table grows
/// past `sweepAbove` it forgets only the buckets that have refilled: a full bucket says nothing a new one would
/// not. A throttled key is never forgotten, so no amount of other traffic resets it.
public final class RateLimiter: Sendable {
    public let rate: Double
    public let burst: Double
    let sweepAbove: Int
    private struct State {
        var buckets: [String: (tokens: Double, at: Date)] = [:]
        var nextSweep: Int
        /// This node's part of the rate: 1 / the live nodes.
        var share = 1.0
    }
    private let state: NIOLockedValueBox<State>
    let now: @Sendable () -> Date

    public init(
        rate: Double = 200,
        burst: Double = 400,
        sweepAbove: Int = 100_000,
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        // Held to sane values: both divide and convert below.
        self.rate = rate.isFinite ? min(max(rate, 0.001), 1e9) : 200
        self.burst = burst.isFinite ? min(max(burst, 1), 1e9) : 400
        self.sweepAbove = max(1, sweepAbove)
        state = NIOLockedValueBox(State(nextSweep: max(1, sweepAbove)))
        self.now = now
    }

    /// nil when the request may go ahead; otherwise the seconds to wait.
    public func check(_ key: String) -> TimeInterval? { check(key, cost: 1) }

    /// The most one request may spend at once on this node (its share of the burst).
    public var largestCost: Double { state.withLockedValue { max(1, burst * $0.share) } }

    /// As ``check(_:)`` for a request that counts as `cost` requests (at least 1; more than ``largestCost`` never
    /// goes ahead: the wait answered is then the time to refill a whole burst).
    public func check(_ key: String, cost: Double) -> TimeInterval? {
        let t = now()
        return state.withLockedValue { s in
            let (rate, burst) = (self.rate * s.share, max(1, self.burst * s.share))
            let cost = cost.isFinite ? max(1, cost) : burst + 1
            var bucket = s.buckets[key] ?? (burst, t)
            bucket.tokens = min(burst, bucket.tokens + max(0, t.timeIntervalSince(bucket.at)) * rate)
            bucket.at = t
            let wait: TimeInterval?
            if bucket.tokens >= cost {
                bucket.tokens -= cost
                wait = nil
            } else {
                wait = (min(cost, burst) - bucket.tokens) / rate
            }
            s.buckets[key] = bucket
            if s.buckets.count > s.nextSweep { sweep(&s, at: t) }
            return wait
        }
    }

    /// The seconds to wait when `key`'s bucket is empty now, without taking from it or making one (nil: it has
    /// room, or no bucket yet).
    public func peek(_ key: String) -> TimeInterval? {
        let t = now()
        return state.withLockedValue { s in
            guard let bucket = s.buckets[key] else { return nil }
            let rate = self.rate * s.share
            let tokens = min(
                max(1, self.burst * s.share),
                bucket.tokens + max(0, t.timeIntervalSince(bucket.at)) * rate
            )
            return tokens >= 1 ? nil : (1 - tokens) / rate
        }
    }

    /// Gives back one request taken by ``check(_:)`` (the request turned out not to count); the bucket never holds
    /// more than its burst.
    public func refund(_ key: String) {
        state.withLockedValue { s in
            guard var bucket = s.buckets[key] else { return }
            bucket.tokens = min(max(1, burst * s.share), bucket.tokens + 1)
            s.buckets[key] = bucket
        }
    }

    /// Shares the rate among `nodes` live nodes (1: this node alone).
    public func share(among nodes: Int) {
        state.withLockedValue { $0.share = 1 / Double(min(max(nodes, 1), 10_000)) }
    }

    /// The rate this node allows a key now.
    public var nodeRate: Double { rate * state.withLockedValue { $0.share } }

    /// How many keys have a bucket (for tests and metrics).
    public var trackedKeys: Int { state.withLockedValue { $0.buckets.count } }

    private func sweep(_ s: inout State, at t: Date) {
        let (rate, burst) = (self.rate * s.share, max(1, self.burst * s.share))
        s.buckets = s.buckets.filter { $0.value.tokens + max(0, t.timeIntervalSince($0.value.at)) * rate < burst }
        // If most buckets are still draining, wait for the table to double before looking again.
        s.nextSweep = max(sweepAbove, s.buckets.count * 2)
    }

    /// Whole seconds for a `Retry-After` header.
    static func retryAfter(_ wait: TimeInterval) -> Int {
        // Held to 1...86,400 before the conversion: a wait below Int.min (or NaN) would trap in Int(_:).
        wait.isNaN ? 86_400 : Int(min(max(wait, 1), 86_400).rounded(.up))
    }
}
