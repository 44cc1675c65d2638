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

    /// What the loop's children report: sends that ended, a claim's result, a settle's end. `wakeAfter` says how
    /// many ended sends wake the loop: before it sleeps the loop says after how many ends it would have something to
    /// do (slots to refill from its reserve, a claim's worth of room, a settle's worth of outcomes, nothing left in
    /// flight); a claim's or a settle's end always wakes it.
    struct Inbox: Sendable {
        var ended: [Ended] = []
        var claimed: Result<Claimed, any Error>?
        var settled: [(any Error)?] = []
        var wakeAfter = 1

        /// Adds an ended send; whether the loop is to be woken for it.
        mutating func add(_ e: Ended) -> Bool {
            ended.append(e)
            return ended.count == wakeAfter
        }
    }

    /// A claim's deliveries, each with its push service origin, and those over their app's room (another worker
    /// of this node took it at the same time).
    struct Claimed: Sendable {
        var deliveries: [(DeliveryRecord, String?)] = []
        /// How many the claim handed out (superseded versions and those sent back to wait included).
        var count = 0
        var over: Set<Int64> = []
        var at: Date
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
        /// Claimed, leased and counted for their app, not yet asked to go: the slots of sends that end are filled
        /// from here without waiting for the database.
        var ready: [(DeliveryRecord, String?)] = []
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
        /// A claim, or a settle, runs in a child of the loop (one of each at a time).
        var claiming = false
        var settling = false

        var holding: Int { inFlight + waiting.count + ready.count }
    }

    /// The worker's loop: keeps sends in flight up to `concurrency`, with up to ``reserve`` more claimed and ready
    /// to replace those that end, until `stop` is set (then it claims nothing more, sends what it has claimed, and
    /// returns once everything it holds has ended and been recorded); with `once`, after one claim
    /// (whose deliveries are all sent). Claims and settles run in children of the loop, beside the sends, so a
    /// slow database answer does not leave slots empty; the lease renewals and the pruning of gone tokens are
    /// children too, and so is each send (which runs in a task of its own, so that it can be left at its deadline).
    func serve(until stop: StopFlag, once: Bool) async -> Served {
        let leases = HeldLeases()
        let inbox = NIOLockedValueBox(Inbox())
        let done = StopFlag()
        let renewal = WakeSignal()
        var served = Served()
        await withDiscardingTaskGroup { group in
            group.addTask { await self.renewLeases(leases, until: done, signal: renewal) }
            var loop = Loop()
            while true {
                let t = now()
                // Cancellation is the hard stop: what is not started goes back, the sends are cancelled (their
                // children), and what cannot be recorded now is claimed again when its lease runs out.
                let cancelled = Task.isCancelled
                let stopping = stop.isSet || cancelled || (once && loop.claimedOnce)
                let (ended, claimed, settled) = inbox.withLockedValue { i in
                    defer {
                        i.ended.removeAll(keepingCapacity: true)
                        i.claimed = nil
                        i.settled.removeAll()
                    }
                    return (i.ended, i.claimed, i.settled)
                }
                for e in ended {
                    loop.inFlight -= 1
                    if let s = e.settlement {
                        loop.pending.append((s, e.delivery))
                        loop.oldestPending = loop.oldestPending ?? t
                    } else {
                        leases.settled([e.delivery.id])
                    }
                }
                for error in settled {
                    loop.settling = false
                    if let error { served.error = error }
                }
                if let claimed { took(claimed, &loop, served: &served, at: t) }
                startWaiting(&loop, stopping: stopping, at: t, leases: leases, inbox: inbox, group: &group)
                // A stop sends what is claimed (a reserve of half a claim at most); only cancellation gives it back.
                fill(&loop, givingBack: cancelled, at: t, leases: leases, inbox: inbox, group: &group)
                if !loop.settling, !loop.pending.isEmpty,
                    loop.pending.count >= configuration.settleEvery || stopping || loop.inFlight == 0
                        || t.timeIntervalSince(loop.oldestPending ?? t) >= configuration.settleDelay
                {
                    flush(&loop, leases: leases, inbox: inbox, group: &group)
                }
                if stopping && loop.holding == 0 && loop.pending.isEmpty && !loop.claiming && !loop.settling {
                    break
                }
                if !stopping, !loop.claiming, mayClaim(loop, at: t) {
                    claim(&loop, at: t, leases: leases, inbox: inbox, group: &group)
                    loop.claimedOnce = true
                }
                let n = wakeAfter(loop, stopping: stopping)
                if inbox.withLockedValue({ i in
                    i.wakeAfter = n
                    return i.ended.count >= n || i.claimed != nil || !i.settled.isEmpty
                }) {
                    continue
                }
                // Cancellation wakes a loop that waits; once cancelled, the loop waits for its children's signals
                // (a wait that cancellation ends at once would spin until the last send ended).
                if cancelled {
                    await signal.wait(upTo: nextTurn(loop, stopping: stopping, at: t))
                } else {
                    await signal.waitUnlessCancelled(upTo: nextTurn(loop, stopping: stopping, at: t))
                }
            }
            // The renewals end; the group then waits for the last pruning.
            done.set()
            renewal.signal()
        }
        return served
    }

    /// Claimed deliveries a worker keeps ready beside its sends in flight: half of what one claim takes at most.
    var reserve: Int { configuration.claimThreshold }

    /// Whether to claim now: there is room (in flight and in reserve), the database is up, and either new work was
    /// queued, nothing is held, enough room is free for a claim of its own, or the last claim is `idleWait` old;
    /// never within `idleWait` of a claim that found nothing (unless new work came) or while a failed claim's pause
    /// runs.
    func mayClaim(_ loop: Loop, at t: Date) -> Bool {
        let free = configuration.concurrency + reserve - loop.holding
        guard free > 0, t >= loop.pausedUntil else { return false }
        if let health, !health.isUp { return false }
        let woken = self.woken.withLockedValue { $0 }
        if !woken && t < loop.idleUntil { return false }
        // New work is claimed at once by a worker with nothing held, and otherwise once a claim's worth of room is
        // free or `claimGap` has passed: a stream of one-delivery sends is taken in claims of many.
        let since = t.timeIntervalSince(loop.lastClaim)
        return loop.holding == 0 || free >= configuration.claimThreshold
            || since >= (woken ? Self.claimGap : configuration.idleWait)
    }

    /// The shortest time between two claims of a worker with sends in flight and new work queued.
    static let claimGap: TimeInterval = 0.02

    /// After how many ended sends the loop has something to do: slots to refill from the reserve (a tenth of the
    /// sends at a time), a claim's worth of room, a settle's worth of outcomes, nothing left in flight, or (a
    /// delivery waiting for its origin, stopping) at once.
    func wakeAfter(_ loop: Loop, stopping: Bool) -> Int {
        if stopping || !loop.waiting.isEmpty { return 1 }
        let free = configuration.concurrency + reserve - loop.holding
        let forClaim = loop.claiming ? Int.max : configuration.claimThreshold - free
        let forSettle = loop.settling ? Int.max : configuration.settleEvery - loop.pending.count
        let forRefill = loop.ready.isEmpty ? Int.max : max(1, configuration.concurrency / 10)
        return max(1, min(loop.inFlight, forSettle, forRefill, forClaim > 0 ? forClaim : Int.max))
    }

    /// How long the loop may sleep when it has nothing to do now: until the oldest outcome is due to be recorded,
    /// the oldest waiting delivery has waited long enough, a claim may be made again, or `idleWait`.
    func nextTurn(_ loop: Loop, stopping: Bool, at t: Date) -> TimeInterval {
        var wait = configuration.idleWait
        // Sends that ended without waking the loop are recorded within `settleDelay`, as those it was told of.
        if loop.inFlight > 0 { wait = min(wait, configuration.settleDelay) }
        if let oldest = loop.oldestPending, !loop.settling {
            wait = min(wait, oldest.addingTimeInterval(configuration.settleDelay).timeIntervalSince(t))
        }
        if let first = loop.waiting.first {
            // Waiting deliveries are looked at again when a send ends (a signal) and when the first has waited out.
            wait = min(wait, first.since.addingTimeInterval(admission.limits.originWait).timeIntervalSince(t))
        }
        if !stopping, t < loop.pausedUntil { wait = min(wait, loop.pausedUntil.timeIntervalSince(t)) }
        // New work waits for the claim gap to pass (see ``mayClaim(_:at:)``).
        if !stopping, !loop.claiming, loop.holding < configuration.concurrency + reserve, woken.withLockedValue({ $0 })
        {
            wait = min(wait, loop.lastClaim.addingTimeInterval(Self.claimGap).timeIntervalSince(t))
        }
        if let health, !health.isUp { wait = min(wait, 0.5) }
        return max(0.001, wait)
    }

    /// Claims up to the free room in a child of the loop: sorts the versions out, counts the rest for their apps and
    /// finds each one's origin; the result goes to the inbox.
    func claim(
        _ loop: inout Loop,
        at t: Date,
        leases: HeldLeases,
        inbox: NIOLockedValueBox<Inbox>,
        group: inout DiscardingTaskGroup
    ) {
        woken.withLockedValue { $0 = false }
        loop.claiming = true
        loop.lastClaim = t
        let limit = min(configuration.concurrency + reserve - loop.holding, configuration.batchSize)
        group.addTask {
            let result: Result<Claimed, any Error>
            do {
                // The rooms this claim may take are set aside until it is counted, so two claims at once do not
                // both take an app's last room (and give the surplus back).
                let rooms = self.admission.setAside(limit)
                let claimed: [DeliveryRecord]
                // The claim's own time, not the loop's: on a loaded machine this child may start seconds after the
                // loop decided to claim, and leases ending at that older time would be short from the start (another
                // node takes them back while this one still sends).
                let at = self.now()
                do {
                    let clock = ContinuousClock.now
                    claimed = try await self.queue.claim(
                        owner: self.configuration.owner,
                        limit: limit,
                        now: at,
                        lease: self.configuration.lease,
                        rooms: rooms
                    )
                    let took = ContinuousClock.now - clock
                    self.metrics?.claimed(
                        seconds: Double(took.components.seconds) + Double(took.components.attoseconds) / 1e18
                    )
                } catch {
                    _ = self.admission.hold([], setAside: limit)
                    throw error
                }
                let over = self.admission.hold(claimed, setAside: limit)
                var c = Claimed(count: claimed.count, over: over, at: t)
                if !claimed.isEmpty {
                    let batch: [DeliveryRecord]
                    do { batch = try await self.sortVersions(claimed) } catch {
                        for d in claimed where !over.contains(d.id) { self.admission.unhold(app: d.appID) }
                        throw error
                    }
                    // Superseded versions, and those sent back to wait for an older one, leave their app's room.
                    let kept = Set(batch.map(\.id))
                    for d in claimed where !kept.contains(d.id) && !over.contains(d.id) {
                        self.admission.unhold(app: d.appID)
                    }
                    leases.add(batch.map(\.id), until: at.addingTimeInterval(self.configuration.lease))
                    for d in batch { c.deliveries.append((d, await self.sender.origin(of: d))) }
                }
                result = .success(c)
            } catch {
                result = .failure(error)
            }
            inbox.withLockedValue { $0.claimed = result }
            self.signal.signal()
        }
    }

    /// Takes a claim's deliveries into the reserve (those over their app's room go back, briefly); after a failed
    /// claim, pauses the next (0.2 s, doubled by each failure in a row up to 5 s).
    func took(_ claimed: Result<Claimed, any Error>, _ loop: inout Loop, served: inout Served, at t: Date) {
        loop.claiming = false
        let c: Claimed
        switch claimed {
        case .success(let value): c = value
        case .failure(let error):
            served.error = error
            loop.claimFailures += 1
            loop.pausedUntil = t.addingTimeInterval(min(5, 0.1 * pow(2, Double(min(loop.claimFailures, 10)))))
            logger.warning(
                "a claim failed",
                metadata: ["owner": .string(configuration.owner), "error": .string("\(error)")]
            )
            return
        }
        served.claimed += c.count
        loop.claimFailures = 0
        guard c.count > 0 else {
            loop.idleUntil = t.addingTimeInterval(configuration.idleWait)
            return
        }
        for (d, origin) in c.deliveries {
            if c.over.contains(d.id) {
                // Another worker of this node took the app's last room at the same time: back, briefly.
                defer_(&loop, d, until: t.addingTimeInterval(jittered(admission.limits.busyDelay)), "app_busy", at: t)
            } else {
                loop.ready.append((d, origin))
            }
        }
    }

    /// Asks the admission about ready deliveries, in the order they were claimed, while slots are free; with
    /// `givingBack` (the worker cancelled) gives them all back untried, due at once.
    func fill(
        _ loop: inout Loop,
        givingBack: Bool,
        at t: Date,
        leases: HeldLeases,
        inbox: NIOLockedValueBox<Inbox>,
        group: inout DiscardingTaskGroup
    ) {
        guard !loop.ready.isEmpty else { return }
        let before = loop.holding
        var taken = 0
        for (d, origin) in loop.ready {
            if givingBack {
                defer_(&loop, d, until: t, "stopping", at: t)
                admission.unhold(app: d.appID)
            } else if loop.inFlight + loop.waiting.count < configuration.concurrency {
                admit(&loop, d, origin: origin, since: t, at: t, leases: leases, inbox: inbox, group: &group)
            } else {
                break
            }
            taken += 1
        }
        loop.ready.removeFirst(taken)
        // Everything went back (an open circuit's backlog): the next claim waits as after an empty one (or for new
        // work), so a dead service's queue is not rewritten as fast as it can be claimed.
        if taken > 0, loop.holding == before - taken {
            loop.idleUntil = t.addingTimeInterval(configuration.idleWait)
        }
    }

    /// Starts what waits for a busy origin once it has room, in the order it came; gives back what waited
    /// `originWait` (and everything, once stopping).
    func startWaiting(
        _ loop: inout Loop,
        stopping: Bool,
        at t: Date,
        leases: HeldLeases,
        inbox: NIOLockedValueBox<Inbox>,
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
                    inbox: inbox,
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
        inbox: NIOLockedValueBox<Inbox>,
        group: inout DiscardingTaskGroup
    ) {
        switch admission.admit(app: d.appID, origin: origin, now: t) {
        case .send(let probe):
            loop.inFlight += 1
            start(d, origin: origin, probe: probe, leases: leases, inbox: inbox, group: &group)
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
        inbox: NIOLockedValueBox<Inbox>,
        group: inout DiscardingTaskGroup
    ) {
        // A send starts while its lease holds for one more renewal period at least.
        let margin = configuration.lease / 3
        group.addTask {
            var settlement: Settlement?
            let verdict = leases.mayStart(d.id, now: self.now(), margin: margin)
            if verdict == .go {
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
                // Held too long on this node (a slow node, a starved one, or a database that renewed late): another
                // node sends it, or will once the lease ends.
                self.metrics?.leaseLost(verdict.rawValue)
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
            if inbox.withLockedValue({ $0.add(Ended(delivery: d, settlement: settlement)) }) { self.signal.signal() }
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

    /// Records the pending outcomes in one transaction, in a child of the loop (a settle that cannot be made is tried
    /// again while the leases hold), then prunes the tokens reported gone. Its end goes to the inbox, with the error
    /// of a settle that could not be made: those deliveries are then let go (their leases run out and they are
    /// claimed again).
    func flush(
        _ loop: inout Loop,
        leases: HeldLeases,
        inbox: NIOLockedValueBox<Inbox>,
        group: inout DiscardingTaskGroup
    ) {
        let items = loop.pending
        loop.pending.removeAll(keepingCapacity: true)
        loop.oldestPending = nil
        loop.settling = true
        group.addTask {
            let settlements = items.map(\.0)
            var gone: [(DeliveryRecord, String)] = []
            var failure: (any Error)?
            do {
                let held = try await self.settleWhileLeased(settlements, leases: leases)
                gone = items.compactMap { s, d -> (DeliveryRecord, String)? in
                    guard held.contains(s.id), case .finish(let o) = s.action, o.state == .pruned else { return nil }
                    return (d, o.reason ?? "")
                }
            } catch {
                self.logger.warning(
                    "could not record outcomes",
                    metadata: [
                        "owner": .string(self.configuration.owner), "deliveries": .stringConvertible(items.count),
                        "error": .string("\(error)"),
                    ]
                )
                failure = error
            }
            leases.settled(settlements.map(\.id))
            inbox.withLockedValue { $0.settled.append(failure) }
            self.signal.signal()
            for (d, reason) in gone { await self.prune(d, reason) }
        }
    }
}
