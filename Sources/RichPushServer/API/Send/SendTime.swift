import Foundation
import RichPushCore

/// `send_at`, checked where it enters: every later step (spreading, expiry, media retention) does arithmetic and
/// conversions on it, so a time outside this window never gets past the edge.
enum SendTime {
    /// As far ahead as APNs keeps a notification (its expiration limit), so a scheduled send can still expire.
    static let maxAhead: TimeInterval = 28 * 86_400
    /// A time a little in the past means "now" (clocks differ); further back is a mistake worth naming.
    static let maxBehind: TimeInterval = 86_400

    struct Problem: Error {
        var rule: String
        var message: String
    }

    static func read(_ value: JSONValue, now: Date) -> Result<Date, Problem> {
        guard let seconds = value.doubleValue, seconds.isFinite else {
            return .failure(Problem(rule: "type", message: "send_at is a number of seconds since 1970"))
        }
        let offset = seconds - now.timeIntervalSince1970
        guard offset <= maxAhead else {
            return .failure(Problem(rule: "range", message: "send_at is at most 28 days ahead (2,419,200 seconds)"))
        }
        guard offset >= -maxBehind else {
            return .failure(Problem(rule: "range", message: "send_at is at most one day in the past"))
        }
        return .success(Date(timeIntervalSince1970: max(seconds, now.timeIntervalSince1970)))
    }
}
