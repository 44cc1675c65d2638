import Foundation
import NIOConcurrencyHelpers

/// What a node knows of its database: reachable or not, since when, and why. A failed operation that could not
/// reach the database marks it down at once, unless the database answered another operation (or the probe) after
/// this one began: then the failure is load or a stale wait, not an outage (a busy database answers slowly and a
/// query may miss its deadline while others are answered; an operation that waited out a fault fails just after
/// the recovery). The probe's own missed deadline counts only when it is the second in a row with nothing answered
/// since the first began (``probeMissed(_:begunAt:)``): a node starved of CPU for a moment misses one as well. The
/// backend's probe marks it up again. While it is down the API answers `503` with `Retry-After` on every route that
/// needs it, `/health/ready` answers `503`, and the workers stop claiming.
public final class DatabaseHealth: Sendable {
    public struct Status: Sendable, Equatable {
        public var up: Bool
        public var since: Date
        /// Why it is down (never a password).
        public var reason: String?
    }

    /// When an operation began, as the answers seen so far (no clock: one that jumps cannot confuse it).
    public struct Epoch: Sendable, Equatable {
        let answers: Int
    }

    /// The status, and how many operations the database answered (probes included).
    /// `missed`: when the probe that last missed its deadline began.
    private let state = NIOLockedValueBox(
        (status: Status(up: true, since: Date(), reason: nil), answers: 0, missed: Epoch?.none)
    )
    private let onChange = NIOLockedValueBox<[@Sendable (Bool) -> Void]>([])

    public init() {}

    public var status: Status { state.withLockedValue { $0.status } }
    public var isUp: Bool { state.withLockedValue { $0.status.up } }
    /// Now, for an operation that begins (see ``markDown(_:begunAt:)``).
    public var epoch: Epoch { state.withLockedValue { Epoch(answers: $0.answers) } }

    /// The database answered an operation.
    public func answered() { state.withLockedValue { $0.answers &+= 1 } }

    /// Calls `body` with every change (true: up again).
    public func observe(_ body: @escaping @Sendable (Bool) -> Void) { onChange.withLockedValue { $0.append(body) } }

    /// Marks the database down for a failure seen now. `begunAt`: when the operation that saw it began; when the
    /// database answered anything since, the failure changes nothing while it is up.
    public func markDown(_ reason: String, begunAt: Epoch? = nil) { set(up: false, reason: reason, begunAt: begunAt) }
    public func markUp() { set(up: true, reason: nil, begunAt: nil) }

    /// The probe begun at `begunAt` got no answer within its deadline. The first such miss changes nothing; a
    /// second, begun with nothing answered since the first began, marks the database down (silent for two probes'
    /// deadlines: a hung server, not a slow moment). Other failures of the probe (refused, reset) use `markDown`.
    public func probeMissed(_ reason: String, begunAt: Epoch) {
        let previous = state.withLockedValue { s -> Epoch? in
            defer { s.missed = begunAt }
            return s.missed
        }
        if previous == begunAt { markDown(reason, begunAt: begunAt) }
    }

    private func set(up: Bool, reason: String?, begunAt: Epoch?) {
        let changed = state.withLockedValue { s -> Bool in
            guard s.status.up != up else {
                if !up { s.status.reason = reason }
                return false
            }
            if let begunAt, s.answers != begunAt.answers { return false }
            if up { s.answers &+= 1 }
            s.status = Status(up: up, since: Date(), reason: reason)
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
