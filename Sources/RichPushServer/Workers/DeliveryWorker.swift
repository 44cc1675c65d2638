import Foundation
import Logging
import NIOConcurrencyHelpers
import RichPushTransport

/// Drains the queue: keeps up to `concurrency` sends in flight at all times, claiming more under a lease as sends
/// end (each claim sized to the room there is), records every outcome or reschedules by the retry policy. Tokens
/// the provider reports gone are handed to `prune`.
///
/// No send waits for another: each ends on its own (answered, failed, or given up at its deadline), its slot is
/// filled from a reserve of claimed deliveries (half a claim), and the leases of everything held are extended while
/// it is held. Claims and settles run beside the sends, so a database that answers slowly leaves no slot empty.
/// Measured on Live Activity updates taken as fast as the node could (`Benchmarks/live_activities.sh 5000 30`): with
/// the loop awaiting each claim and settle, 55 sends were in flight on average and the updates reached the push
/// service 16.5 s late (p50); with the reserve but the app's room still nine tenths of the sends alone, 52 and 17 s;
/// with both mended, 0.13 s. Before each send the node's ``DeliveryAdmission`` is asked: an app holds at most its
/// share of the node's sends, a push service origin at most its own, and an origin whose circuit is open gets none
/// (its deliveries go back to the queue untried, their attempt not counted).
public final class DeliveryWorker: Sendable {
    public struct Configuration: Sendable {
        public var owner: String
        /// The most one claim takes.
        public var batchSize: Int
        /// Sends in flight at once (HTTP/2 bookkeeping grows with open streams: a few hundred is the sweet spot).
        public var concurrency: Int
        public var lease: TimeInterval
        /// How long to wait when nothing is due.
        public var idleWait: TimeInterval
        /// Outcomes recorded per transaction at most.
        public var settleEvery = 50
        /// The longest an outcome waits for others to be recorded with (fewer than `settleEvery` finished).
        public var settleDelay: TimeInterval = 0.1
        public var retry: RetryPolicy
        /// The longest one send may take before the worker stops waiting for it and reschedules the delivery
        /// (reason `send_deadline`), so a send that never ends cannot hold its slot. Unless set: half the lease,
        /// and at least 30 s (the leases of what is held are extended while it runs, so a slow send on a loaded
        /// machine is waited for rather than given up and sent twice).
        public var sendDeadline: TimeInterval?

        /// ``sendDeadline`` as it applies.
        var effectiveSendDeadline: TimeInterval { sendDeadline ?? max(lease / 2, 30) }

        /// Free slots worth a claim of their own while sends are in flight: half of what one claim takes at most.
        /// A claim's cost is mostly per claim (a transaction, the choice of apps): at a quarter a one-app send of
        /// 200,000 made 4,828 claims (41 deliveries each, 11 times as many as a worker that claimed 500 at a
        /// time), and cost 0.117 CPU s per 1,000 deliveries against 0.097.
        var claimThreshold: Int { max(1, min(batchSize, concurrency) / 2) }

        public init(
            owner: String = "worker-\(UUID().uuidString.prefix(8))",
            batchSize: Int = 200,
            concurrency: Int = 200,
            lease: TimeInterval = 60,
            idleWait: TimeInterval = 0.2,
            retry: RetryPolicy = RetryPolicy()
        ) {
            self.owner = owner
            self.batchSize = max(1, batchSize)
            self.concurrency = max(1, concurrency)
            self.lease = lease
            self.idleWait = idleWait
            self.retry = retry
        }
    }

    public let configuration: Configuration
    let queue: DeliveryQueue
    let sender: DeliverySender
    let prune: @Sendable (DeliveryRecord, String) async -> Void
    let now: @Sendable () -> Date
    let metrics: ServerMetrics?
    /// The database's health: while it is down the worker claims nothing.
    let health: DatabaseHealth?
    /// Updates in place: asked before a claim is sent which of its deliveries a newer version superseded and which
    /// must wait for an older version's send to end (nil: no notification has versions).
    let updates: (any NotificationUpdates)?
    /// Counts per notification and minute (an app's time series); nil: not counted.
    let minutes: MinuteCounter?
    /// The node's bounds per app and per push service origin, and the origins' circuits (shared by its workers).
    let admission: DeliveryAdmission
    let logger: Logger
    let signal = WakeSignal()
    /// Set by ``stop()``.
    let stopping = StopFlag()
    /// Set by ``wake()``: new deliveries were queued since the last claim.
    let woken = NIOLockedValueBox(false)
    let deadlines: SendDeadlines

    public init(
        configuration: Configuration = .init(),
        queue: DeliveryQueue,
        sender: DeliverySender,
        admission: DeliveryAdmission? = nil,
        metrics: ServerMetrics? = nil,
        health: DatabaseHealth? = nil,
        updates: (any NotificationUpdates)? = nil,
        minutes: MinuteCounter? = nil,
        logger: Logger = Logger(label: "richpush.worker"),
        now: @escaping @Sendable () -> Date = { Date() },
        prune: @escaping @Sendable (DeliveryRecord, String) async -> Void = { _, _ in }
    ) {
        self.configuration = configuration
        self.queue = queue
        self.sender = sender
        self.admission =
            admission
            ?? DeliveryAdmission(
                limits: .defaults(concurrency: configuration.concurrency, reserve: configuration.claimThreshold),
                metrics: metrics
            )
        self.metrics = metrics
        self.health = health
        self.updates = updates
        self.minutes = minutes
        self.logger = logger
        self.now = now
        self.prune = prune
        deadlines = SendDeadlines(granularity: min(0.1, max(0.001, configuration.effectiveSendDeadline) / 4))
    }

    /// Runs until ``stop()``: then the worker claims nothing more, and finishes what it holds (its reserve too):
    /// its sends end (each within its deadline) and every outcome is recorded before it returns. When nothing is
    /// due it waits up to `idleWait`, or until ``wake()`` says there is new work.
    ///
    /// Cancelling the task abandons what it holds instead: its sends and database writes are cancelled, and the
    /// deliveries they held are claimed again when their leases run out (sent at least once, perhaps twice). The
    /// server stops a worker with ``stop()`` on a graceful shutdown (``WorkerService``); cancellation is the hard
    /// stop after it. A worker runs once.
    public func run() async {
        _ = await serve(until: stopping, once: false)
    }

    /// Asks ``run()`` to end: no more claims, everything held finished and recorded.
    public func stop() {
        stopping.set()
        signal.signal()
    }

    /// Claims once and processes what it got to the end (every send ended and every outcome recorded); returns how
    /// many deliveries the claim handed out. For tests and tools: a server runs ``run()``.
    @discardableResult
    public func runOnce() async throws -> Int {
        let handled = await serve(until: StopFlag(), once: true)
        if let error = handled.error { throw error }
        return handled.claimed
    }

    /// New deliveries were queued: an idle worker looks at once. Only the first wake after a claim signals (the
    /// rest find it woken already): a stream of sends wakes the loop once per claim, not once per send.
    public func wake() {
        if !woken.withLockedValue({ w in
            defer { w = true }
            return w
        }) {
            signal.signal()
        }
    }

    /// Settles, trying again while the leases hold if the database does not answer, and for
    /// ``settleGrace`` seconds past their end while it is unreachable: a settle only changes the rows this worker
    /// still holds, so a late one is right whenever it lands, and each that lands before another worker takes its
    /// delivery (its lease having run out while the database was away) is one send fewer made twice.
    func settleWhileLeased(_ items: [Settlement], leases: HeldLeases) async throws -> Set<Int64> {
        var pause = 0.1
        let ends = leases.end(of: items.map(\.id))
        while true {
            do { return try await queue.settle(items, owner: configuration.owner, now: now()) } catch {
                // A worker cancelled outright records nothing more: the leases run out instead.
                if Task.isCancelled { throw error }
                let limit = error is DatabaseUnavailable ? ends.addingTimeInterval(Self.settleGrace) : ends
                guard now().addingTimeInterval(pause) < limit else { throw error }
                // Only cancellation ends the sleep early; the loop checks it next.
                try? await Task.sleep(nanoseconds: UInt64(pause * 1e9))
                pause = min(pause * 2, 1)
            }
        }
    }

    /// Seconds past the leases' end a settle is still tried while the database is unreachable.
    static let settleGrace: TimeInterval = 30

    /// Extends the leases of what the worker holds every third of the lease, so a worker that is slow (a loaded
    /// machine, a slow provider) keeps them: only a worker that stopped lets its leases run out. Ends when `done`
    /// is set (its worker's loop ended: `signal` then ends the wait).
    func renewLeases(_ leases: HeldLeases, until done: StopFlag, signal: WakeSignal) async {
        while !done.isSet {
            await signal.wait(upTo: configuration.lease / 3)
            if done.isSet { return }
            let ids = leases.open
            guard !ids.isEmpty else { continue }
            let until = now().addingTimeInterval(configuration.lease)
            do {
                let held = try await queue.extend(ids, owner: configuration.owner, until: until)
                let lost = leases.extended(ids, held: held, until: until)
                if lost > 0 {
                    // Their leases ran out before this renewal (it came late) and another worker took them.
                    metrics?.leaseLost("taken", count: lost)
                    logger.warning(
                        "leases ran out before they were renewed; another worker took them",
                        metadata: [
                            "owner": .string(configuration.owner), "deliveries": .stringConvertible(lost),
                            "lease_seconds": .stringConvertible(configuration.lease),
                        ]
                    )
                }
            } catch {
                // The leases keep their old end (the database may be away): a send past it may be made again by
                // another worker, which the outcome then counts as a duplicate.
                logger.warning(
                    "could not extend the leases held",
                    metadata: ["deliveries": .stringConvertible(ids.count), "error": .string("\(error)")]
                )
            }
        }
    }
}

/// Set once: the worker claims no more and finishes what it holds.
final class StopFlag: Sendable {
    private let flag = NIOLockedValueBox(false)
    func set() { flag.withLockedValue { $0 = true } }
    var isSet: Bool { flag.withLockedValue { $0 } }
}
