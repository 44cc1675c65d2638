import Foundation
import NIOConcurrencyHelpers

/// A token bucket per API key: `rate` requests a second on average, bursts up to `burst`.
public final class RateLimiter: Sendable {
    public let rate: Double
    public let burst: Double
    private let buckets = NIOLockedValueBox<[String: (tokens: Double, at: Date)]>([:])
    let now: @Sendable () -> Date

    public init(rate: Double = 200, burst: Double = 400, now: @escaping @Sendable () -> Date = { Date() }) {
        self.rate = rate
        self.burst = burst
        self.now = now
    }

    /// nil when the request may go ahead; otherwise the seconds to wait.
    public func check(_ key: String) -> TimeInterval? {
        let t = now()
        return buckets.withLockedValue { b in
            var bucket = b[key] ?? (burst, t)
            bucket.tokens = min(burst, bucket.tokens + t.timeIntervalSince(bucket.at) * rate)
            bucket.at = t
            defer {
                if b.count > 100_000 { b.removeAll() }  // forget idle keys rather than grow without bound
                b[key] = bucket
            }
            if bucket.tokens >= 1 {
                bucket.tokens -= 1
                return nil
            }
            return (1 - bucket.tokens) / rate
        }
    }
}
