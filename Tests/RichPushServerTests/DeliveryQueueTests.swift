import Foundation
import RichPushCore
import RichPushServer
import RichPushTransport
import Testing

/// The same rules for the SQLite queue, PostgreSQL's and the in-memory twin.
@Suite struct DeliveryQueueTests {
    enum Kind: String, CaseIterable, Sendable { case sqlite, memory, postgres }

    static func make(_ kind: Kind) async throws -> DeliveryQueue {
        switch kind {
        case .memory: return MemoryDeliveryQueue()
        case .sqlite:
            let path = FileManager.default.temporaryDirectory.appendingPathComponent(
                "queue-\(UUID().uuidString).sqlite"
            ).path
            return try SQLiteDeliveryQueue(path: path)
        case .postgres: return try await PostgresFixture.backend().queue
        }
    }

    let t0 = Date(timeIntervalSince1970: 1_800_000_000)

    func deliveries(
        _ n: Int,
        notification: String = "n1",
        notBefore: Date? = nil,
        expiresAt: Date? = nil
    ) -> [NewDelivery] {
        (0..<n).map {
            NewDelivery(
                notificationID: notification,
                appID: "app",
                provider: $0 % 2 == 0 ? .apns : .fcm,
                target: "token-\($0)",
                notBefore: notBefore ?? t0,
                expiresAt: expiresAt
            )
        }
    }

    /// One notification's counts per state and its deliveries a page at a time, the other notifications left out.
    @Test(arguments: Kind.allCases)
    func aNotificationIsCountedAndPagedInIdOrder(_ kind: Kind) async throws {
        let q = try await Self.make(kind)
        try await q.enqueue(deliveries(7))
        try await q.enqueue(deliveries(3, notification: "other"))
        let claimed = try await q.claim(owner: "A", limit: 2, now: t0, lease: 60)
        try await q.finish(id: claimed[0].id, owner: "A", outcome: .delivered(providerID: "x"), now: t0)
        #expect(try await q.counts(notificationID: "n1") == [.delivered: 1, .leased: 1, .queued: 5])
        #expect(try await q.counts(notificationID: "none") == [:])
        var seen: [String] = []
        var after: Int64 = 0
        while true {
            let page = try await q.deliveries(notificationID: "n1", after: after, limit: 3)
            #expect(page.count <= 3)
            guard let last = page.last else { break }
            seen += page.map(\.target.stored)
            after = last.id
        }
        #expect(seen == (0..<7).map { "token-\($0)" })
        #expect(try await q.deliveries(notificationID: "n1", after: 0, limit: 0).isEmpty)
    }

    @Test(arguments: Kind.allCases)
    func claimsDueDeliveriesOnceUnderALease(_ kind: Kind) async throws {
        let q = try await Self.make(kind)
        try await q.enqueue(deliveries(5))
        try await q.enqueue(deliveries(2, notification: "later", notBefore: t0.addingTimeInterval(60)))
        let a = try await q.claim(owner: "A", limit: 3, now: t0, lease: 120)
        let b = try await q.claim(owner: "B", limit: 10, now: t0, lease: 120)
        #expect(a.count == 3 && b.count == 2)
        #expect(Set(a.map(\.id)).isDisjoint(with: b.map(\.id)))
        #expect(a.allSatisfy { $0.state == .leased && $0.leaseOwner == "A" && $0.attempts == 1 })
        #expect(try await q.claim(owner: "C", limit: 10, now: t0, lease: 30).isEmpty)
        // The scheduled ones come due later (the leases above still hold).
        let later = try await q.claim(owner: "C", limit: 10, now: t0.addingTimeInterval(61), lease: 30)
        #expect(later.map(\.notificationID) == ["later", "later"])
    }

    @Test(arguments: Kind.allCases)
    func aDeadWorkersLeasesAreClaimedAgain(_ kind: Kind) async throws {
        let q = try await Self.make(kind)
        try await q.enqueue(deliveries(2))
        let first = try await q.claim(owner: "crashed", limit: 10, now: t0, lease: 30)
        #expect(first.count == 2)
        #expect(try await q.claim(owner: "B", limit: 10, now: t0.addingTimeInterval(29), lease: 30).isEmpty)
        let again = try await q.claim(owner: "B", limit: 10, now: t0.addingTimeInterval(31), lease: 30)
        #expect(again.count == 2 && again.allSatisfy { $0.attempts == 2 && $0.leaseOwner == "B" })
        // The crashed worker's late answer is refused; the new owner's is kept.
        #expect(
            try await q.finish(id: again[0].id, owner: "crashed", outcome: .delivered(providerID: "x"), now: t0)
                == false
        )
        #expect(
            try await q.finish(id: again[0].id, owner: "B", outcome: .delivered(providerID: "apns-1"), now: t0) == true
        )
        #expect(try await q.finish(id: again[0].id, owner: "B", outcome: .failed("twice"), now: t0) == false)
    }

    @Test(arguments: Kind.allCases)
    func outcomesAndReschedules(_ kind: Kind) async throws {
        let q = try await Self.make(kind)
        try await q.enqueue(deliveries(4))
        let c = try await q.claim(owner: "W", limit: 4, now: t0, lease: 30)
        try await q.finish(id: c[0].id, owner: "W", outcome: .delivered(providerID: "id-0"), now: t0)
        try await q.finish(id: c[1].id, owner: "W", outcome: .failed("BadDeviceToken"), now: t0)
        try await q.finish(id: c[2].id, owner: "W", outcome: .pruned("Unregistered"), now: t0)
        #expect(
            try await q.reschedule(
                id: c[3].id,
                owner: "W",
                notBefore: t0.addingTimeInterval(10),
                reason: "ServiceUnavailable",
                now: t0
            )
        )
        #expect(try await q.counts() == [.delivered: 1, .failed: 1, .pruned: 1, .queued: 1])
        let retried = try await q.claim(owner: "W", limit: 4, now: t0.addingTimeInterval(10), lease: 30)
        #expect(retried.count == 1 && retried[0].attempts == 2 && retried[0].reason == "ServiceUnavailable")
        let all = try await q.deliveries(notificationID: "n1")
        #expect(all.map(\.state) == [.delivered, .failed, .pruned, .leased])
        #expect(all[0].providerID == "id-0" && all[1].reason == "BadDeviceToken")
    }

    @Test(arguments: Kind.allCases)
    func pastTheirTimeToLiveDeliveriesExpireInsteadOfGoingOut(_ kind: Kind) async throws {
        let q = try await Self.make(kind)
        try await q.enqueue(deliveries(3, expiresAt: t0.addingTimeInterval(5)))
        let c = try await q.claim(owner: "W", limit: 1, now: t0, lease: 30)
        #expect(c.count == 1)
        #expect(try await q.claim(owner: "W", limit: 10, now: t0.addingTimeInterval(6), lease: 30).isEmpty)
        let counts = try await q.counts()
        #expect(counts[.expired] == 2 && counts[.leased] == 1)
        // The leased one expires too once its lease runs out.
        _ = try await q.claim(owner: "W2", limit: 10, now: t0.addingTimeInterval(40), lease: 30)
        #expect(try await q.counts()[.expired] == 3)
    }

    @Test(arguments: Kind.allCases)
    func concurrentWorkersNeverShareADelivery(_ kind: Kind) async throws {
        let q = try await Self.make(kind)
        try await q.enqueue(deliveries(2000))
        let claimed = try await withThrowingTaskGroup(of: [Int64].self) { g in
            for w in 0..<4 {
                g.addTask {
                    var mine: [Int64] = []
                    while true {
                        let batch = try await q.claim(owner: "w\(w)", limit: 50, now: self.t0, lease: 60)
                        if batch.isEmpty { return mine }
                        for d in batch {
                            try await q.finish(
                                id: d.id,
                                owner: "w\(w)",
                                outcome: .delivered(providerID: nil),
                                now: self.t0
                            )
                        }
                        mine += batch.map(\.id)
                    }
                }
            }
            var all: [Int64] = []
            for try await ids in g { all += ids }
            return all
        }
        #expect(claimed.count == 2000 && Set(claimed).count == 2000)
        #expect(try await q.counts() == [.delivered: 2000])
    }

    /// One app's backlog of 20,000 due deliveries ("big", app-a), enqueued in two parts.
    func backlog(_ q: any DeliveryQueue) async throws {
        for part in 0..<2 {
            try await q.enqueue(
                (0..<10_000).map {
                    NewDelivery(
                        notificationID: "big",
                        appID: "app-a",
                        provider: .apns,
                        target: .token("a-\(part)-\($0)"),
                        notBefore: t0
                    )
                }
            )
        }
    }

    /// App A queues 20,000 deliveries, then app B one: B's is in the very next claim (a claim in due order across
    /// apps took 200 of A's and left B behind all of them). Each app gets an equal share; a room of 0 leaves an app
    /// out, a smaller room caps it. (A backlog of 100 claims shows it as well as one of 500 did, without loading
    /// the suite's one PostgreSQL server for the tests beside it; the claim's cost with 100,000 queued is measured
    /// by `thePostgresClaimReadsTheSameWhateverIsQueued`, run alone.)
    @Test(arguments: Kind.allCases)
    func oneAppsBacklogNeverHidesAnotherAppsDelivery(_ kind: Kind) async throws {
        let q = try await Self.make(kind)
        try await backlog(q)
        try await q.enqueue([
            NewDelivery(
                notificationID: "small",
                appID: "app-b",
                provider: .apns,
                target: "b-1",
                notBefore: t0.addingTimeInterval(1)
            )
        ])
        let now = t0.addingTimeInterval(2)
        let first = try await q.claim(owner: "w", limit: 200, now: now, lease: 60)
        #expect(first.contains { $0.appID == "app-b" })
        #expect(first.filter { $0.appID == "app-a" }.count == 100)
        #expect(Set(first.map(\.id)).count == first.count)
        // Alone, an app takes the whole claim, in due order.
        let alone = try await q.claim(owner: "w", limit: 200, now: now, lease: 60)
        #expect(alone.count == 200 && alone.allSatisfy { $0.appID == "app-a" })
        // The rooms: none for A leaves it out; three caps it.
        try await q.enqueue([NewDelivery(notificationID: "small", appID: "app-b", provider: .apns, target: "b-2")])
        let noRoom = try await q.claim(
            owner: "w",
            limit: 200,
            now: now,
            lease: 60,
            rooms: ClaimRooms(perApp: 200, rooms: ["app-a": 0])
        )
        #expect(noRoom.map(\.target) == ["b-2"])
        let capped = try await q.claim(
            owner: "w",
            limit: 200,
            now: now,
            lease: 60,
            rooms: ClaimRooms(perApp: 3)
        )
        #expect(capped.count == 3 && capped.allSatisfy { $0.appID == "app-a" })
        let counts = try await q.counts()
        #expect(counts[.leased] == 305 && counts[.queued] == 20_002 - 305)
    }

    /// Several claimers at once over several apps' deliveries: each delivery is claimed once (on PostgreSQL the
    /// claimers lock what they take and skip what another holds, an app's next ones when its first are taken).
    @Test(arguments: Kind.allCases)
    func claimersOfSeveralAppsAtOnceStayDisjoint(_ kind: Kind) async throws {
        let q = try await Self.make(kind)
        for app in ["a", "b", "c"] {
            try await q.enqueue(
                (0..<700).map {
                    NewDelivery(
                        notificationID: app,
                        appID: app,
                        provider: .fcm,
                        target: .token("\(app)-\($0)"),
                        notBefore: t0
                    )
                }
            )
        }
        let claimed = try await withThrowingTaskGroup(of: [Int64].self) { g in
            for w in 0..<4 {
                g.addTask {
                    var mine: [Int64] = []
                    while true {
                        let batch = try await q.claim(owner: "w\(w)", limit: 40, now: self.t0, lease: 60)
                        if batch.isEmpty { return mine }
                        mine += batch.map(\.id)
                    }
                }
            }
            var all: [Int64] = []
            for try await ids in g { all += ids }
            return all
        }
        #expect(claimed.count == 2100 && Set(claimed).count == 2100)
        #expect(try await q.counts() == [.leased: 2100])
    }

    /// A release gives a claimed delivery back untried: due again at its time, its attempt not counted, its
    /// reason recorded.
    @Test(arguments: Kind.allCases)
    func aReleaseGivesTheAttemptBack(_ kind: Kind) async throws {
        let q = try await Self.make(kind)
        try await q.enqueue(deliveries(2))
        let c = try await q.claim(owner: "W", limit: 2, now: t0, lease: 30)
        let held = try await q.settle(
            [
                Settlement(id: c[0].id, .release(notBefore: t0.addingTimeInterval(5), reason: "circuit_open")),
                Settlement(id: c[1].id, .reschedule(notBefore: t0.addingTimeInterval(5), reason: "webpush_503")),
            ],
            owner: "W",
            now: t0
        )
        #expect(held == Set(c.map(\.id)))
        #expect(try await q.claim(owner: "W", limit: 2, now: t0.addingTimeInterval(4), lease: 30).isEmpty)
        let again = try await q.claim(owner: "W", limit: 2, now: t0.addingTimeInterval(5), lease: 30)
        let byID = Dictionary(uniqueKeysWithValues: again.map { ($0.id, $0) })
        #expect(byID[c[0].id]?.attempts == 1 && byID[c[0].id]?.reason == "circuit_open")
        #expect(byID[c[1].id]?.attempts == 2)
        // Another owner's release changes nothing.
        #expect(
            try await q.settle([Settlement(id: c[0].id, .release(notBefore: t0, reason: "x"))], owner: "Z", now: t0)
                .isEmpty
        )
    }

    /// The claim's choices read the due index from a point: the first app, the next one, an app's due ones (none
    /// sorts what it read), and the abandoned ones from the lease index.
    @Test func theSQLiteClaimChoosesThroughItsIndexes() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("queue-\(UUID().uuidString).sqlite")
            .path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let q = try SQLiteDeliveryQueue(path: path)
        try await q.enqueue(deliveries(50))
        let plans = try q.claimChoiceQueryPlans()
        #expect(plans.count == 4)
        // The first app: the index's first entry (a scan that stops at one row). The others: one range read each.
        #expect(plans[0].contains("COVERING INDEX deliveries_queued_by_app"), "\(plans[0])")
        #expect(!plans[0].contains("TEMP B-TREE"), "\(plans[0])")
        for plan in plans.dropFirst().prefix(2) {
            #expect(plan.contains("SEARCH") && plan.contains("COVERING INDEX deliveries_queued_by_app"), "\(plan)")
            #expect(!plan.contains("TEMP B-TREE") && !plan.contains("SCAN"), "\(plan)")
        }
        #expect(plans[3].contains("SEARCH") && plans[3].contains("deliveries_lease"), "\(plans[3])")
    }

    /// PostgreSQL's claim, measured by EXPLAIN ANALYZE: no sequential scan of the deliveries, no read of the due
    /// index across apps, and what it reads does not grow with the queue (one app with 10,000 queued, then 100,000,
    /// beside another with one).
    @Test func thePostgresClaimReadsTheSameWhateverIsQueued() async throws {
        let q = try #require(try await Self.make(.postgres) as? PostgresDeliveryQueue)
        func buffers(_ plan: String) throws -> (total: Int, seqScan: Bool) {
            let json = try JSONValue.parse(Array(plan.utf8))
            let top = try #require(json.arrayValue?.first?["Plan"])
            let hit = Int(top["Shared Hit Blocks"]?.intValue ?? 0)
            let read = Int(top["Shared Read Blocks"]?.intValue ?? 0)
            // A scan of the whole deliveries table is what must never happen; the webhook endpoints (a few rows
            // per app, empty here) may be read whole when the planner finds that cheaper.
            func scansDeliveries(_ node: JSONValue) -> Bool {
                if node["Node Type"]?.stringValue == "Seq Scan", node["Relation Name"]?.stringValue == "deliveries" {
                    return true
                }
                return (node["Plans"]?.arrayValue ?? []).contains(where: scansDeliveries)
            }
            return (hit + read, scansDeliveries(top))
        }
        var measured: [Int] = []
        try await q.enqueue([
            NewDelivery(notificationID: "small", appID: "app-b", provider: .apns, target: "b", notBefore: t0)
        ])
        for total in [10_000, 100_000] {
            var queued = try await q.counts()[.queued] ?? 0
            while queued < total + 1 {
                let n = min(10_000, total + 1 - queued)
                try await q.enqueue(
                    (0..<n).map {
                        NewDelivery(
                            notificationID: "big",
                            appID: "app-a",
                            provider: .apns,
                            target: .token("a-\(queued)-\($0)"),
                            notBefore: t0
                        )
                    }
                )
                queued += n
            }
            try await q.analyze()
            let plan = try await q.claimPlan(limit: 200, now: t0.addingTimeInterval(1), lease: 60)
            let (read, seqScan) = try buffers(plan)
            #expect(!seqScan, "\(plan)")
            // Each app's due ones through the index by app (the former due index read past other apps').
            #expect(!plan.contains("\"deliveries_due\""), "\(plan)")
            measured.append(read)
        }
        #expect(measured[1] < 4_000 && measured[1] < measured[0] * 2 + 100, "buffers read: \(measured)")
    }

    /// The entries of claimed deliveries stay at the head of their app's range of the due index, dead, until a
    /// vacuum. PostgreSQL's claim finds the apps and tests each for a due row from the end of the range, so neither
    /// steps over them: with 19,000 claimed (about 100 index pages of dead entries), only the read of the due rows
    /// themselves goes through the head.
    @Test func thePostgresClaimFindsItsAppsPastTheClaimedHead() async throws {
        let q = try #require(try await Self.make(.postgres) as? PostgresDeliveryQueue)
        try await q.enqueue([
            NewDelivery(notificationID: "small", appID: "app-b", provider: .apns, target: "b", notBefore: t0)
        ])
        try await backlog(q)
        var claimed = 0
        while claimed < 19_000 {
            claimed += try await q.claim(
                owner: "w",
                limit: 1000,
                now: t0.addingTimeInterval(1),
                lease: 600,
                rooms: .init(perApp: 1000)
            ).count
        }
        try await q.analyze()
        // Every read of the due index, with the blocks it read.
        func reads(_ node: JSONValue) -> [(backward: Bool, blocks: Int)] {
            var out: [(Bool, Int)] = []
            if node["Index Name"]?.stringValue == "deliveries_due_by_app" {
                let blocks = Int(
                    (node["Shared Hit Blocks"]?.intValue ?? 0) + (node["Shared Read Blocks"]?.intValue ?? 0)
                )
                out.append((node["Scan Direction"]?.stringValue == "Backward", blocks))
            }
            for child in node["Plans"]?.arrayValue ?? [] { out += reads(child) }
            return out
        }
        func plan(at now: Date) async throws -> (all: [(backward: Bool, blocks: Int)], text: String) {
            let plan = try await q.claimPlan(limit: 200, now: now, lease: 60)
            let json = try JSONValue.parse(Array(plan.utf8))
            return (reads(try #require(json.arrayValue?.first?["Plan"])), plan)
        }
        // Within the second of the claims, the read of the due rows starts at this node's mark: nothing is heavy.
        let marked = try await plan(at: t0.addingTimeInterval(1))
        #expect(marked.all.filter(\.backward).count >= 3, "\(marked.all)\n\(marked.text)")
        #expect(marked.all.allSatisfy { $0.blocks < 50 }, "\(marked.all)\n\(marked.text)")
        // Once the marks are a second old they are forgotten: the due read goes through the head again, the rest not.
        let lapsed = try await plan(at: t0.addingTimeInterval(2.5))
        let heavy = lapsed.all.filter { $0.blocks >= 50 }
        #expect(lapsed.all.filter(\.backward).count >= 3, "\(lapsed.all)\n\(lapsed.text)")
        #expect(heavy.count <= 1 && heavy.allSatisfy { !$0.backward }, "\(lapsed.all)")
    }

    /// A PostgreSQL backend's queue with `queued` deliveries t0, t1, … of one app, all due at `t0`, and another
    /// node's queue on the same database: what that one queues is not this node's to see.
    func queueWithAnotherNode(
        queued: Int
    ) async throws -> (PostgresBackend, PostgresDeliveryQueue, PostgresDeliveryQueue) {
        let backend = try await PostgresFixture.backend()
        let q = try #require(backend.queue as? PostgresDeliveryQueue)
        try await q.enqueue(
            (0..<queued).map {
                NewDelivery(notificationID: "n", appID: "app", provider: .apns, target: "t\($0)", notBefore: t0)
            }
        )
        return (backend, q, PostgresDeliveryQueue(database: backend.database))
    }

    /// The marks never lose a row, they only put it off: a delivery queued behind this node's mark for its app
    /// (another node's clock behind this one's, a dead node's lease given back at its old time) is claimed once the
    /// marks are a second old; one this node queues again at a time its mark has passed (a release) is claimed by
    /// the next claim.
    @Test func aRowBehindAClaimMarkIsClaimedOnceTheMarksLapse() async throws {
        let (backend, q, otherNode) = try await queueWithAnotherNode(queued: 10)
        let now = t0.addingTimeInterval(1)
        let first = try await q.claim(owner: "w", limit: 4, now: now, lease: 600)
        #expect(first.map(\.target) == ["t0", "t1", "t2", "t3"])
        // Written by a node whose clock is behind: it sorts before the mark.
        try await otherNode.enqueue([
            NewDelivery(notificationID: "n", appID: "app", provider: .apns, target: "late", notBefore: t0 - 10)
        ])
        let second = try await q.claim(owner: "w", limit: 4, now: now, lease: 600)
        #expect(second.map(\.target) == ["t4", "t5", "t6", "t7"], "the mark stands within its second")
        // Released at the first claim's time, behind the mark: the marks go, and the next claim takes it first.
        let back = try #require(first.first)
        #expect(
            try await q.settle([Settlement(id: back.id, .release(notBefore: t0, reason: "r"))], owner: "w", now: now)
                == [back.id]
        )
        let third = try await q.claim(owner: "w", limit: 3, now: now, lease: 600)
        #expect(third.map(\.target) == ["late", "t0", "t8"])
        // The last one, and nothing lost.
        let fourth = try await q.claim(owner: "w", limit: 10, now: t0.addingTimeInterval(2.5), lease: 600)
        #expect(fourth.map(\.target) == ["t9"])
        // This node's own new deliveries behind its mark (a fan-out of an older send) take the marks away at once.
        try await q.enqueue([
            NewDelivery(notificationID: "n", appID: "app", provider: .apns, target: "mine", notBefore: t0 - 5)
        ])
        let fifth = try await q.claim(owner: "w", limit: 10, now: t0.addingTimeInterval(2.5), lease: 600)
        #expect(fifth.map(\.target) == ["mine"])
        await backend.close()
    }

    /// New deliveries move back only the marks they may sort before: a send due after a mark (every send of a steady
    /// stream) keeps it, so the next claim still reads from where the last one ended; one due before it moves the
    /// mark back to its time (rows due before that still wait for the marks' turn); one whose time is not known
    /// takes the marks away. Told through the backend's event, as the intake tells it.
    @Test func newDeliveriesForgetOnlyTheMarksTheyMaySortBefore() async throws {
        let (backend, q, otherNode) = try await queueWithAnotherNode(queued: 6)
        let now = t0.addingTimeInterval(1)
        #expect(try await q.claim(owner: "w", limit: 2, now: now, lease: 600).map(\.target) == ["t0", "t1"])
        // Behind the mark, written where this node's queue does not see it: only a forgotten mark lets it be read.
        try await otherNode.enqueue([
            NewDelivery(notificationID: "n", appID: "app", provider: .apns, target: "late", notBefore: t0 - 10)
        ])
        // A send due after the mark: the mark stays.
        backend.workQueued.tell(earliest: t0.addingTimeInterval(0.5))
        #expect(try await q.claim(owner: "w", limit: 1, now: now, lease: 600).map(\.target) == ["t2"])
        // Due at the mark's own time (microseconds apart): the mark moves back to it, and the next claim reads from
        // there. The row behind that time still waits.
        try await otherNode.enqueue([
            NewDelivery(notificationID: "n", appID: "app", provider: .apns, target: "new", notBefore: t0)
        ])
        backend.workQueued.tell(earliest: t0.addingTimeInterval(0.0005))
        #expect(
            try await q.claim(owner: "w", limit: 4, now: now, lease: 600).map(\.target) == ["t3", "t4", "t5", "new"]
        )
        // Due before the row behind: the mark moves back past it.
        backend.workQueued.tell(earliest: t0 - 10)
        #expect(try await q.claim(owner: "w", limit: 1, now: now, lease: 600).map(\.target) == ["late"])
        // A time not known (an update's deliveries): every mark goes.
        try await otherNode.enqueue([
            NewDelivery(notificationID: "n", appID: "app", provider: .apns, target: "late2", notBefore: t0 - 20)
        ])
        backend.workQueued.tell()
        #expect(try await q.claim(owner: "w", limit: 1, now: now, lease: 600).map(\.target) == ["late2"])
        await backend.close()
    }

    /// The claim's updates find the taken deliveries by id: a plan through a state index reads every queued
    /// delivery on each claim (the cost of a claim then grows with the queue).
    @Test func theSQLiteClaimTouchesOnlyTheDeliveriesItTakes() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("queue-\(UUID().uuidString).sqlite")
            .path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let q = try SQLiteDeliveryQueue(path: path)
        try await q.enqueue(deliveries(50))
        let plans = try [1, 10, 200, 500, 5000].flatMap { try q.claimQueryPlans(batch: $0) }
        #expect(plans.count == 10)
        for plan in plans {
            #expect(plan.contains("INTEGER PRIMARY KEY") && !plan.contains("INDEX deliveries_"), "\(plan)")
        }
    }

    @Test func theSQLiteQueueSurvivesAReopenInWALMode() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("queue-\(UUID().uuidString).sqlite")
            .path
        do {
            let q = try SQLiteDeliveryQueue(path: path)
            #expect(try q.journalMode() == "wal")
            try await q.enqueue(deliveries(3))
            _ = try await q.claim(owner: "gone", limit: 1, now: t0, lease: 30)
        }
        let reopened = try SQLiteDeliveryQueue(path: path)
        #expect(try await reopened.counts() == [.queued: 2, .leased: 1])
        let c = try await reopened.claim(owner: "new", limit: 10, now: t0.addingTimeInterval(31), lease: 30)
        #expect(c.count == 3)
    }
}

@Suite struct RetryPolicyTests {
    let now = Date(timeIntervalSince1970: 1_800_000_000)
    let policy = RetryPolicy(baseDelay: 1, maxDelay: 900, maxAttempts: 5)

    @Test func permanentErrorsAreFinal() {
        #expect(
            policy.action(
                after: .dropToken,
                reason: "Unregistered",
                attempts: 1,
                expiresAt: nil,
                now: now,
                random: { 0.5 }
            ) == .final(.pruned("Unregistered"))
        )
        for d in [RetryDecision.never, .fixRequest, .fixCredentials] {
            #expect(
                policy.action(after: d, reason: "r", attempts: 1, expiresAt: nil, now: now, random: { 0.5 })
                    == .final(.failed("r"))
            )
        }
    }

    @Test func backoffGrowsWithJitterAndIsCapped() {
        // Full jitter: random 1.0 gives the whole exponential delay, 0 gives none.
        #expect(
            policy.action(after: .retry, reason: "r", attempts: 1, expiresAt: nil, now: now, random: { 1 })
                == .retry(at: now.addingTimeInterval(1))
        )
        #expect(
            policy.action(after: .retry, reason: "r", attempts: 4, expiresAt: nil, now: now, random: { 1 })
                == .retry(at: now.addingTimeInterval(8))
        )
        #expect(
            policy.action(after: .retry, reason: "r", attempts: 4, expiresAt: nil, now: now, random: { 0.25 })
                == .retry(at: now.addingTimeInterval(2))
        )
        let capped = RetryPolicy(baseDelay: 1, maxDelay: 10, maxAttempts: 50)
        #expect(
            capped.action(after: .retry, reason: "r", attempts: 30, expiresAt: nil, now: now, random: { 1 })
                == .retry(at: now.addingTimeInterval(10))
        )
    }

    @Test func retryAfterIsAFloorAndTTLAndAttemptsEndIt() {
        #expect(
            policy.action(after: .retryAfter(60), reason: "r", attempts: 1, expiresAt: nil, now: now, random: { 1 })
                == .retry(at: now.addingTimeInterval(60))
        )
        #expect(
            policy.action(
                after: .retry,
                reason: "r",
                attempts: 3,
                expiresAt: now.addingTimeInterval(2),
                now: now,
                random: { 1 }
            ) == .final(.expired("r"))
        )
        if case .final(let o) = policy.action(
            after: .retry,
            reason: "Shutdown",
            attempts: 5,
            expiresAt: nil,
            now: now,
            random: { 1 }
        ) {
            #expect(o.state == .failed && o.reason?.contains("gave up after 5 attempts") == true)
        } else {
            Issue.record("should give up")
        }
    }
}
