import Foundation
import RichPushCore
import RichPushServer
import Testing

/// Updates in place answer alike on every backend: versions taken in turn, what is queued of the version before
/// superseded at acceptance, the worker's verdicts (a retry of an older version superseded, a newer version held
/// while an older one to the same device is in flight), the release that does not count an attempt, replays and
/// refusals.
@Suite struct NotificationUpdateStorageTests {
    typealias Kind = StorageBackendTests.Kind

    static func update(
        _ id: String,
        root: String,
        app: String,
        key: String? = nil,
        limits: UpdateLimits = UpdateLimits()
    ) -> UpdatePlan {
        UpdatePlan(
            notification: .init(id: id, appID: app, message: ["title": "v"], response: .null, createdAt: Date()),
            rootID: root,
            idempotencyKey: key,
            expiresAt: nil,
            limits: limits
        )
    }

    /// A notification's versions are bounded in count and in rate, from what the database holds (so every node
    /// counts alike): past the count the next is refused for good; past the bucket, until it refills. A replay of
    /// an accepted update's idempotency key still answers as the first time.
    @Test(arguments: Kind.allCases)
    func versionsAreBoundedInCountAndRate(_ kind: Kind) async throws {
        let b = try await StorageBackendTests.make(kind)
        let tokens = (0..<2).map { String(format: "%064x", 0xB0B0 + $0) }
        for t in tokens { try await b.registry.upsert(Device(appID: "app", token: t, platform: .ios)) }
        for root in ["count-\(kind)", "rate-\(kind)"] {
            _ = try await b.intake.accept(StorageBackendTests.plan(root, .tokens(tokens))) { _ in .null }
        }
        // Three versions at most, the rate out of the way.
        let few = UpdateLimits(maxVersions: 3, perSecond: 1_000, burst: 1_000)
        for v in 1...3 {
            let plan = Self.update("c\(v)-\(kind)", root: "count-\(kind)", app: "app", key: "k\(v)", limits: few)
            #expect(try await b.updates.accept(plan) { Self.answer($0, $1, $2) }.version == v)
        }
        await #expect(throws: UpdateRefused.tooManyVersions(3)) {
            try await b.updates.accept(Self.update("c4-\(kind)", root: "count-\(kind)", app: "app", limits: few)) {
                Self.answer($0, $1, $2)
            }
        }
        let replay = try await b.updates.accept(
            Self.update("c9-\(kind)", root: "count-\(kind)", app: "app", key: "k2", limits: few)
        ) { Self.answer($0, $1, $2) }
        #expect(!replay.created && replay.version == 2)
        #expect(try await b.updates.family(of: "count-\(kind)")?.latest == 3)

        // Bursts of two, then one every 100 s: the third at once is refused with the wait.
        let slow = UpdateLimits(maxVersions: 100, perSecond: 0.01, burst: 2)
        for v in 1...2 {
            let plan = Self.update("r\(v)-\(kind)", root: "rate-\(kind)", app: "app", limits: slow)
            #expect(try await b.updates.accept(plan) { Self.answer($0, $1, $2) }.version == v)
        }
        do {
            _ = try await b.updates.accept(Self.update("r3-\(kind)", root: "rate-\(kind)", app: "app", limits: slow)) {
                Self.answer($0, $1, $2)
            }
            Issue.record("a third update at once was accepted")
        } catch UpdateRefused.tooFast(let wait) {
            #expect(wait > 50 && wait <= 100, "\(wait)")
        }
        #expect(try await b.updates.family(of: "rate-\(kind)")?.latest == 2)
        #expect(try await b.updates.family(of: "r3-\(kind)") == nil)
    }

    /// The bucket, replayed over creation times: a burst, then one per refill.
    @Test func theBucketReplaysTheVersionsTimes() throws {
        let t0 = Date(timeIntervalSince1970: 1_800_000_000)
        let limits = UpdateLimits(maxVersions: 100, perSecond: 2, burst: 3)
        // Root at t0, three updates at once: the bucket is empty.
        let burst = [t0, t0, t0, t0]
        #expect(throws: UpdateRefused.self) { try limits.check(latest: 3, times: burst, now: t0) }
        // Half a second later one more has refilled.
        try limits.check(latest: 3, times: burst, now: t0.addingTimeInterval(0.5))
        // Spread out at the rate, never refused; the count still is.
        let paced = (0...50).map { t0.addingTimeInterval(Double($0) * 0.5) }
        try limits.check(latest: 50, times: paced, now: t0.addingTimeInterval(25.5))
        #expect(throws: UpdateRefused.tooManyVersions(100)) {
            try limits.check(latest: 100, times: [t0], now: t0.addingTimeInterval(1000))
        }
        // Settings from outside are held to sane values (none divides by zero or never refills).
        #expect(
            UpdateLimits(maxVersions: 0, perSecond: .nan, burst: -1)
                == UpdateLimits(maxVersions: 1, perSecond: 2, burst: 1)
        )
    }

    static func answer(_ version: Int, _ queued: Int, _ superseded: Int) -> JSONValue {
        ["version": .int(Int64(version)), "queued": .int(Int64(queued)), "superseded": .int(Int64(superseded))]
    }

    @Test(arguments: Kind.allCases)
    func versionsSupersedeAndOrderAlike(_ kind: Kind) async throws {
        let b = try await StorageBackendTests.make(kind)
        let app = "app"
        let tokens = (0..<3).map { String(format: "%064x", 0xC00 + $0) }
        for t in tokens { try await b.registry.upsert(Device(appID: app, token: t, platform: .ios)) }
        _ = try await b.intake.accept(StorageBackendTests.plan("root-\(kind)", .tokens(tokens))) { _ in .null }
        let root = "root-\(kind)"
        #expect(try await b.updates.family(of: root)?.version == 0)
        #expect(try await b.updates.family(of: root)?.latest == 0)

        // One of the root's sends is in flight (a worker holds it); the other two are still queued.
        let first = try await b.queue.claim(owner: "w1", limit: 1, now: Date(), lease: 60)
        #expect(first.count == 1)
        let inFlight = try #require(first.first)

        let u1 = try await b.updates.accept(Self.update("u1-\(kind)", root: root, app: app)) { Self.answer($0, $1, $2) }
        #expect(u1.created && u1.version == 1 && u1.queued == 3 && u1.superseded == 2)
        #expect(u1.notification.response == Self.answer(1, 3, 2))
        let rootCounts = try await b.queue.counts(notificationID: root)
        #expect(rootCounts[.superseded] == 2 && rootCounts[.leased] == 1)
        let superseded = try await b.queue.deliveries(notificationID: root).filter { $0.state == .superseded }
        #expect(superseded.allSatisfy { $0.reason == "version 1" })
        #expect(try await b.updates.family(of: root)?.latest == 1)
        let f1 = try #require(try await b.updates.family(of: "u1-\(kind)"))
        #expect(f1.rootID == root && f1.version == 1 && f1.latest == 1 && f1.appID == app)

        // Version 1 to the device whose version 0 is in flight waits; to the others it goes.
        let second = try await b.queue.claim(owner: "w2", limit: 10, now: Date(), lease: 60)
        #expect(second.count == 3 && second.allSatisfy { $0.notificationID == "u1-\(kind)" })
        let verdicts = try await b.updates.verdicts(second)
        let waiting = second.filter { verdicts[$0.id] == .wait }
        #expect(waiting.map(\.target) == [inFlight.target])
        #expect(verdicts.count == 1)
        // The root's own delivery, claimed again after a retry, is superseded: version 1 exists.
        #expect(try await b.updates.verdicts([inFlight]) == [inFlight.id: .superseded(by: 1)])

        // Put back without counting the attempt; only what the owner holds.
        #expect(
            try await b.updates.release(waiting.map(\.id), owner: "someone-else", notBefore: Date(), now: Date())
                .isEmpty
        )
        let released = try await b.updates.release(waiting.map(\.id), owner: "w2", notBefore: Date(), now: Date())
        #expect(released == Set(waiting.map(\.id)))
        let back = try #require(
            try await b.queue.deliveries(notificationID: "u1-\(kind)").first { $0.id == waiting[0].id }
        )
        #expect(back.state == .queued && back.attempts == 0 && back.reason == "older_version_in_flight")

        // Version 2 supersedes what is queued of version 1 (the one put back); the two w2 holds are superseded by
        // the worker's check instead of being sent.
        let u2 = try await b.updates.accept(Self.update("u2-\(kind)", root: root, app: app, key: "k2")) {
            Self.answer($0, $1, $2)
        }
        #expect(u2.version == 2 && u2.queued == 3 && u2.superseded == 1)
        let held = second.filter { verdicts[$0.id] == nil }
        let later = try await b.updates.verdicts(held)
        #expect(held.allSatisfy { later[$0.id] == .superseded(by: 2) })

        // A replayed idempotency key answers as the first time, taking no version.
        let replay = try await b.updates.accept(Self.update("u2-again-\(kind)", root: root, app: app, key: "k2")) {
            Self.answer($0, $1, $2)
        }
        #expect(!replay.created && replay.notification.id == "u2-\(kind)" && replay.version == 2)
        #expect(replay.notification.response == Self.answer(2, 3, 1))
        #expect(try await b.updates.family(of: root)?.latest == 2)

        // A device whose token is gone is not sent the next version.
        let w3 = try await b.queue.claim(owner: "w3", limit: 10, now: Date(), lease: 60)
        let gone = try #require(w3.first { $0.notificationID == "u2-\(kind)" })
        _ = try await b.queue.finish(id: inFlight.id, owner: "w1", outcome: .pruned("Unregistered"), now: Date())
        _ = try await b.queue.finish(id: gone.id, owner: "w3", outcome: .delivered(providerID: nil), now: Date())
        let u3 = try await b.updates.accept(Self.update("u3-\(kind)", root: root, app: app)) { Self.answer($0, $1, $2) }
        #expect(u3.version == 3 && u3.queued == 2)

        // Refusals: no such root, another app's, an update named as a root.
        await #expect(throws: UpdateRefused.noRoot) {
            try await b.updates.accept(Self.update("x1-\(kind)", root: "missing", app: app)) { Self.answer($0, $1, $2) }
        }
        await #expect(throws: UpdateRefused.noRoot) {
            try await b.updates.accept(Self.update("x2-\(kind)", root: root, app: "other")) { Self.answer($0, $1, $2) }
        }
        await #expect(throws: UpdateRefused.noRoot) {
            try await b.updates.accept(Self.update("x3-\(kind)", root: "u1-\(kind)", app: app)) {
                Self.answer($0, $1, $2)
            }
        }
        #expect(try await b.updates.family(of: "missing") == nil)
    }

    /// A registry send's devices are all known only when its fan-out has run: an update waits for it.
    @Test(arguments: Kind.allCases)
    func anUpdateWaitsForItsRootsFanOut(_ kind: Kind) async throws {
        let b = try await StorageBackendTests.make(kind)
        try await StorageBackendTests.register(b)
        let root = "fan-\(kind)"
        let accepted = try await b.intake.accept(StorageBackendTests.plan(root, .tag("x"))) { _ in .null }
        #expect(accepted.fanOutPending)
        #expect(try await b.updates.family(of: root)?.fanOutPending == true)
        await #expect(throws: UpdateRefused.fanOutPending) {
            try await b.updates.accept(Self.update("fu-\(kind)", root: root, app: "app")) { Self.answer($0, $1, $2) }
        }
        #expect(try await b.intake.completeFanOut(notificationID: root) == 4)
        let u = try await b.updates.accept(Self.update("fu-\(kind)", root: root, app: "app")) {
            Self.answer($0, $1, $2)
        }
        #expect(u.version == 1 && u.queued == 4 && u.superseded == 4)
    }

    /// A notification never updated costs the worker's check one read and yields no verdict.
    @Test(arguments: Kind.allCases)
    func plainNotificationsHaveNoVerdicts(_ kind: Kind) async throws {
        let b = try await StorageBackendTests.make(kind)
        try await StorageBackendTests.register(b)
        _ = try await b.intake.accept(
            StorageBackendTests.plan("plain-\(kind)", .providerTokens(apns: [String(format: "%064x", 1)], fcm: []))
        ) { _ in .null }
        let batch = try await b.queue.claim(owner: "w", limit: 10, now: Date(), lease: 60)
        #expect(batch.count == 1)
        #expect(try await b.updates.verdicts(batch).isEmpty)
    }
}
