import Foundation
import RichPushTransport

/// What a worker does after a failed attempt: exponential backoff with full jitter, never sooner than the
/// provider's Retry-After, never past the notification's time to live, and never for permanent errors.
public struct RetryPolicy: Sendable {
    public var baseDelay: TimeInterval
    public var maxDelay: TimeInterval
    /// Attempts (claims) after which a retryable failure becomes final.
    public var maxAttempts: Int

    public init(baseDelay: TimeInterval = 1, maxDelay: TimeInterval = 15 * 60, maxAttempts: Int = 8) {
        self.baseDelay = baseDelay
        self.maxDelay = maxDelay
        self.maxAttempts = maxAttempts
    }

    public enum Action: Sendable, Hashable {
        case retry(at: Date)
        case final(DeliveryOutcome)
    }

    /// The action for a delivery that failed on its `attempts`-th attempt. `random` returns a value in 0..<1.
    public func action(
        after decision: RetryDecision,
        reason: String,
        attempts: Int,
        expiresAt: Date?,
        now: Date,
        random: () -> Double
    ) -> Action {
        let delay: TimeInterval
        switch decision {
        case .dropToken: return .final(.pruned(reason))
        case .never, .fixRequest, .fixCredentials: return .final(.failed(reason))
        case .retry, .retryAfter:
            guard attempts < maxAttempts else {
                return .final(.failed("\(reason) (gave up after \(attempts) attempts)"))
            }
            let exponential = min(maxDelay, baseDelay * pow(2, Double(max(0, attempts - 1))))
            var jittered = exponential * random()
            if case .retryAfter(let seconds) = decision { jittered = max(jittered, seconds) }
            delay = jittered
        }
        let at = now.addingTimeInterval(delay)
        if let expiresAt, at > expiresAt { return .final(.expired(reason)) }
        return .retry(at: at)
    }
}
