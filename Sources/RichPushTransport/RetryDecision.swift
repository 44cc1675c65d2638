import Foundation

/// What to do about a failed send, shared by APNs and FCM so that a queue needs one policy.
public enum RetryDecision: Sendable, Hashable {
    /// Transient: try again with backoff.
    case retry
    /// Try again, not before this many seconds.
    case retryAfter(TimeInterval)
    /// Permanent for this notification: record the failure.
    case never
    /// The device token is gone: stop sending to it (and prune it).
    case dropToken
    /// The credentials are wrong: nothing for this app will work until they are fixed.
    case fixCredentials
    /// The payload or headers are wrong: this notification will never be accepted as it is.
    case fixRequest

    /// A stable label for metrics and stored outcomes.
    public var label: String {
        switch self {
        case .retry: return "retry"
        case .retryAfter: return "retry_after"
        case .never: return "never"
        case .dropToken: return "drop_token"
        case .fixCredentials: return "fix_credentials"
        case .fixRequest: return "fix_request"
        }
    }

    public var isRetryable: Bool {
        switch self {
        case .retry, .retryAfter: return true
        default: return false
        }
    }
}

/// The longest wait a `Retry-After` is believed for: a provider's answer is input, and the wait feeds date
/// arithmetic and conversions to whole nanoseconds downstream.
public let maxRetryAfter: TimeInterval = 86_400

/// Parses a `Retry-After` value: seconds, or an HTTP date; held to `0...maxRetryAfter`, nil when unreadable.
public func parseRetryAfter(_ value: String?, now: Date = Date()) -> TimeInterval? {
    guard let value = value?.trimmingCharacters(in: .whitespaces), !value.isEmpty, value.utf8.count <= 64 else {
        return nil
    }
    if let seconds = Double(value) {
        guard seconds.isFinite, seconds >= 0 else { return nil }
        return min(seconds, maxRetryAfter)
    }
    let f = DateFormatter()
    f.locale = Locale(identifier: "en_US_POSIX")
    f.timeZone = TimeZone(identifier: "GMT")
    f.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
    if let date = f.date(from: value) { return min(max(0, date.timeIntervalSince(now)), maxRetryAfter) }
    return nil
}
