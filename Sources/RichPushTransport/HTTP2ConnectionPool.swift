import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// Up to a fixed number of HTTP/2 connections to one server, each with state of the caller's own (`Extra`: an
/// APNs connection keeps its provider token there).
///
/// Requests go to the least loaded usable connection. A connection counts as full at `streamsPerConnection`
/// requests in flight even when the server allows more (APNs allows 1,000): HTTP/2 bookkeeping costs more per
/// request the more streams one connection holds open, on both ends, so another connection is opened first, and
/// only when every slot is open do connections take streams up to the server's own limit. Connections are opened
/// as load needs them. A closed or GOAWAY'd connection is replaced on demand,
/// with exponential backoff and jitter after failed attempts. Requests the server cannot have processed
/// (refused streams, streams above GOAWAY's last id, failed connects) are sent again, up to `maxAttempts`.
public enum HTTP2PoolDefaults {
    /// Requests in flight on one connection before another is opened. Measured with `richpush-bench apns`: see the
    /// README's benchmark section.
    public static let streamsPerConnection = 100
    /// The most connections a provider client opens: 800 requests in flight below the cap above.
    public static let connections = 8
}

public final class HTTP2ConnectionPool<Extra: Sendable>: Sendable {
    public struct Configuration: Sendable {
        public var target: HTTP2ClientConnection.Target
        /// The most connections opened.
        public var connections: Int
        /// Requests in flight on one connection before another is opened (the server's limit still applies).
        public var streamsPerConnection: Int
        public var connectTimeout: TimeAmount
        public var requestTimeout: TimeAmount
        public var maxAttempts: Int
        /// A connection idle this long is pinged; one that does not answer is replaced.
        public var pingInterval: TimeAmount
        public var backoffBase: TimeAmount
        public var backoffCap: TimeAmount
        /// Where connects, failed connects, lost connections and unanswered pings are told.
        public var logger: Logger

        public init(
            target: HTTP2ClientConnection.Target,
            connections: Int = 2,
            streamsPerConnection: Int = HTTP2PoolDefaults.streamsPerConnection,
            connectTimeout: TimeAmount = .seconds(10),
            requestTimeout: TimeAmount = .seconds(10),
            maxAttempts: Int = 3,
            pingInterval: TimeAmount = .seconds(60),
            backoffBase: TimeAmount = .milliseconds(100),
            backoffCap: TimeAmount = .seconds(10),
            logger: Logger = .disabled
        ) {
            self.target = target
            self.connections = connections
            self.streamsPerConnection = max(1, streamsPerConnection)
            self.connectTimeout = connectTimeout
            self.requestTimeout = requestTimeout
            self.maxAttempts = maxAttempts
            self.pingInterval = pingInterval
            self.backoffBase = backoffBase
            self.backoffCap = backoffCap
            var logger = logger
            logger[metadataKey: "server"] = "\(target.host):\(target.port)"
            self.logger = logger
        }
    }

    /// A connection with its caller state.
    public struct Pooled: Sendable {
        public let connection: HTTP2ClientConnection
        public let extra: Extra
        public let id: Int
        /// The failed connects of its slot before it (0 for one adopted).
        var failuresBefore = 0
    }

    /// What a slot whose connection ended becomes: free at once after a connection that answered; after one that
    /// ended before answering anything (a server that sends GOAWAY right after its SETTINGS), a failed connect, with
    /// its backoff. Freed at once, such a server had the pool reconnect without pause: 146 connections in 0.63 s for
    /// one request, found by a hostile server.
    func freed(after p: Pooled) -> Slot {
        guard !p.connection.hasAnswered else { return .empty(failures: 0, notBefore: .now()) }
        return .empty(
            failures: p.failuresBefore + 1,
            notBefore: .now() + Self.backoff(failures: p.failuresBefore, configuration)
        )
    }

    /// How long a slot waits after `failures` failed connects in a row: exponential, capped, with jitter.
    static func backoff(failures: Int, _ configuration: Configuration) -> TimeAmount {
        let exponent = min(failures, 16)
        let base = configuration.backoffBase.nanoseconds * Int64(1 << exponent)
        let delay = min(base, configuration.backoffCap.nanoseconds)
        return .nanoseconds(delay / 2 + Int64.random(in: 0...max(1, delay / 2)))
    }

    enum Slot {
        case empty(failures: Int, notBefore: NIODeadline)
        case connecting(Task<Pooled, Error>)
        case ready(Pooled)
    }

    /// The pool's lifecycle: running with its slots, or shut down with none (a connect that ends after the
    /// shutdown finds no slot to fill, and every request is refused).
    enum State {
        case running(Running)
        case shutDown

        struct Running {
            var slots: [Slot]
            var nextID = 0
            /// Connections going away that still carry requests, oldest first: their slots are free again (a
            /// new connection takes the next requests), and each leaves this list when it closes. At most as
            /// many open as there are slots.
            var draining: [Pooled] = []

            /// Keeps a connection going away that is still open; returns the oldest one still open past one per
            /// slot, for the caller to close after the lock. That one stays on the list until it has closed, so
            /// that a shutdown meanwhile still closes it and waits for it.
            mutating func setAside(_ p: Pooled) -> Pooled? {
                draining.append(p)
                let open = draining.filter { !$0.connection.isClosed }
                return open.count > slots.count ? open.first : nil
            }
        }

        /// `body` on the running pool; ``TransportError/shutDown`` once shut down.
        mutating func whileRunning<T>(_ body: (inout Running) throws -> T) throws -> T {
            guard case .running(var running) = self else { throw TransportError.shutDown }
            // No second reference to the slots while `body` changes them (no copy of the array).
            self = .shutDown
            defer { self = .running(running) }
            return try body(&running)
        }

        /// Sets one slot while running; a slot of a pool shut down is gone, and nothing happens.
        mutating func set(_ slot: Int, to value: Slot) -> Bool {
            let set = try? whileRunning { r -> Bool in
                guard r.slots.indices.contains(slot) else { return false }
                r.slots[slot] = value
                return true
            }
            return set ?? false
        }

        /// The slots and the draining connections to close; the pool is shut down from here on.
        mutating func shutDown() -> (slots: [Slot], draining: [Pooled]) {
            guard case .running(let running) = self else { return ([], []) }
            self = .shutDown
            return (running.slots, running.draining)
        }

        var slots: [Slot] {
            if case .running(let r) = self { return r.slots }
            return []
        }
    }

    public let configuration: Configuration
    let group: EventLoopGroup
    let makeExtra: @Sendable () -> Extra
    let state: NIOLockedValueBox<State>
    private let pinger: NIOLockedValueBox<RepeatedTask?> = NIOLockedValueBox(nil)

    public init(configuration: Configuration, group: EventLoopGroup, makeExtra: @escaping @Sendable () -> Extra) {
        self.configuration = configuration
        self.group = group
        self.makeExtra = makeExtra
        state = NIOLockedValueBox(
            .running(
                .init(
                    slots: Array(
                        repeating: .empty(failures: 0, notBefore: .uptimeNanoseconds(0)),
                        count: max(1, configuration.connections)
                    )
                )
            )
        )
        let interval = configuration.pingInterval
        let task = group.next().scheduleRepeatedAsyncTask(initialDelay: interval, delay: interval) { [weak self] task in
            self?.pingIdle() ?? group.next().makeSucceededVoidFuture()
        }
        pinger.withLockedValue { $0 = task }
    }

    /// Sends a request built for the chosen connection, retrying what the server did not process. A stream is
    /// reserved on the connection chosen, so requests acquiring at once spread by the room each leaves.
    public func execute(_ build: @Sendable (Pooled) throws -> H2Request) async throws -> (H2Response, Pooled) {
        var attempt = 0
        while true {
            attempt += 1
            let pooled = try await acquire()
            do {
                let request: H2Request
                do { request = try build(pooled) } catch {
                    pooled.connection.releaseReservation()
                    throw error
                }
                let response = try await pooled.connection.send(request, timeout: configuration.requestTimeout).get()
                return (response, pooled)
            } catch let error as TransportError {
                // A connection going away (the server's GOAWAY, or retired by the client) is not closed here: the
                // requests still in flight on it may end, and it closes itself once none awaits an answer. The next
                // acquire forgets it.
                if case .connectionClosed = error { retire(pooled) }
                if case .notSent = error { retire(pooled) }
                if error.safeToRetry && attempt < configuration.maxAttempts { continue }
                throw error
            }
        }
    }

    /// Takes a connection made elsewhere (the one whose ALPN chose `h2`) into an empty slot; false when none is
    /// empty or the pool is shut down (the caller closes it then).
    public func adopt(_ connection: HTTP2ClientConnection) -> Bool {
        let extra = makeExtra()
        let adopted = try? state.withLockedValue { state in
            try state.whileRunning { r -> Bool in
                for i in r.slots.indices {
                    if case .empty = r.slots[i] {
                        r.slots[i] = .ready(Pooled(connection: connection, extra: extra, id: r.nextID))
                        r.nextID += 1
                        return true
                    }
                }
                return false
            }
        }
        return adopted ?? false
    }

    /// Closes a connection and frees its slot (after an error that leaves it unusable).
    public func retire(_ pooled: Pooled) {
        pooled.connection.close()
        state.withLockedValue { s in
            for (i, slot) in s.slots.enumerated() {
                if case .ready(let p) = slot, p.id == pooled.id {
                    _ = s.set(i, to: freed(after: p))
                }
            }
        }
    }

    /// The connections that are open now.
    public var openConnections: [Pooled] {
        state.withLockedValue { s in s.slots.compactMap { if case .ready(let p) = $0 { return p } else { return nil } }
        }
    }

    func acquire() async throws -> Pooled {
        var failedConnects = 0
        var lastError: Error?
        while true {
            if failedConnects >= configuration.maxAttempts {
                throw (lastError as? TransportError)
                    ?? TransportError.connectFailed(lastError.map { "\($0)" } ?? "no connection")
            }
            var kept: [Pooled] = []
            var cut: [Pooled] = []
            let next: AcquireStep = try state.withLockedValue { state in
                try state.whileRunning { s in
                    // Forget connections that closed or are going away. One still open may carry requests the
                    // server still answers: it is kept aside until it closes, and the oldest of those past one per
                    // slot is closed (a server that sends GOAWAY on every connection and never answers would
                    // otherwise have the client hold a connection per request, as long as its timeout).
                    for i in s.slots.indices {
                        if case .ready(let p) = s.slots[i], !p.connection.isUsable {
                            s.slots[i] = freed(after: p)
                            if !p.connection.isClosed {
                                kept.append(p)
                                if let oldest = s.setAside(p) { cut.append(oldest) }
                            }
                            let reason =
                                p.connection.goAwayReason.map { "GOAWAY (\($0))" } ?? p.connection.retiredBecause
                                ?? "closed"
                            configuration.logger.info(
                                "connection replaced",
                                metadata: ["connection": "\(p.id)", "because": .string(reason)]
                            )
                        }
                    }
                    var ready: [(pooled: Pooled, load: HTTP2ClientConnection.Load)] = []
                    ready.reserveCapacity(s.slots.count)
                    for case .ready(let p) in s.slots { ready.append((p, p.connection.load)) }
                    let cap = configuration.streamsPerConnection
                    // Below the soft cap: the connection with the most room under it.
                    let soft = ready.max { a, b in a.load.room(cap: cap) < b.load.room(cap: cap) }
                    // Reserved while choosing: callers acquiring at once each get a stream of their own.
                    if let soft, soft.load.room(cap: cap) > 0 {
                        return soft.pooled.connection.reserveStream(cap: cap) ? .use(soft.pooled) : .again
                    }
                    // Every open connection is at the cap: the one with the most room under the server's limit.
                    let best = ready.max { a, b in a.load.room(cap: .max) < b.load.room(cap: .max) }?.pooled
                    // Open another connection when a slot is free to try, one at a time: a connection being opened, or
                    // one whose server has not yet had the chance to raise its low starting limit, takes the next
                    // requests over the cap once it can, so a burst does not open every slot at once.
                    let now = NIODeadline.now()
                    let growing =
                        s.slots.contains { if case .connecting = $0 { return true } else { return false } }
                        || ready.contains { $0.load.isFresh && $0.load.remoteMaxStreams < cap }
                    for i in s.slots.indices where best == nil || !growing {
                        if case .empty(let failures, let notBefore) = s.slots[i], notBefore <= now {
                            let task = startConnect(slot: i, failures: failures, id: s.nextID)
                            s.nextID += 1
                            s.slots[i] = .connecting(task)
                            if best == nil { return .wait(task) }
                            // One new connection per request over the cap is plenty: it takes the next ones.
                            break
                        }
                    }
                    // over the cap (the HTTP/2 layer queues past the server's limit)
                    if let best, best.connection.reserveStream(cap: nil) { return .use(best) }
                    for slot in s.slots { if case .connecting(let t) = slot { return .wait(t) } }
                    let earliest =
                        s.slots.compactMap { slot -> NIODeadline? in
                            if case .empty(_, let nb) = slot { return nb } else { return nil }
                        }.min() ?? now
                    return .sleep(earliest - now)
                }
            }
            // Outside the lock: a close and its future's callbacks may run here.
            for p in kept { watchDraining(p) }
            for p in cut { p.connection.close() }
            switch next {
            case .use(let p): return p
            case .again: continue
            case .wait(let task):
                do { _ = try await task.value } catch {
                    failedConnects += 1
                    lastError = error
                }
            case .sleep(let t):
                failedConnects += 1
                try await Task.sleep(nanoseconds: UInt64(max(1_000_000, t.nanoseconds)))
            }
        }
    }

    /// Takes a draining connection off the list once it closes.
    private func watchDraining(_ p: Pooled) {
        p.connection.closeFuture.whenComplete { [state] _ in
            state.withLockedValue { s in
                _ = try? s.whileRunning { r in r.draining.removeAll { $0.id == p.id } }
            }
        }
    }

    /// The connections going away that are still open (their requests may still be answered).
    var drainingConnections: [Pooled] {
        state.withLockedValue { s in (try? s.whileRunning { $0.draining }) ?? [] }
    }

    private func startConnect(slot: Int, failures: Int, id: Int) -> Task<Pooled, Error> {
        let config = configuration
        let group = self.group
        let makeExtra = self.makeExtra
        return Task { [state] in
            do {
                let connection = try await HTTP2ClientConnection.connect(
                    to: config.target,
                    group: group,
                    timeout: config.connectTimeout
                )
                let pooled = Pooled(connection: connection, extra: makeExtra(), id: id, failuresBefore: failures)
                let keep = state.withLockedValue { $0.set(slot, to: .ready(pooled)) }
                if !keep {
                    connection.close()
                    throw TransportError.shutDown
                }
                config.logger.debug("connected", metadata: ["connection": "\(id)", "slot": "\(slot)"])
                return pooled
            } catch {
                // Exponential backoff with jitter before this slot tries again.
                let jittered = Self.backoff(failures: failures, config).nanoseconds
                config.logger.warning(
                    "could not connect",
                    metadata: [
                        "error": "\(error)", "failures": "\(failures + 1)", "retry_in_ms": "\(jittered / 1_000_000)",
                    ]
                )
                // A pool shut down while this connect ran has no slots left to mark (an app's clients are
                // replaced when its credentials change, with their connects still under way).
                _ = state.withLockedValue {
                    $0.set(slot, to: .empty(failures: failures + 1, notBefore: .now() + .nanoseconds(jittered)))
                }
                throw error
            }
        }
    }

    private func pingIdle() -> EventLoopFuture<Void> {
        let loop = group.next()
        let idle = openConnections.filter {
            $0.connection.inFlight == 0 && $0.connection.idleTime >= configuration.pingInterval
        }
        let pings = idle.map { p in
            p.connection.ping().flatMapErrorThrowing { [weak self] error in
                self?.configuration.logger.notice(
                    "an idle connection did not answer a ping; replaced",
                    metadata: ["connection": "\(p.id)", "error": "\(error)"]
                )
                self?.retire(p)
            }
        }
        return EventLoopFuture.andAllComplete(pings, on: loop)
    }

    /// Closes every connection; later requests fail with ``TransportError/shutDown``.
    enum AcquireStep {
        case use(Pooled)
        /// The stream chosen was taken meanwhile: choose again.
        case again
        case wait(Task<Pooled, Error>)
        case sleep(TimeAmount)
    }

    public func shutdown() async {
        for closed in close() { try? await closed.get() }
    }

    /// Starts closing every connection and takes no more requests, without waiting: each future ends when its
    /// connection has closed.
    @discardableResult
    public func close() -> [EventLoopFuture<Void>] {
        pinger.withLockedValue {
            $0?.cancel()
            $0 = nil
        }
        let (slots, draining) = state.withLockedValue { $0.shutDown() }
        var closing: [EventLoopFuture<Void>] = []
        for p in draining {
            p.connection.close()
            closing.append(p.connection.closeFuture)
        }
        for slot in slots {
            switch slot {
            case .ready(let p):
                p.connection.close()
                closing.append(p.connection.closeFuture)
            case .connecting(let t): t.cancel()
            case .empty: break
            }
        }
        return closing
    }
}
