import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RichPushTransport

/// Drains the queue: claims batches under a lease, sends with bounded concurrency, and records every outcome or
/// reschedules by the retry policy. Tokens the provider reports gone are handed to `prune`.
public final class DeliveryWorker: Sendable {
    public struct Configuration: Sendable {
        public var owner: String
        public var batchSize: Int
        /// Sends in flight at once (HTTP/2 bookkeeping grows with open streams: a few hundred is the sweet spot).
        public var concurrency: Int
        public var lease: TimeInterval
        /// How long to wait when nothing is due.
        public var idleWait: TimeInterval
        /// Outcomes recorded per transaction while a batch is being sent.
        public var settleEvery = 50
        public var retry: RetryPolicy
        /// The longest one send may take before the worker stops waiting for it and reschedules the delivery
        /// (reason `send_deadline`), so a send that never ends cannot hold its batch. Unless set: half the lease,
        /// and at least 30 s (the leases of a batch are extended while it runs, so a slow send on a loaded machine
        /// is waited for rather than given up and sent twice).
        public var sendDeadline: TimeInterval?

        /// ``sendDeadline`` as it applies.
        var effectiveSendDeadline: TimeInterval { sendDeadline ?? max(lease / 2, 30) }

        public init(
            owner: String = "worker-\(UUID().uuidString.prefix(8))",
            batchSize: Int = 200,
            concurrency: Int = 200,
            lease: TimeInterval = 60,
            idleWait: TimeInterval = 0.2,
            retry: RetryPolicy = RetryPolicy()
        ) {
            self.owner = owner
            self.batchSize = batchSize
            self.concurrency = concurrency
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
    /// Updates in place: asked before a batch is sent which of its deliveries a newer version superseded and which
    /// must wait for an older version's send to end (nil: no notification has versions).
    let updates: (any NotificationUpdates)?
    /// Counts per notification and minute (an app's time series); nil: not counted.
    let minutes: MinuteCounter?
    let logger: Logger
    let signal = WakeSignal()
    let deadlines: SendDeadlines

    public init(
        configuration: Configuration = .init(),
        queue: DeliveryQueue,
        sender: DeliverySender,
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
        self.metrics = metrics
        self.health = health
        self.updates = updates
        self.minutes = minutes
        self.logger = logger
        self.now = now
        self.prune = prune
        deadlines = SendDeadlines(granularity: min(0.1, max(0.001, configuration.effectiveSendDeadline) / 4))
    }

    /// Claims and processes one batch; returns how many deliveries it handled. Outcomes are recorded in groups
    /// (one transaction per `settleEvery` finished sends, and the rest at the end), then tokens reported gone are
    /// pruned. The groups bound what a crash can leave unrecorded (and so resent) to a few dozen sends.
    ///
    /// While the batch runs its leases are extended every third of the lease, so a worker that is slow (a loaded
    /// machine, a slow provider) keeps what it holds: only a worker that stopped lets its leases run out. A
    /// delivery whose lease was lost anyway is not sent.
    @discardableResult
    public func runOnce() async throws -> Int {
        let claimed = now()
        let clock = ContinuousClock.now
        let claimedBatch = try await queue.claim(
            owner: configuration.owner,
            limit: configuration.batchSize,
            now: claimed,
            lease: configuration.lease
        )
        let took = ContinuousClock.now - clock
        metrics?.claimed(seconds: Double(took.components.seconds) + Double(took.components.attoseconds) / 1e18)
        guard !claimedBatch.isEmpty else { return 0 }
        let batch = try await sortVersions(claimedBatch)
        guard !batch.isEmpty else { return claimedBatch.count }
        let leases = BatchLeases(ids: batch.map(\.id), ends: claimed.addingTimeInterval(configuration.lease))
        let renewal = Task { [queue, configuration, now, logger] in
            while !Task.isCancelled {
                // Cancelled when the batch is settled: the loop ends just below.
                try? await Task.sleep(nanoseconds: UInt64(configuration.lease / 3 * 1e9))
                if Task.isCancelled { return }
                let ids = leases.open
                let until = now().addingTimeInterval(configuration.lease)
                do {
                    let held = try await queue.extend(ids, owner: configuration.owner, until: until)
                    leases.extended(ids, held: held, until: until)
                } catch {
                    // The leases keep their old end (the database may be away): a send past it may be made again
                    // by another worker, which the outcome then counts as a duplicate.
                    logger.warning(
                        "could not extend the batch's leases",
                        metadata: ["deliveries": .stringConvertible(ids.count), "error": .string("\(error)")]
                    )
                }
            }
        }
        defer { renewal.cancel() }
        let byID = Dictionary(batch.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        var pending: [Settlement] = []
        func flush() async throws {
            guard !pending.isEmpty else { return }
            let settled = pending
            pending.removeAll(keepingCapacity: true)
            let held = try await settleWhileLeased(settled, leases: leases)
            leases.settled(settled.map(\.id))
            for s in settled where held.contains(s.id) {
                if case .finish(let o) = s.action, o.state == .pruned, let d = byID[s.id] {
                    await prune(d, o.reason ?? "")
                }
            }
        }
        // A send starts while its lease holds for one more renewal period at least.
        let margin = configuration.lease / 3
        try await withThrowingTaskGroup(of: Settlement?.self) { group in
            var next = 0
            func add() {
                guard next < batch.count else { return }
                let d = batch[next]
                next += 1
                group.addTask {
                    // Not sent when the lease is gone, or would end before the send's deadline: another worker has
                    // it, or will.
                    guard leases.mayStart(d.id, now: self.now(), margin: margin) else { return nil }
                    return await self.process(d)
                }
            }
            for _ in 0..<min(configuration.concurrency, batch.count) { add() }
            while let s = try await group.next() {
                if let s { pending.append(s) }
                add()
                if pending.count >= configuration.settleEvery { try await flush() }
            }
        }
        try await flush()
        return batch.count
    }

    /// Runs until the task is cancelled; a cancelled worker finishes its current batch first. When nothing is
    /// due it waits up to `idleWait`, or until ``wake()`` says there is new work.
    public func run() async throws {
        var failures = 0
        while !Task.isCancelled {
            // Nothing is claimed while the database is away (the probe says when it is back).
            if let health, !health.isUp {
                await withTaskCancellationHandler {
                    await signal.wait(upTo: 0.5)
                } onCancel: {
                    signal.signal()
                }
                continue
            }
            do {
                // The batch runs in a task of its own, which the worker's cancellation does not reach: its sends end
                // and their outcomes are recorded (a cancelled database write would leave them leased until the
                // lease runs out, and send them twice).
                let handled = try await Task { try await self.runOnce() }.value
                failures = 0
                if handled == 0 {
                    await withTaskCancellationHandler {
                        await signal.wait(upTo: configuration.idleWait)
                    } onCancel: {
                        signal.signal()
                    }
                }
            } catch {
                // A failed claim or settle does not stop the worker: it backs off and tries again.
                failures += 1
                logger.warning(
                    "a batch failed",
                    metadata: ["owner": .string(configuration.owner), "error": .string(String(describing: error))]
                )
                let pause = min(5, 0.1 * pow(2, Double(min(failures, 10))))
                await withTaskCancellationHandler {
                    await signal.wait(upTo: pause)
                } onCancel: {
                    signal.signal()
                }
            }
        }
    }

    /// Settles, trying again while the leases hold if the database does not answer, and for
    /// ``settleGrace`` seconds past their end while it is unreachable: a settle only changes the rows this worker
    /// still holds, so a late one is right whenever it lands, and each that lands before another worker takes its
    /// delivery (its lease having run out while the database was away) is one send fewer made twice.
    func settleWhileLeased(_ items: [Settlement], leases: BatchLeases) async throws -> Set<Int64> {
        var pause = 0.1
        while true {
            do { return try await queue.settle(items, owner: configuration.owner, now: now()) } catch {
                let limit =
                    error is DatabaseUnavailable ? leases.ends.addingTimeInterval(Self.settleGrace) : leases.ends
                guard now().addingTimeInterval(pause) < limit else { throw error }
                // Only cancellation ends the sleep early; the loop checks it next.
                try? await Task.sleep(nanoseconds: UInt64(pause * 1e9))
                pause = min(pause * 2, 1)
            }
        }
    }

    /// Seconds past the leases' end a settle is still tried while the database is unreachable.
    static let settleGrace: TimeInterval = 30

    /// The sender's answer, or a retryable `send_deadline` failure once the deadline passes. The send is
    /// cancelled then and left to end on its own; should it still reach the provider, the delivery is sent again
    /// later (at least once, as after a crash).
    func sendWithinDeadline(_ d: DeliveryRecord) async -> SendResult {
        let limit = min(max(0.001, configuration.effectiveSendDeadline), 86_400)
        let sender = self.sender
        let deadlines = self.deadlines
        let waiting = NIOLockedValueBox<CheckedContinuation<SendResult, Never>?>(nil)
        let sending = NIOLockedValueBox<Task<Void, Never>?>(nil)
        return await withCheckedContinuation { (continuation: CheckedContinuation<SendResult, Never>) in
            waiting.withLockedValue { $0 = continuation }
            let task = Task {
                // The clock starts with the send itself, not when the task was asked for: a busy process delays
                // both alike. One sweep for all the worker's sends, rather than a timer each (scheduling and
                // cancelling a timer per send cost a tenth of the node's CPU while delivering).
                let entry = deadlines.add(after: limit) {
                    guard let c = waiting.withLockedValue({ $0.take() }) else { return }
                    sending.withLockedValue { $0?.cancel() }
                    c.resume(returning: .failed(.retry, reason: "send_deadline"))
                }
                let result = await sender.send(d)
                deadlines.remove(entry)
                waiting.withLockedValue { $0.take() }?.resume(returning: result)
            }
            sending.withLockedValue { $0 = task }
        }
    }

    /// How long a delivery waits for an older version's send to the same target to end.
    static let versionWait: TimeInterval = 0.2

    /// The deliveries of `batch` to send now: of those whose notification has versions, a version older than the
    /// newest ends as superseded (never sent), and one with an older version to the same target in flight goes
    /// back to the queue for ``versionWait`` (its attempt not counted), so that no device is sent an older state
    /// after a newer one.
    func sortVersions(_ batch: [DeliveryRecord]) async throws -> [DeliveryRecord] {
        guard let updates else { return batch }
        let verdicts = try await updates.verdicts(batch)
        guard !verdicts.isEmpty else { return batch }
        var superseded: [Settlement] = []
        var waiting: [Int64] = []
        for d in batch {
            switch verdicts[d.id] {
            case .superseded(let version)?:
                metrics?.attempt(
                    app: d.appID,
                    provider: d.provider,
                    state: DeliveryState.superseded.rawValue,
                    reason: nil
                )
                minutes?.add(d.notificationID, .failed, reason: DeliveryState.superseded.rawValue)
                superseded.append(Settlement(id: d.id, .finish(.superseded(by: version))))
            case .wait?: waiting.append(d.id)
            case nil: break
            }
        }
        let t = now()
        if !superseded.isEmpty { _ = try await queue.settle(superseded, owner: configuration.owner, now: t) }
        if !waiting.isEmpty {
            _ = try await updates.release(
                waiting,
                owner: configuration.owner,
                notBefore: t.addingTimeInterval(Self.versionWait),
                now: t
            )
        }
        return batch.filter { verdicts[$0.id] == nil }
    }

    /// New deliveries were queued: an idle worker looks at once.
    public func wake() { signal.signal() }

    func process(_ d: DeliveryRecord) async -> Settlement {
        switch await sendWithinDeadline(d) {
        case .delivered(let id):
            metrics?.attempt(app: d.appID, provider: d.provider, state: "delivered", reason: nil)
            minutes?.add(d.notificationID, .delivered)
            metrics?.delivered(provider: d.provider, secondsSinceDue: now().timeIntervalSince(d.notBefore))
            return Settlement(id: d.id, .finish(.delivered(providerID: id)))
        case let .failed(decision, reason):
            switch configuration.retry.action(
                after: decision,
                reason: reason,
                attempts: d.attempts,
                expiresAt: d.expiresAt,
                now: now(),
                random: { Double.random(in: 0..<1) }
            ) {
            case .retry(let at):
                metrics?.attempt(app: d.appID, provider: d.provider, state: "retry", reason: reason)
                return Settlement(id: d.id, .reschedule(notBefore: at, reason: reason))
            case .final(let outcome):
                metrics?.attempt(app: d.appID, provider: d.provider, state: outcome.state.rawValue, reason: reason)
                minutes?.add(d.notificationID, .failed, reason: reason)
                return Settlement(id: d.id, .finish(outcome))
            }
        }
    }
}

/// The leases of one claimed batch: those not settled yet (extended while the batch runs), those lost to another
/// worker, and when they end.
final class BatchLeases: Sendable {
    private struct State {
        var open: Set<Int64>
        var lost: Set<Int64> = []
        var ends: Date
    }
    private let state: NIOLockedValueBox<State>

    init(ids: [Int64], ends: Date) { state = NIOLockedValueBox(State(open: Set(ids), ends: ends)) }

    var open: [Int64] { state.withLockedValue { Array($0.open) } }
    var ends: Date { state.withLockedValue { $0.ends } }

    func extended(_ ids: [Int64], held: Set<Int64>, until: Date) {
        state.withLockedValue { s in
            for id in ids where !held.contains(id) && s.open.contains(id) { s.lost.insert(id) }
            s.ends = until
        }
    }

    func settled(_ ids: [Int64]) { state.withLockedValue { s in for id in ids { s.open.remove(id) } } }

    /// Whether a send may start: its lease is held, and holds for `margin` more.
    func mayStart(_ id: Int64, now: Date, margin: TimeInterval) -> Bool {
        state.withLockedValue { !$0.lost.contains(id) && now.addingTimeInterval(margin) < $0.ends }
    }
}

/// Wakes a waiting worker early; a signal given while nobody waits is kept for the next wait.
final class WakeSignal: Sendable {
    private struct State {
        var waiter: CheckedContinuation<Void, Never>?
        var pending = false
        var generation = 0
    }
    private let state = NIOLockedValueBox(State())

    func signal() {
        let waiter = state.withLockedValue { s -> CheckedContinuation<Void, Never>? in
            if let w = s.waiter {
                s.waiter = nil
                return w
            }
            s.pending = true
            return nil
        }
        waiter?.resume()
    }

    func wait(upTo seconds: TimeInterval) async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let generation = state.withLockedValue { s -> Int? in
                if s.pending {
                    s.pending = false
                    return nil
                }
                s.generation += 1
                s.waiter = c
                return s.generation
            }
            guard let generation else { return c.resume() }
            Task {
                // Only cancellation ends the sleep early; the caller checks it next.
                try? await Task.sleep(nanoseconds: UInt64(max(0, seconds) * 1e9))
                let w = self.state.withLockedValue { s -> CheckedContinuation<Void, Never>? in
                    guard s.generation == generation, let w = s.waiter else { return nil }
                    s.waiter = nil
                    return w
                }
                w?.resume()
            }
        }
    }
}

/// The deadlines of a worker's sends in flight, checked by one sweep every `granularity` seconds while any is
/// registered: a deadline fires at its time or up to one granularity later, never earlier.
final class SendDeadlines: Sendable {
    private struct Entry {
        let due: NIODeadline
        let fire: @Sendable () -> Void
    }
    private struct State {
        var next: UInt64 = 0
        var entries: [UInt64: Entry] = [:]
        var sweeping = false
    }
    private let state = NIOLockedValueBox(State())
    private let granularity: TimeAmount

    init(granularity: TimeInterval) {
        self.granularity = .nanoseconds(Int64(max(0.001, min(granularity, 60)) * 1e9))
    }

    /// Registers `fire` to run once `seconds` have passed, unless removed first; returns its key.
    func add(after seconds: TimeInterval, fire: @escaping @Sendable () -> Void) -> UInt64 {
        let due = NIODeadline.now() + .nanoseconds(Int64(seconds * 1e9))
        let (key, start) = state.withLockedValue { s -> (UInt64, Bool) in
            s.next &+= 1
            s.entries[s.next] = Entry(due: due, fire: fire)
            let start = !s.sweeping
            s.sweeping = true
            return (s.next, start)
        }
        if start { scheduleSweep() }
        return key
    }

    func remove(_ key: UInt64) { state.withLockedValue { _ = $0.entries.removeValue(forKey: key) } }

    var count: Int { state.withLockedValue { $0.entries.count } }

    private func scheduleSweep() {
        MultiThreadedEventLoopGroup.singleton.next().scheduleTask(in: granularity) { self.sweep() }
    }

    private func sweep() {
        let now = NIODeadline.now()
        let (due, again) = state.withLockedValue { s -> ([Entry], Bool) in
            var due: [Entry] = []
            for (key, entry) in s.entries where entry.due <= now {
                due.append(entry)
                s.entries[key] = nil
            }
            s.sweeping = !s.entries.isEmpty
            return (due, s.sweeping)
        }
        for entry in due { entry.fire() }
        if again { scheduleSweep() }
    }
}
