import Foundation
import NIOConcurrencyHelpers
import RichPushTransport

/// What this node may send now, shared by its workers: the deliveries each app holds (claimed and not yet settled),
/// the sends in flight to each push service origin (`scheme://host:port`), and each origin's circuit
/// (``OriginCircuit``). A worker sizes its claims by the apps' rooms and asks before each send, so neither one
/// app's send nor one slow or dead push service takes every send slot of the node: another app's send still
/// finds one.
///
/// ```swift
/// let admission = DeliveryAdmission(limits: .defaults(concurrency: 200))
/// switch admission.admit(app: d.appID, origin: "https://web.push.apple.com:443", now: Date()) {
/// case .send(let probe): …   // then admission.finished(…, probe: probe, …)
/// case .wait(let until, let reason): …   // back to the queue, its attempt not counted
/// case .busy: …   // the origin has all its sends: wait on the node a little
/// }
/// ```
public final class DeliveryAdmission: Sendable {
    public struct Limits: Sendable, Equatable {
        /// Deliveries one app may hold on this node at once (claimed, waiting for a send slot, or sending).
        public var perApp: Int
        /// Sends in flight at once from this node to one push service origin.
        public var perOrigin: Int
        /// How long a delivery whose origin has all its sends waits on the node for one before it goes back to the
        /// queue (with ``busyDelay``).
        public var originWait: TimeInterval
        /// How long a delivery that went back for a busy origin waits in the queue.
        public var busyDelay: TimeInterval
        var circuit: OriginCircuit.Policy
        /// Origins remembered; past this the least recently used closed ones with nothing in flight are forgotten.
        public var maxOrigins: Int

        public init(
            perApp: Int,
            perOrigin: Int,
            originWait: TimeInterval = 1,
            busyDelay: TimeInterval = 1,
            failuresToOpen: Int = 10,
            firstBackoff: TimeInterval = 2,
            maxBackoff: TimeInterval = 60,
            maxOrigins: Int = 1000
        ) {
            self.perApp = max(1, perApp)
            self.perOrigin = max(1, perOrigin)
            self.originWait = min(max(0, originWait), 60)
            self.busyDelay = min(max(0.01, busyDelay), 3600)
            circuit = OriginCircuit.Policy(
                failuresToOpen: failuresToOpen,
                firstBackoff: firstBackoff,
                maxBackoff: maxBackoff
            )
            self.maxOrigins = max(1, maxOrigins)
        }

        /// For a node with `concurrency` sends in flight and `reserve` more deliveries claimed and ready to replace
        /// those that end: an app may hold nine tenths of both, one origin nine tenths of the sends. One app alone
        /// keeps the node nearly as busy as with no bound (at three quarters, a one-app send of 1,000,000 devices
        /// ran at 0.79 of its rate: its sends wait on the push service, so the rate follows the sends in flight), and
        /// another app always finds a tenth free (it needs one slot to be sent at once). The reserve counts: with
        /// the app's bound at nine tenths of the sends alone, one app's reserve took room from its sends in flight,
        /// and a node taking Live Activity updates as fast as it could fell behind them by 17 s (its sends in
        /// flight 52 on average against 19 with the room for both).
        public static func defaults(concurrency: Int, reserve: Int = 0) -> Limits {
            func share(_ n: Int) -> Int { max(1, n - max(1, n / 10)) }
            let c = max(1, concurrency)
            return Limits(perApp: share(c + max(0, reserve)), perOrigin: share(c))
        }
    }

    /// The answer to a send asking to go.
    public enum Decision: Sendable, Equatable {
        /// Send; `probe` when this send tests an open circuit (its outcome closes or reopens it).
        case send(probe: Bool)
        /// Not now: back to the queue until `until`, its attempt not counted (`reason` is recorded on it).
        case wait(until: Date, reason: String)
        /// The origin has all the sends it may have: wait on the node for one to end.
        case busy
    }

    /// One origin as the API and the console show it.
    public struct OriginStatus: Sendable, Equatable {
        public var origin: String
        public var state: String
        public var inFlight: Int
        public var limit: Int
        public var failuresInARow: Int
        public var openedAt: Date?
        public var retryAt: Date?
        public var lastFailure: String?
        public var lastUsed: Date
    }

    private struct Origin {
        var circuit: OriginCircuit
        var inFlight = 0
        var lastFailure: String?
        var lastUsed: Date
        var tick: UInt64
    }

    private struct State {
        var held: [String: Int] = [:]
        /// Room set aside for claims running now.
        var setAside = 0
        var origins: [String: Origin] = [:]
        /// Each app's origins, most recent last (at most ``originsPerApp``).
        var appOrigins: [String: [String]] = [:]
        var tick: UInt64 = 0
    }

    /// Origins remembered per app for ``status(app:)``.
    static let originsPerApp = 32

    public let limits: Limits
    let metrics: ServerMetrics?
    private let state = NIOLockedValueBox(State())

    public init(limits: Limits, metrics: ServerMetrics? = nil) {
        self.limits = limits
        self.metrics = metrics
    }

    // MARK: Apps

    /// The room of each app holding deliveries, for the next claim.
    public func rooms() -> ClaimRooms {
        let perApp = limits.perApp
        return state.withLockedValue { s in
            ClaimRooms(perApp: perApp, rooms: s.held.mapValues { perApp - $0 })
        }
    }

    /// The rooms for a claim of up to `limit` deliveries, which are set aside (taken from every app's room for the
    /// claims that start meanwhile) until ``hold(_:setAside:)`` counts what it took: claims of the node's workers
    /// at the same time cannot both take an app's last room.
    public func setAside(_ limit: Int) -> ClaimRooms {
        let perApp = limits.perApp
        return state.withLockedValue { s in
            let others = s.setAside
            s.setAside += max(0, limit)
            return ClaimRooms(perApp: perApp - others, rooms: s.held.mapValues { perApp - others - $0 })
        }
    }

    /// Counts deliveries a worker has claimed; returns those past their app's room (a claim of another worker on
    /// this node took the same room at once), which the worker gives back instead. `setAside`: what the claim's
    /// ``setAside(_:)`` set aside, given back now.
    public func hold(_ deliveries: [DeliveryRecord], setAside: Int = 0) -> Set<Int64> {
        let perApp = limits.perApp
        return state.withLockedValue { s in
            s.setAside = max(0, s.setAside - max(0, setAside))
            var over = Set<Int64>()
            for d in deliveries {
                let n = s.held[d.appID, default: 0]
                if n >= perApp {
                    over.insert(d.id)
                } else {
                    s.held[d.appID] = n + 1
                }
            }
            return over
        }
    }

    /// A held delivery was settled or given back.
    public func unhold(app: String) {
        state.withLockedValue { s in
            guard let n = s.held[app] else { return }
            s.held[app] = n > 1 ? n - 1 : nil
        }
    }

    /// Deliveries an app holds on this node now.
    public func held(app: String) -> Int { state.withLockedValue { $0.held[app] ?? 0 } }

    // MARK: Origins

    /// Whether a delivery of `app` to `origin` may be sent now (nil origin: the provider names none, and only the
    /// app's bound applies, which its claim already kept). A `.send` must be followed by ``finished(app:origin:probe:signal:reason:now:)``.
    public func admit(app: String, origin: String?, now: Date) -> Decision {
        guard let origin else { return .send(probe: false) }
        let perOrigin = limits.perOrigin
        let policy = limits.circuit
        let (decision, change, name) = state.withLockedValue { s -> (Decision, OriginCircuit.Change?, String) in
            s.tick &+= 1
            remember(origin, of: app, in: &s)
            var o = s.origins[origin] ?? Origin(circuit: OriginCircuit(policy: policy), lastUsed: now, tick: s.tick)
            o.tick = s.tick
            o.lastUsed = now
            let (admission, change) = o.circuit.admit(now: now)
            let decision: Decision
            switch admission {
            case .wait(let until):
                // Spread over a quarter of the wait after it, so that what waited does not come back at one instant.
                let spread = max(0, until.timeIntervalSince(now)) / 4
                decision = .wait(
                    until: until.addingTimeInterval(Double.random(in: 0...max(0.001, spread))),
                    reason: "circuit_open"
                )
            case .probe:
                o.inFlight += 1
                decision = .send(probe: true)
            case .send:
                if o.inFlight >= perOrigin {
                    decision = .busy
                } else {
                    o.inFlight += 1
                    decision = .send(probe: false)
                }
            }
            s.origins[origin] = o
            forgetIdle(&s)
            return (decision, change, o.circuit.name)
        }
        if change != nil { report(origin: origin, state: name) }
        return decision
    }

    /// A send ``admit(app:origin:now:)`` let go has ended with `signal` (see ``signal(of:)``).
    func finished(
        app: String,
        origin: String?,
        probe: Bool,
        signal: OriginCircuit.Signal,
        reason: String?,
        now: Date
    ) {
        guard let origin else { return }
        let (change, name) = state.withLockedValue { s -> (OriginCircuit.Change?, String) in
            guard var o = s.origins[origin] else { return (nil, "closed") }
            o.inFlight = max(0, o.inFlight - 1)
            if signal == .failed { o.lastFailure = reason }
            let change = o.circuit.finished(signal, probe: probe, now: now)
            s.origins[origin] = o
            return (change, o.circuit.name)
        }
        if let change {
            report(origin: origin, state: name)
            if change == .opened { metrics?.pushServiceOpened() }
        }
    }

    /// An origin's new state, and the count per state, to the metrics.
    private func report(origin: String, state name: String) {
        guard let metrics else { return }
        metrics.pushServiceState(origin: origin, state: name)
        let counts = state.withLockedValue { s in
            s.origins.values.reduce(into: [String: Int]()) { $0[$1.circuit.name, default: 0] += 1 }
        }
        metrics.pushServiceCircuits(counts)
    }

    /// What a send's result says of its push service: a transport failure, a timeout or a 5xx is the service's
    /// failure; an answer about the request or its token (a 2xx, most 4xx) shows it working; what never reached
    /// it (no credentials, a refused address, the database away) or a 429 (the service's pacing, with its own
    /// Retry-After) says nothing.
    static func signal(of result: SendResult) -> OriginCircuit.Signal {
        switch result {
        case .delivered: return .answered
        case let .failed(decision, reason):
            if reason == "send_deadline" || reason.contains("transport") || reason == "webpush_dns" {
                return .failed
            }
            if reason == "database_unavailable" || reason.hasPrefix("unknown_") || reason.hasSuffix("_not_configured")
                || reason == "notification_missing" || reason.hasPrefix("webpush_address_refused")
                || reason == "webpush_bad_subscription" || reason == "webpush_request"
                || reason == "webpush_payload_too_large"
            {
                return .neutral
            }
            if reason == "TooManyRequests" || reason == "QUOTA_EXCEEDED" || reason == "webpush_429" { return .neutral }
            if let status = Int(reason.dropFirst("webpush_".count)), reason.hasPrefix("webpush_") {
                return status >= 500 ? .failed : .answered
            }
            // The providers' own reasons: the retryable ones are the service's trouble (a 5xx, unavailable).
            return decision.isRetryable ? .failed : .answered
        }
    }

    /// The origins an app sent to lately, with their state on this node, most recent first.
    public func status(app: String) -> [OriginStatus] {
        let perOrigin = limits.perOrigin
        return state.withLockedValue { s in
            (s.appOrigins[app] ?? []).reversed().compactMap { name in
                guard let o = s.origins[name] else { return nil }
                return OriginStatus(
                    origin: name,
                    state: o.circuit.name,
                    inFlight: o.inFlight,
                    limit: perOrigin,
                    failuresInARow: o.circuit.failuresInARow,
                    openedAt: o.circuit.openedAt,
                    retryAt: o.circuit.retryAt,
                    lastFailure: o.lastFailure,
                    lastUsed: o.lastUsed
                )
            }
        }
    }

    /// Sends in flight to an origin from this node.
    public func inFlight(origin: String) -> Int { state.withLockedValue { $0.origins[origin]?.inFlight ?? 0 } }

    /// The circuit's state of an origin ("closed" when unknown).
    public func circuitState(origin: String) -> String {
        state.withLockedValue { $0.origins[origin]?.circuit.name ?? "closed" }
    }

    private func remember(_ origin: String, of app: String, in s: inout State) {
        var list = s.appOrigins[app] ?? []
        if list.last == origin { return }
        list.removeAll { $0 == origin }
        list.append(origin)
        if list.count > Self.originsPerApp { list.removeFirst(list.count - Self.originsPerApp) }
        s.appOrigins[app] = list
    }

    /// Past `maxOrigins`, the least recently used closed origins with nothing in flight are forgotten.
    private func forgetIdle(_ s: inout State) {
        guard s.origins.count > limits.maxOrigins else { return }
        let idle = s.origins.filter { $0.value.inFlight == 0 && $0.value.circuit.name == "closed" }
            .sorted { $0.value.tick < $1.value.tick }
        for (name, _) in idle.prefix(s.origins.count - limits.maxOrigins + limits.maxOrigins / 10) {
            s.origins[name] = nil
        }
    }
}
