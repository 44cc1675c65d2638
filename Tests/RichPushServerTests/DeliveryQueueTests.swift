import Foundation
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
