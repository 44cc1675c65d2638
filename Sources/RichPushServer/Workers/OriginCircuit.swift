import Foundation

/// Whether this node sends to one push service origin (`scheme://host:port`), as a value: every event is a method
/// that takes the time it happens at and says what the sender must do. ``DeliveryAdmission`` keeps one per origin
/// behind its lock; the workers drive it.
///
///     closed ──`failuresToOpen` failures in a row──▶ open(until) ──until passes, a send asks──▶ probing
///       ▲                                              ▲                                           │
///       ├──────────────── the probe succeeds ──────────┼──────────── the probe fails: open again, ◀─┤
///       │                                              │             the wait doubled (at most      │
///       │                                              │             `maxBackoff`)                  │
///       └──── any send succeeds (open or probing) ─────┴───── a probe that said nothing: open, ◀────┘
///                                                              probed again at once
///
/// A failure is the service's, not one token's: no connection, a TLS failure, a timeout, a 5xx (see
/// ``DeliveryAdmission/signal(of:)``). While it is open its deliveries wait (the time ``admit(now:)`` gives) and
/// one send at a time probes it.
struct OriginCircuit: Sendable, Equatable {
    struct Policy: Sendable, Equatable {
        /// Failures in a row (with no success between) that open the circuit: enough that a service failing one
        /// request in three (a retried 503 now and then) stays closed, few enough that the sends in flight to one
        /// that stopped answering open it when they time out together.
        var failuresToOpen = 10
        /// The first wait once open; doubled by each failed probe.
        var firstBackoff: TimeInterval = 2
        var maxBackoff: TimeInterval = 60

        init(failuresToOpen: Int = 10, firstBackoff: TimeInterval = 2, maxBackoff: TimeInterval = 60) {
            self.failuresToOpen = max(1, failuresToOpen)
            self.firstBackoff = min(max(0.001, firstBackoff), 3600)
            self.maxBackoff = min(max(self.firstBackoff, maxBackoff), 86_400)
        }
    }

    enum State: Sendable, Equatable {
        /// Sends go; `failures` is the run of failures since the last success.
        case closed(failures: Int)
        /// Nothing is sent before `until`; `backoff` is the wait that led here.
        case open(until: Date, backoff: TimeInterval, since: Date)
        /// One send (the probe) is testing the service; the rest wait.
        case probing(backoff: TimeInterval, since: Date)
    }

    /// What a send may do now.
    enum Admission: Sendable, Equatable {
        case send
        /// Send, as the one probe: its outcome closes or reopens the circuit.
        case probe
        /// Do not send; come back at this time (not counted as an attempt).
        case wait(until: Date)
    }

    /// What a finished send said of the service.
    enum Signal: Sendable, Equatable {
        /// The service answered (a 2xx, or a 4xx about the request or its token).
        case answered
        /// The service failed: no connection, TLS, a timeout, a 5xx.
        case failed
        /// Nothing about the service (the send was refused before it went out).
        case neutral
    }

    /// What changed, for the metrics and the log.
    enum Change: Sendable, Equatable {
        case opened
        case closed
        case probing
    }

    let policy: Policy
    private(set) var state = State.closed(failures: 0)

    init(policy: Policy = Policy()) { self.policy = policy }

    /// A send asks to go: while closed it goes; once the wait is over the first to ask becomes the probe; the rest
    /// wait for the probe's outcome (a wait of the current backoff: an answer the probe gets sooner still lets them
    /// come back then).
    mutating func admit(now: Date) -> (Admission, Change?) {
        switch state {
        case .closed: return (.send, nil)
        case let .open(until, backoff, since):
            guard now >= until else { return (.wait(until: until), nil) }
            state = .probing(backoff: backoff, since: since)
            return (.probe, .probing)
        case .probing(let backoff, _):
            return (.wait(until: now.addingTimeInterval(backoff)), nil)
        }
    }

    /// A send admitted earlier has ended. `probe` says whether it was the probe.
    mutating func finished(_ signal: Signal, probe: Bool, now: Date) -> Change? {
        switch (state, signal) {
        case (_, .answered):
            // Any answer shows the service working, whichever send it came to.
            if case .closed = state {
                state = .closed(failures: 0)
                return nil
            }
            state = .closed(failures: 0)
            return .closed
        case (.closed(let failures), .failed):
            let run = failures + 1
            guard run >= policy.failuresToOpen else {
                state = .closed(failures: run)
                return nil
            }
            state = .open(until: now.addingTimeInterval(policy.firstBackoff), backoff: policy.firstBackoff, since: now)
            return .opened
        case (.probing(let backoff, let since), .failed) where probe:
            let next = min(policy.maxBackoff, backoff * 2)
            state = .open(until: now.addingTimeInterval(next), backoff: next, since: since)
            return .opened
        case (.probing(let backoff, let since), .neutral) where probe:
            // The probe never reached the service: the next send probes instead.
            state = .open(until: now, backoff: backoff, since: since)
            return .opened
        case (.closed, .neutral), (.open, _), (.probing, _):
            // Sends that began before the circuit opened end as they may: only the probe's outcome counts now.
            return nil
        }
    }

    /// The state's name, as the API, the console and the metrics show it.
    var name: String {
        switch state {
        case .closed: return "closed"
        case .open: return "open"
        case .probing: return "probing"
        }
    }

    /// Failures in a row while closed (0 otherwise).
    var failuresInARow: Int {
        if case .closed(let n) = state { return n }
        return 0
    }

    /// When the next probe may go (open only).
    var retryAt: Date? {
        if case .open(let until, _, _) = state { return until }
        return nil
    }

    /// Since when the circuit has not been closed.
    var openedAt: Date? {
        switch state {
        case .closed: return nil
        case .open(_, _, let since), .probing(_, let since): return since
        }
    }
}
