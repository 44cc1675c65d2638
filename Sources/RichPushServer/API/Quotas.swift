import Foundation
import NIOConcurrencyHelpers

/// What one app may make this node spend on media: bytes uploaded per UTC day, and fetches of other servers'
/// media (preflight checks, the media of a send) at once; and a cap on fetches at once for the whole node. Past a
/// limit the request is answered 429 with `Retry-After` (the next UTC day for uploads, a second for fetches).
/// The admin key is not counted. Each node counts its own (a cluster of N nodes allows N times the figures).
public final class Quotas: Sendable {
    public struct Limits: Sendable, Equatable {
        /// Bytes one app may upload to `/v1/media` in a UTC day.
        public var uploadBytesPerDay: Int
        /// Media fetches one app may have running at once.
        public var fetchesPerApp: Int
        /// Media fetches the node runs at once, all apps together.
        public var fetches: Int

        public init(uploadBytesPerDay: Int = 1 << 30, fetchesPerApp: Int = 8, fetches: Int = 64) {
            self.uploadBytesPerDay = uploadBytesPerDay
            self.fetchesPerApp = fetchesPerApp
            self.fetches = fetches
        }
    }

    private struct State {
        /// Bytes uploaded by app on one day (days before the current one are dropped as they are met).
        var uploads: [String: (day: Int, bytes: Int)] = [:]
        var fetching: [String: Int] = [:]
        var fetchingTotal = 0
    }

    public let limits: Limits
    private let state = NIOLockedValueBox(State())

    public init(_ limits: Limits = Limits()) { self.limits = limits }

    static func day(_ now: Date) -> Int { Int((now.timeIntervalSince1970 / 86_400).rounded(.down)) }

    /// Counts `bytes` more of an upload by `app` (nil: the admin key); 429 once the day's bytes would pass the
    /// limit (what arrived before stays counted: it was received).
    func chargeUpload(app: String?, bytes: Int, now: Date = Date()) throws {
        guard let app else { return }
        let today = Self.day(now)
        let allowed = state.withLockedValue { s -> Bool in
            var entry = s.uploads[app] ?? (today, 0)
            if entry.day != today { entry = (today, 0) }
            guard entry.bytes + bytes <= limits.uploadBytesPerDay else {
                s.uploads[app] = entry
                return false
            }
            entry.bytes += bytes
            s.uploads[app] = entry
            return true
        }
        guard allowed else {
            let nextDay = Double(today + 1) * 86_400
            let wait = max(1, Int((nextDay - now.timeIntervalSince1970).rounded(.up)))
            throw APIError(
                .quotaExceeded,
                "this app has uploaded its \(limits.uploadBytesPerDay) bytes for today (UTC); retry after \(wait) s",
                retryAfter: wait
            )
        }
    }

    /// Bytes `app` uploaded today.
    public func uploaded(app: String, now: Date = Date()) -> Int {
        state.withLockedValue { s in s.uploads[app].map { $0.day == Self.day(now) ? $0.bytes : 0 } ?? 0 }
    }

    /// Runs `body`, which fetches `count` media URLs for `app` (nil: the admin key, counted only node-wide), when
    /// neither the app's nor the node's limit of fetches at once would pass; else 429 with `Retry-After: 1`.
    func fetching<T>(app: String?, count: Int, _ body: () async throws -> T) async throws -> T {
        guard count > 0 else { return try await body() }
        let refused: String? = state.withLockedValue { s in
            let mine = app.map { s.fetching[$0, default: 0] } ?? 0
            if let app, mine + count > limits.fetchesPerApp {
                return "app \(app) has \(mine) media fetches running (at most \(limits.fetchesPerApp) at once)"
            }
            if s.fetchingTotal + count > limits.fetches {
                return "the server has \(s.fetchingTotal) media fetches running (at most \(limits.fetches) at once)"
            }
            s.fetchingTotal += count
            if let app { s.fetching[app] = mine + count }
            return nil
        }
        if let refused { throw APIError(.quotaExceeded, refused + "; retry after 1 s", retryAfter: 1) }
        defer {
            state.withLockedValue { s in
                s.fetchingTotal -= count
                if let app {
                    let left = s.fetching[app, default: count] - count
                    s.fetching[app] = left > 0 ? left : nil
                }
            }
        }
        return try await body()
    }

    /// Fetches running now: for one app, and on the node.
    public func fetchesRunning(app: String? = nil) -> Int {
        state.withLockedValue { s in app.map { s.fetching[$0, default: 0] } ?? s.fetchingTotal }
    }
}
