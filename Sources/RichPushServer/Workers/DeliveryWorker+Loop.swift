import Foundation
import NIOConcurrencyHelpers

extension DeliveryWorker {
    /// What one run of the loop did: how many deliveries its claims handed out, and the first error it met.
    struct Served {
        var claimed = 0
        var error: (any Error)?
    }

    /// A send that ended: its settlement (nil: never sent, its lease lost or about to be).
    struct Ended: Sendable {
        var delivery: DeliveryRecord
        var settlement: Settlement?
    }

    /// A delivery whose origin had all its sends when it was claimed: it waits on the node for one, a little.
    struct Waiting {
        var delivery: DeliveryRecord
        var origin: String
        var since: Date
    }

    /// The loop's own state: one task owns it.
    struct Loop {
        var inFlight = 0
        var waiting: [Waiting] = []
        /// Outcomes not yet recorded, with their deliveries (for the pruning after).
        var pending: [(Settlement, DeliveryRecord)] = []
        var oldestPending: Date?
        var lastClaim = Date.distantPast
        /// After a claim that found nothing: no claim before this time unless new work is queued.
        var idleUntil = Date.distantPast
        /// After a failed claim: no claim before this time.
        var pausedUntil = Date.distantPast
        var claimFailures = 0
        var claimedOnce = false

        var holding: Int { inFlight + waiting.count }
    }

    /// The worker's loop: keeps sends in flight up to `concurrency`, claiming as they end, until `stop` is set (then
    /// it claims nothing more and returns once everything it holds has ended and been recorded); with `once`, after
    /// one claim. The lease renewals and the pruning of gone tokens are children of it, and so is each send (which
    /// runs in a task of its own, so that it can be left at its deadline).
    func serve(until stop: StopFlag, once: Bool) async -> Served {
        let leases = HeldLeases()
        let ended = NIOLockedValueBox<[Ended]>([])
        let done = StopFlag()
        let renewal = WakeSignal()
        var served = Served()
        await withDiscardingTaskGroup { group in
            group.addTask { await self.renewLeases(leases, until: done, signal: renewal) }
            var loop = Loop()
            while true {
                let t = now()
                let stopping = stop.isSet || (once && loop.claimedOnce)
                for e in ended.withLockedValue({ e in
                    defer { e.removeAll() }
                    return e
                }) {
                    loop.inFlight -= 1
                    if let s = e.settlement {
                        loop.pending.append((s, e.delivery))
                        loop.oldestPending = loop.oldestPending ?? t
                    } else {
                        leases.settled([e.delivery.id])
                    }
                }
                startWaiting(&loop, stopping: stopping, at: t, leases: leases, ended: ended, group: &group)
                if !loop.pending.isEmpty,
                    loop.pending.count >= configuration.settleEvery || stopping || loop.inFlight == 0
                        || t.timeIntervalSince(loop.oldestPending ?? t) >= configuration.settleDelay
                {
                    if let error = await flush(&loop, leases: leases, group: &group) { served.error = error }
                }
                if stopping && loop.holding == 0 && loop.pending.isEmpty { break }
                if !stopping, mayClaim(loop, at: t) {
                    do {
                        served.claimed += try await claim(&loop, at: t, leases: leases, ended: ended, group: &group)
                    } catch {
                        served.error = error
                        loop.claimFailures += 1
                        loop.pausedUntil = t.addingTimeInterval(
                            min(5, 0.1 * pow(2, Double(min(loop.claimFailures, 10))))
                        )
                        logger.warning(
                            "a claim failed",
                            metadata: ["owner": .string(configuration.owner), "error": .string("\(error)")]
                        )
                    }
                    loop.claimedOnce = true
                    continue
                }
                await signal.wait(upTo: nextTurn(loop, stopping: stopping, at: t))
            }
            // The renewals end; the group then waits for the last pruning.
            done.set()
            renewal.signal()
        }
        return served
    }

    /// Whether to claim now: there is room, the database is up, and either new work was queued, nothing is held,
    /// enough slots are free for a claim of its own, or the last claim is `idleWait` old; never within `idleWait`
    /// of a claim that found nothing (unless new work came) or while a failed claim's pause runs.
    func mayClaim(_ loop: Loop, at t: Date) -> Bool {
        let free = configuration.concurrency - loop.holding
        guard free > 0, t >= loop.pausedUntil else { return false }
        if let health, !health.isUp { return false }
        let woken = self.woken.withLockedValue { $0 }
        if !woken && t < loop.idleUntil { return false }
        return woken || loop.holding == 0 || free >= configuration.claimThreshold
            || t.timeIntervalSince(loop.lastClaim) >= configuration.idleWait
    }

    /// How long the loop may sleep when it has nothing to do now: until the oldest outcome is due to be recorded,
    /// the oldest waiting delivery has waited long enough, a claim may be made again, or `idleWait`.
    func nextTurn(_ loop: Loop, stopping: Bool, at t: Date) -> TimeInterval {
        var wait = configuration.idleWait
        if let oldest = loop.oldestPending {
            wait = min(wait, oldest.addingTimeInterval(configuration.settleDelay).timeIntervalSince(t))
        }
        if let first = loop.waiting.first {
            // Waiting deliveries are looked at again when a send ends (a signal) and when the first has waited out.
            wait = min(wait, first.since.addingTimeInterval(admission.limits.originWait).timeIntervalSince(t))
        }
        if !stopping, t < loop.pausedUntil { wait = min(wait, loop.pausedUntil.timeIntervalSince(t)) }
        if let health, !health.isUp { wait = min(wait, 0.5) }
        return max(0.001, wait)
    }

    /// Claims up to the free slots, sorts the versions out, counts the rest for their apps and starts or queues
    /// each by what the admission says. Returns how many the claim handed out.
    func claim(
        _ loop: inout Loop,
        at t: Date,
        leases: HeldLeases,
        ended: NIOLockedValueBox<[Ended]>,
        group: inout DiscardingTaskGroup
    ) async throws -> Int {
        woken.withLockedValue { $0 = false }
        let limit = min(configuration.concurrency - loop.holding, configuration.batchSize)
        let clock = ContinuousClock.now
        let claimed = try await queue.claim(
            owner: configuration.owner,
            limit: limit,
            now: t,
            lease: configuration.lease,
            rooms: admission.rooms()
        )
        let took = ContinuousClock.now - clock
        metrics?.claimed(seconds: Double(took.components.seconds) + Double(took.components.attoseconds) / 1e18)
        loop.lastClaim = t
        loop.claimFailures = 0
        guard !claimed.isEmpty else {
            loop.idleUntil = t.addingTimeInterval(configuration.idleWait)
            return 0
        }
        let batch = try await sortVersions(claimed)
        leases.add(batch.map(\.id), until: t.addingTimeInterval(configuration.lease))
        let over = admission.hold(batch)
        let holding = loop.holding
        defer {
            // Everything this claim took went back (an open circuit's backlog): the next claim waits as after an empty
            // one (or for new work), so a dead service's queue is not rewritten as fast as it can be claimed.
            if loop.holding == holding { loop.idleUntil = t.addingTimeInterval(configuration.idleWait) }
        }
        for d in batch {
            if over.contains(d.id) {
                // Another worker of this node took the app's last room at the same time: back, briefly.
                defer_(&loop, d, until: t.addingTimeInterval(jittered(admission.limits.busyDelay)), "app_busy", at: t)
                continue
            }
            let origin = await sender.origin(of: d)
            admit(&loop, d, origin: origin, since: t, at: t, leases: leases, ended: ended, group: &group)
        }
        return claimed.count
    }

    /// Starts what waits for a busy origin once it has room, in the order it came; gives back what waited
    /// `originWait` (and everything, once stopping).
    func startWaiting(
        _ loop: inout Loop,
        stopping: Bool,
        at t: Date,
        leases: HeldLeases,
        ended: NIOLockedValueBox<[Ended]>,
        group: inout DiscardingTaskGroup
    ) {
        guard !loop.waiting.isEmpty else { return }
        let waiting = loop.waiting
        loop.waiting.removeAll(keepingCapacity: true)
        for w in waiting {
            if stopping {
                // Due at once: another worker (or this one's successor) sends it.
                defer_(&loop, w.delivery, until: t, "origin_busy", at: t)
                admission.unhold(app: w.delivery.appID)
            } else if t.timeIntervalSince(w.since) >= admission.limits.originWait {
                defer_(
                    &loop,
                    w.delivery,
                    until: t.addingTimeInterval(jittered(admission.limits.busyDelay)),
                    "origin_busy",
                    at: t
                )
                admission.unhold(app: w.delivery.appID)
            } else {
                admit(
                    &loop,
                    w.delivery,
                    origin: w.origin,
                    since: w.since,
                    at: t,
                    leases: leases,
                    ended: ended,
                    group: &group
                )
            }
        }
    }

    /// Asks the admission about one held delivery: sends it, queues it to wait for its origin, or gives it back.
    func admit(
        _ loop: inout Loop,
        _ d: DeliveryRecord,
        origin: String?,
        since: Date,
        at t: Date,
        leases: HeldLeases,
        ended: NIOLockedValueBox<[Ended]>,
        group: inout DiscardingTaskGroup
    ) {
        switch admission.admit(app: d.appID, origin: origin, now: t) {
        case .send(let probe):
            loop.inFlight += 1
            start(d, origin: origin, probe: probe, leases: leases, ended: ended, group: &group)
        case let .wait(until, reason):
            defer_(&loop, d, until: until, reason, at: t)
            admission.unhold(app: d.appID)
        case .busy:
            loop.waiting.append(Waiting(delivery: d, origin: origin ?? "", since: since))
        }
    }

    /// One send as a child of the loop: not made when its lease is gone or would end before the send's deadline
    /// (another worker has it, or will); its end is told to the admission and the loop.
    func start(
        _ d: DeliveryRecord,
        origin: String?,
        probe: Bool,
        leases: HeldLeases,
        ended: NIOLockedValueBox<[Ended]>,
        group: inout DiscardingTaskGroup
    ) {
        // A send starts while its lease holds for one more renewal period at least.
        let margin = configuration.lease / 3
        group.addTask {
            var settlement: Settlement?
            if leases.mayStart(d.id, now: self.now(), margin: margin) {
                let (s, result) = await self.process(d)
                settlement = s
                var reason: String?
                if case .failed(_, let r) = result { reason = r }
                self.admission.finished(
                    app: d.appID,
                    origin: origin,
                    probe: probe,
                    signal: DeliveryAdmission.signal(of: result),
                    reason: reason,
                    now: self.now()
                )
            } else {
                self.admission.finished(
                    app: d.appID,
                    origin: origin,
                    probe: probe,
                    signal: .neutral,
                    reason: nil,
                    now: self.now()
                )
            }
            self.admission.unhold(app: d.appID)
            ended.withLockedValue { $0.append(Ended(delivery: d, settlement: settlement)) }
            self.signal.signal()
        }
    }

    /// Gives a held delivery back to the queue untried, due at `until`, its attempt not counted.
    func defer_(_ loop: inout Loop, _ d: DeliveryRecord, until: Date, _ reason: String, at t: Date) {
        metrics?.deferred(reason: reason)
        loop.pending.append((Settlement(id: d.id, .release(notBefore: until, reason: reason)), d))
        loop.oldestPending = loop.oldestPending ?? t
    }

    /// `seconds`, give or take half of it: what goes back at once does not all come back at once.
    func jittered(_ seconds: TimeInterval) -> TimeInterval { seconds * Double.random(in: 0.5...1.5) }

    /// Records the pending outcomes in one transaction (a settle that cannot be made is tried again while the
    /// leases hold), then prunes the tokens reported gone, in a child. Returns the error of a settle that could
    /// not be made: those deliveries are then let go (their leases run out and they are claimed again).
    func flush(_ loop: inout Loop, leases: HeldLeases, group: inout DiscardingTaskGroup) async -> (any Error)? {
        let items = loop.pending
        loop.pending.removeAll(keepingCapacity: true)
        loop.oldestPending = nil
        let settlements = items.map(\.0)
        defer { leases.settled(settlements.map(\.id)) }
        do {
            let held = try await settleWhileLeased(settlements, leases: leases)
            let gone = items.compactMap { s, d -> (DeliveryRecord, String)? in
                guard held.contains(s.id), case .finish(let o) = s.action, o.state == .pruned else { return nil }
                return (d, o.reason ?? "")
            }
            if !gone.isEmpty {
                group.addTask { for (d, reason) in gone { await self.prune(d, reason) } }
            }
            return nil
        } catch {
            logger.warning(
                "could not record outcomes",
                metadata: [
                    "owner": .string(configuration.owner), "deliveries": .stringConvertible(items.count),
                    "error": .string("\(error)"),
                ]
            )
            return error
        }
    }
}
