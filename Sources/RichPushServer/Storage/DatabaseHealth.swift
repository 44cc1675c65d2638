import Foundation
import NIOConcurrencyHelpers

/// What a node knows of its database: reachable or not, since when, and why. A failed operation that could not
/// reach the database marks it down at once; the backend's probe marks it up again. While it is down the API
/// answers `503` with `Retry-After` on every route that needs it, `/health/ready` answers `503`, and the workers
/// stop claiming.
public final class DatabaseHealth: Sendable {
    public struct Status: Sendable, Equatable {
        public var up: Bool
        public var since: Date
        /// Why it is down (never a password).
        public var reason: String?
    }

    private let state = NIOLockedValueBox(Status(up: true, since: Date(), reason: nil))
    private let onChange = NIOLockedValueBox<[@Sendable (Bool) -> Void]>([])

    public init() {}

    public var status: Status { state.withLockedValue { $0 } }
    public var isUp: Bool { state.withLockedValue { $0.up } }

    /// Calls `body` with every change (true: up again).
    public func observe(_ body: @escaping @Sendable (Bool) -> Void) { onChange.withLockedValue { $0.append(body) } }

    public func markDown(_ reason: String) { set(up: false, reason: reason) }
    public func markUp() { set(up: true, reason: nil) }

    private func set(up: Bool, reason: String?) {
        let changed = state.withLockedValue { s -> Bool in
            guard s.up != up else {
                if !up { s.reason = reason }
                return false
            }
            s = Status(up: up, since: Date(), reason: reason)
            return true
        }
        guard changed else { return }
        for body in onChange.withLockedValue({ $0 }) { body(up) }
    }
}

/// An operation that could not reach the database (it is down, or did not answer in time). The API answers it
/// with `503` and `Retry-After`; nothing was stored by it.
public struct DatabaseUnavailable: Error, CustomStringConvertible {
    public var reason: String
    public init(_ reason: String) { self.reason = reason }
    public var description: String { "the database is unavailable: \(reason)" }
}
