import Crypto
import Foundation
import NIOConcurrencyHelpers
import RichPushCore
import RichPushServer
import Testing

/// One conformance suite for every backend: the in-memory twin and PostgreSQL must answer as SQLite does.
@Suite struct StorageBackendTests {
    enum Kind: String, CaseIterable, Sendable { case sqlite, memory, postgres }

    static func make(_ kind: Kind) async throws -> any StorageBackend {
        switch kind {
        case .memory: return MemoryBackend()
        case .sqlite:
            return try SQLiteBackend(
                path: FileManager.default.temporaryDirectory.appendingPathComponent(
                    "backend-\(UUID().uuidString).sqlite"
                ).path
            )
        case .postgres: return try await PostgresFixture.backend()
        }
    }

    static func plan(_ id: String, _ audience: Audience, key: String? = nil, spread: TimeInterval = 0) -> AcceptPlan {
        AcceptPlan(
            notification: .init(id: id, appID: "app", message: ["title": "t"], response: .null, createdAt: Date()),
            idempotencyKey: key,
            audience: audience,
            notBefore: Date(),
            expiresAt: nil,
            spread: spread
        )
    }

    static func register(_ backend: any StorageBackend) async throws {
        for i in 1...3 {
            try await backend.registry.upsert(
                Device(appID: "app", token: String(format: "%064x", i), platform: .ios, tags: ["x"])
            )
        }
        for i in 1...2 {
            try await backend.registry.upsert(
                Device(appID: "app", token: "android-\(i)", platform: .android, tags: i == 1 ? ["x"] : [])
            )
        }
    }

    /// Live Activity tokens: registered, re-registered (moved), chosen by activity id or by type and user, removed,
    /// and activity tokens swept by age, the same on every backend.
    @Test(arguments: Kind.allCases)
    func liveTokensAnswerAlike(_ kind: Kind) async throws {
        let b = try await Self.make(kind)
        let app = "live-\(UUID().uuidString.prefix(8))"
        let old = Date().addingTimeInterval(-13 * 3600)
        let t = (0..<6).map { String(format: "%064x", 0xB00 + $0) }
        let store = b.liveTokens
        try await store.register(
            LiveToken(appID: app, token: t[0], kind: .pushToStart, activityType: "Score", userID: "u1")
        )
        try await store.register(
            LiveToken(appID: app, token: t[1], kind: .pushToStart, activityType: "Score", userID: "u2")
        )
        try await store.register(LiveToken(appID: app, token: t[2], kind: .pushToStart, activityType: "Order"))
        try await store.register(
            LiveToken(appID: app, token: t[3], kind: .activity, activityType: "Score", activityID: "m7", updatedAt: old)
        )
        try await store.register(
            LiveToken(appID: app, token: t[4], kind: .activity, activityType: "Score", activityID: "m7")
        )
        try await store.register(
            LiveToken(appID: "other", token: t[5], kind: .activity, activityType: "Score", activityID: "m7")
        )
        #expect(
            try await store.tokens(appID: app, audience: .pushToStart(type: "Score", userID: nil), limit: 10) == [
                t[0], t[1],
            ]
        )
        #expect(
            try await store.tokens(appID: app, audience: .pushToStart(type: "Score", userID: "u2"), limit: 10) == [t[1]]
        )
        // t[3] was registered 13 hours ago, past an update token's life: a send leaves it out (the sweep takes it).
        #expect(try await store.tokens(appID: app, audience: .activity("m7"), limit: 10) == [t[4]])
        #expect(try await store.tokens(appID: app, audience: .activity("m7"), limit: 1) == [t[4]])
        // Registered again, a token says what it says now: here it moves to another activity.
        try await store.register(
            LiveToken(appID: app, token: t[4], kind: .activity, activityType: "Score", activityID: "m8")
        )
        #expect(try await store.tokens(appID: app, audience: .activity("m8"), limit: 10) == [t[4]])
        #expect(try await store.tokens(appID: app, audience: .activity("m7"), limit: 10).isEmpty)
        // Registered again unchanged within the hour, the old row stays as it was: here it keeps its old time, so
        // the sweep below still takes it.
        try await store.register(
            LiveToken(
                appID: app,
                token: t[3],
                kind: .activity,
                activityType: "Score",
                activityID: "m7",
                updatedAt: old.addingTimeInterval(600)
            )
        )
        #expect(try await store.remove(appID: app, token: t[1]))
        #expect(try await !store.remove(appID: app, token: t[1]))
        // The sweep takes activity tokens older than the cutoff, never push-to-start tokens.
        let swept = try await store.sweepActivityTokens(before: Date().addingTimeInterval(-12 * 3600), limit: 1000)
        #expect(swept >= 1)
        #expect(try await store.tokens(appID: app, audience: .activity("m7"), limit: 10).isEmpty)
        #expect(try await store.tokens(appID: app, audience: .activity("m8"), limit: 10) == [t[4]])
        #expect(
            try await store.tokens(appID: app, audience: .pushToStart(type: "Score", userID: nil), limit: 10) == [t[0]]
        )
        #expect(try await store.tokens(appID: "other", audience: .activity("m7"), limit: 10) == [t[5]])
        await b.close()
    }

    /// Several activities' update tokens read at once: by activity, in token order, the stale and other apps' left
    /// out, at most one more than `limit` in all (that one tells the caller the activities have too many).
    @Test(arguments: Kind.allCases)
    func activityTokensAreReadForManyActivitiesAtOnce(_ kind: Kind) async throws {
        let b = try await Self.make(kind)
        let app = "batch-\(UUID().uuidString.prefix(8))"
        let t = (0..<7).map { String(format: "%064x", 0xC00 + $0) }
        let store = b.liveTokens
        func activity(_ token: String, _ id: String, app: String? = nil, at: Date = Date()) async throws {
            try await store.register(
                LiveToken(
                    appID: app ?? "",
                    token: token,
                    kind: .activity,
                    activityType: "Order",
                    activityID: id,
                    updatedAt: at
                )
            )
        }
        try await activity(t[1], "a", app: app)
        try await activity(t[0], "a", app: app)
        try await activity(t[2], "b", app: app)
        try await activity(t[3], "b", app: app)
        try await activity(t[4], "b", app: app)
        try await activity(t[5], "c", app: app, at: Date().addingTimeInterval(-13 * 3600))
        try await activity(t[6], "a", app: "other-\(app)")
        try await store.register(
            LiveToken(appID: app, token: String(format: "%064x", 0xCFF), kind: .pushToStart, activityType: "Order")
        )
        let read = try await store.activityTokens(appID: app, activityIDs: ["a", "b", "c", "d"], limit: 10)
        #expect(read == [ExactText("a"): [t[0], t[1]], ExactText("b"): [t[2], t[3], t[4]]])
        // At most one more than the limit in all.
        let cut = try await store.activityTokens(appID: app, activityIDs: ["a", "b"], limit: 2)
        #expect(cut.values.reduce(0) { $0 + $1.count } == 3)
        #expect(try await store.activityTokens(appID: app, activityIDs: [], limit: 5).isEmpty)
        await b.close()
    }

    /// Several notifications accepted together: each stored with its deliveries and its own answer, in order; the
    /// same idempotency keys again answer as the first time and queue nothing.
    @Test(arguments: Kind.allCases)
    func severalNotificationsAreAcceptedTogether(_ kind: Kind) async throws {
        let b = try await Self.make(kind)
        let told = NIOLockedValueBox(0)
        b.workQueued.listen { told.withLockedValue { $0 += 1 } }
        let p = UUID().uuidString.prefix(8)
        let plans = [
            Self.plan("\(p)-1", .providerTokens(apns: ["aa"], fcm: []), key: "\(p)#1"),
            Self.plan("\(p)-2", .providerTokens(apns: ["bb", "cc"], fcm: []), key: "\(p)#2"),
            Self.plan("\(p)-3", .providerTokens(apns: [], fcm: []), key: "\(p)#3"),
        ]
        let first = try await b.intake.acceptAll(plans) { i, queued in
            ["item": .int(Int64(i)), "queued": .int(Int64(queued ?? -1))]
        }
        #expect(first.map(\.created) == [true, true, true])
        #expect(first.map(\.queued) == [1, 2, 0])
        #expect(
            first.map(\.notification.response) == [
                ["item": 0, "queued": 1], ["item": 1, "queued": 2], ["item": 2, "queued": 0],
            ]
        )
        #expect(told.withLockedValue { $0 } == 1, "told once for the whole batch")
        #expect(try await b.queue.deliveries(notificationID: "\(p)-2").map(\.target) == ["bb", "cc"])
        var again = plans
        for i in again.indices { again[i].notification.id += "-again" }
        let replay = try await b.intake.acceptAll(again) { _, _ in .null }
        #expect(replay.map(\.created) == [false, false, false])
        #expect(replay.map(\.notification.id) == plans.map(\.notification.id))
        #expect(replay[1].notification.response == ["item": 1, "queued": 2])
        #expect(try await b.queue.deliveries(notificationID: "\(p)-2-again").isEmpty)
        #expect(told.withLockedValue { $0 } == 1)
        await b.close()
    }

    /// Tokens are queued with the notification; a replayed idempotency key answers as the first time and queues nothing.
    @Test(arguments: Kind.allCases)
    func aTokenSendIsQueuedWithItsNotification(_ kind: Kind) async throws {
        let b = try await Self.make(kind)
        let first = try await b.intake.accept(
            Self.plan("n1", .providerTokens(apns: ["aa", "bb"], fcm: ["f1"]), key: "k")
        ) { ["queued": .int(Int64($0 ?? -1))] }
        #expect(first.created && first.queued == 3 && !first.fanOutPending)
        #expect(first.notification.response == ["queued": 3])
        let again = try await b.intake.accept(Self.plan("n2", .providerTokens(apns: ["cc"], fcm: []), key: "k")) { _ in
            .null
        }
        #expect(
            !again.created && again.queued == 0 && again.notification.id == "n1"
                && again.notification.response == ["queued": 3]
        )
        #expect(try await b.queue.deliveries(notificationID: "n1").map(\.target) == ["aa", "bb", "f1"])
        #expect(try await b.queue.deliveries(notificationID: "n2").isEmpty)
        #expect(try await b.intake.pendingFanOuts().isEmpty)
    }

    /// A send to registered tokens: a delivery for each of the app's devices among them (unknown tokens, repeats and
    /// another app's devices left out), in the devices' order and spread as ``Spread`` spreads; the answer made
    /// with the count found, stored so (a replay answers the same), and however the answer shows the count.
    @Test(arguments: Kind.allCases)
    func aSendToRegisteredTokensFindsItsDevicesAndCountsThemInItsAnswer(_ kind: Kind) async throws {
        let b = try await Self.make(kind)
        try await Self.register(b)
        try await b.registry.upsert(Device(appID: "other", token: "fcm-elsewhere", platform: .android))
        let ios = (1...3).map { String(format: "%064x", $0) }
        let wanted = [ios[2], "unknown", ios[0], "fcm-elsewhere", ios[2], "android-2"]
        let plan = Self.plan("r1", .tokens(wanted), key: "rk", spread: 60)
        let answer: @Sendable (Int?) -> JSONValue = { n in
            ["id": "r1", "deliveries": .int(Int64(n ?? -1)), "warnings": [["message": "a warning"]]]
        }
        let first = try await b.intake.accept(plan, respond: answer)
        #expect(first.created && first.queued == 3 && first.notification.response == answer(3))
        let made = try await b.queue.deliveries(notificationID: "r1")
        #expect(made.map(\.target.stored) == [ios[0], ios[2], "android-2"], "\(made.map(\.target.stored))")
        let start = plan.notBefore.timeIntervalSince1970
        #expect(
            zip(made, [0.0, 30, 60]).allSatisfy { abs($0.notBefore.timeIntervalSince1970 - (start + $1)) < 0.001 },
            "\(made.map { $0.notBefore.timeIntervalSince1970 - start })"
        )
        var again = plan
        again.notification.id = "r2"
        let replay = try await b.intake.accept(again) { _ in .null }
        #expect(!replay.created && replay.notification.id == "r1" && replay.notification.response == answer(3))
        // Answers that show the count otherwise, or not at all; none of the tokens registered.
        let answers: [@Sendable (Int?) -> JSONValue] = [
            { n in ["twice": .int(Int64(n ?? -1)), "again": .int(Int64(n ?? -1))] },
            { n in ["plural": .bool(n != 1)] }, { _ in ["fixed": true] },
            // The PostgreSQL intake's stand-in for the count in a text of the answer, beside the count and without it.
            { n in ["deliveries": .int(Int64(n ?? -1)), "note": "7340918265530417"] },
            { _ in ["deliveries": .null, "note": "7340918265530417"] },
        ]
        for (i, respond) in answers.enumerated() {
            let id = "r-other-\(i)"
            let p = Self.plan(id, .tokens(i == 2 ? ["nobody"] : [ios[1]]))
            let accepted = try await b.intake.accept(p, respond: respond)
            let count = i == 2 ? 0 : 1
            #expect(accepted.created && accepted.queued == count && accepted.notification.response == respond(count))
            let stored = try await b.store.notification(id: id)
            #expect(stored?.response == respond(count), "\(i): \(String(describing: stored?.response))")
        }
        await b.close()
    }

    /// "Deliveries were queued" is told by the store that queued them, once for an accepted token send and for a
    /// fan-out that queued some, never for a replay or a fan-out that queued none.
    @Test(arguments: Kind.allCases)
    func theStoreThatQueuesDeliveriesTellsTheWorkers(_ kind: Kind) async throws {
        let b = try await Self.make(kind)
        let told = NIOLockedValueBox(0)
        b.workQueued.listen { told.withLockedValue { $0 += 1 } }
        _ = try await b.intake.accept(Self.plan("q1", .providerTokens(apns: ["aa"], fcm: []), key: "q")) { _ in .null }
        #expect(told.withLockedValue { $0 } == 1)
        _ = try await b.intake.accept(Self.plan("q2", .providerTokens(apns: ["bb"], fcm: []), key: "q")) { _ in .null }
        #expect(told.withLockedValue { $0 } == 1, "a replay queues nothing")
        try await Self.register(b)
        _ = try await b.intake.accept(Self.plan("q3", .all)) { _ in .null }
        #expect(told.withLockedValue { $0 } == 1, "a registry audience queues with its fan-out")
        #expect(try await b.intake.completeFanOut(notificationID: "q3") == 5)
        #expect(told.withLockedValue { $0 } >= 2)
        let afterFanOut = told.withLockedValue { $0 }
        #expect(try await b.intake.completeFanOut(notificationID: "q3") == 0)
        #expect(told.withLockedValue { $0 } == afterFanOut)
        await b.close()
    }

    /// A registry audience is accepted with its fan-out pending, listed until completed, and completed once.
    @Test(arguments: Kind.allCases)
    func aRegistryAudienceIsAcceptedWithItsFanOutPending(_ kind: Kind) async throws {
        let b = try await Self.make(kind)
        try await Self.register(b)
        let accepted = try await b.intake.accept(Self.plan("n1", .tag("x"))) {
            #expect($0 == nil)
            return .null
        }
        #expect(accepted.created && accepted.queued == 0 && accepted.fanOutPending)
        #expect(try await b.intake.pendingFanOuts() == ["n1"])
        #expect(try await b.queue.deliveries(notificationID: "n1").isEmpty)
        #expect(try await b.intake.completeFanOut(notificationID: "n1") == 4)
        #expect(try await b.intake.pendingFanOuts().isEmpty)
        #expect(try await b.intake.completeFanOut(notificationID: "n1") == 0)
        let deliveries = try await b.queue.deliveries(notificationID: "n1")
        #expect(deliveries.count == 4 && Set(deliveries.map(\.target)).count == 4)
        #expect(deliveries.filter { $0.provider == .apns }.count == 3)
    }

    /// A fan-out whose stored audience cannot be read (damaged, or written by a later version) reaches nobody and is
    /// over. SQLite left it pending: every start tried it again and its notification read as fanning out for good
    /// (`richpush send` followed it until Ctrl-C); an audience that was not JSON threw on both databases, and the
    /// fan-out was tried again without end.
    @Test(arguments: [Kind.sqlite, .postgres])
    func aFanOutWhoseStoredAudienceCannotBeReadReachesNobodyAndIsOver(_ kind: Kind) async throws {
        let b = try await Self.make(kind)
        try await Self.register(b)
        // Not JSON; JSON that is no audience; and an audience with a key this version does not know (a later
        // version's narrowing), which read as every device before.
        let damaged = [
            ("not-json", "{\"tag\": "), ("not-an-audience", #"{"segment": 5}"#),
            ("a-later-narrowing", #"{"all": true, "segment": "new"}"#),
        ]
        for (id, stored) in damaged {
            _ = try await b.intake.accept(Self.plan(id, .tag("x"))) { _ in .null }
            switch b {
            case let sqlite as SQLiteBackend:
                try await sqlite.pool.write { db in
                    try db.execute(
                        sql: "UPDATE notifications SET audience = ? WHERE id = ?",
                        arguments: [stored, id]
                    )
                }
            case let postgres as PostgresBackend:
                try await postgres.database.rows("UPDATE notifications SET audience = \(stored) WHERE id = \(id)")
            default:
                Issue.record("no way to damage \(kind)'s rows")
            }
            #expect(try await b.intake.completeFanOut(notificationID: id) == 0, "\(id)")
            #expect(try await b.updates.family(of: id)?.fanOutPending == false, "\(id)")
            #expect(try await b.queue.deliveries(notificationID: id).isEmpty)
        }
        #expect(try await b.intake.pendingFanOuts().isEmpty)
        await b.close()
    }

    /// Registered tokens: only those in the registry are queued, at once, and the answer counts them.
    @Test(arguments: Kind.allCases)
    func registeredTokensAreQueuedAtOnce(_ kind: Kind) async throws {
        let b = try await Self.make(kind)
        try await Self.register(b)
        let tokens = [String(format: "%064x", 1), "android-2", "not-registered", "android-2"]
        let accepted = try await b.intake.accept(Self.plan("n1", .tokens(tokens))) {
            ["deliveries": .int(Int64($0 ?? -1))]
        }
        #expect(accepted.queued == 2 && !accepted.fanOutPending && accepted.notification.response == ["deliveries": 2])
        #expect(
            Set(try await b.queue.deliveries(notificationID: "n1").map(\.target)) == [
                .token(String(format: "%064x", 1)), "android-2",
            ]
        )
    }

    /// A dry run's counts per provider, for the registry and for named targets.
    @Test(arguments: Kind.allCases)
    func countsByProviderAgree(_ kind: Kind) async throws {
        let b = try await Self.make(kind)
        try await Self.register(b)
        #expect(try await b.countByProvider(appID: "app", audience: .all) == [.apns: 3, .fcm: 2])
        #expect(try await b.countByProvider(appID: "app", audience: .tag("x")) == [.apns: 3, .fcm: 1])
        #expect(try await b.countByProvider(appID: "app", audience: .tag("none")) == [:])
        #expect(try await b.countByProvider(appID: "app", audience: .fcmTopic("news")) == [.fcm: 1])
        #expect(try await b.countByProvider(appID: "other", audience: .all) == [:])
    }

    /// A fan-out outside an intake: every device once, spread evenly when asked.
    @Test(arguments: Kind.allCases)
    func aFanOutQueuesEveryDeviceOnce(_ kind: Kind) async throws {
        let b = try await Self.make(kind)
        try await Self.register(b)
        let start = Date(timeIntervalSince1970: 2_000_000_000)
        #expect(
            try await b.fanOut(
                FanOutRequest(notificationID: "n", appID: "app", audience: .all, notBefore: start, spread: 8)
            )
                == 5
        )
        let offsets = try await b.queue.deliveries(notificationID: "n").map {
            $0.notBefore.timeIntervalSince(start).rounded()
        }
        #expect(offsets == [0, 2, 4, 6, 8])
        #expect(
            try await b.fanOut(
                FanOutRequest(
                    notificationID: "m",
                    appID: "app",
                    audience: .providerTokens(apns: ["aa"], fcm: []),
                    notBefore: start
                )
            ) == 1
        )
    }

    /// Retention: a notification past the cut-off whose deliveries have all ended goes with its deliveries and
    /// receipts; one still delivering, or newer, stays.
    @Test(arguments: Kind.allCases)
    func notificationsPastRetentionGoWithTheirDeliveriesAndReceipts(_ kind: Kind) async throws {
        let backend = try await Self.make(kind)
        let old = Date().addingTimeInterval(-40 * 86_400)
        let tag = UUID().uuidString.prefix(8)
        let (done, waiting, recent) = ("done-\(tag)", "waiting-\(tag)", "recent-\(tag)")
        for (id, created) in [(done, old), (waiting, old), (recent, Date())] {
            _ = try await backend.store.insertNotification(
                StoredNotification(id: id, appID: "app", message: ["title": "t"], response: .null, createdAt: created),
                idempotencyKey: "key-\(id)"
            )
            try await backend.queue.enqueue(
                ["a", "b"].map { NewDelivery(notificationID: id, appID: "app", provider: .apns, target: "\(id)-\($0)") }
            )
        }
        // Every delivery ends but one of `waiting`'s (it stays queued).
        let claimed = try await backend.queue.claim(owner: "w", limit: 100, now: Date(), lease: 60)
        let keep = try #require(try await backend.queue.deliveries(notificationID: waiting).first?.id)
        for d in claimed where d.id != keep {
            #expect(
                try await backend.queue.finish(id: d.id, owner: "w", outcome: .delivered(providerID: nil), now: Date())
            )
        }
        _ = try await backend.queue.reschedule(id: keep, owner: "w", notBefore: Date(), reason: "retry", now: Date())
        let first = try #require(try await backend.queue.deliveries(notificationID: done).first?.id)
        #expect(
            try await backend.receipts.record(
                DeliveryReceipt(deliveryID: first, notificationID: done, report: ["attachments": [], "skipped": []])
            ) == .recorded
        )

        #expect(try await backend.sweepNotifications(before: Date().addingTimeInterval(-30 * 86_400), limit: 100) == 1)
        #expect(try await backend.store.notification(id: done) == nil)
        #expect(try await backend.queue.deliveries(notificationID: done).isEmpty)
        #expect(try await backend.receipts.summary(notificationID: done) == ReceiptSummary())
        #expect(try await backend.store.notification(id: waiting) != nil)
        #expect(try await backend.queue.deliveries(notificationID: waiting).count == 2)
        #expect(try await backend.store.notification(id: recent) != nil)
        // Nothing more to take; the idempotency key of the one gone is free again.
        #expect(try await backend.sweepNotifications(before: Date().addingTimeInterval(-30 * 86_400), limit: 100) == 0)
        let again = try await backend.store.insertNotification(
            StoredNotification(id: "again-\(tag)", appID: "app", message: [:], response: .null, createdAt: Date()),
            idempotencyKey: "key-\(done)"
        )
        #expect(again.created)
    }

    /// An app deleted goes with everything it holds, and nothing of another app goes with it: keys (refused at
    /// once), devices with their tags, notifications with deliveries and receipts, live tokens, identity keys; the
    /// same on every backend. A second deletion finds nothing.
    @Test(arguments: Kind.allCases)
    func anAppDeletedTakesAllItHoldsAndNothingElse(_ kind: Kind) async throws {
        let b = try await Self.make(kind)
        let (gone, _) = try await b.store.createApp(
            ServerApp(id: "", name: "Gone", bundleID: "com.gone", fcmProjectID: nil)
        )
        let (kept, _) = try await b.store.createApp(
            ServerApp(id: "", name: "Kept", bundleID: "com.kept", fcmProjectID: nil)
        )
        let (_, goneKey) = try await b.store.createKey(appID: gone.id, scopes: [.send])
        #expect(try await b.store.authorize(key: goneKey) != nil)
        var notifications: [String: String] = [:]
        for app in [gone.id, kept.id] {
            for i in 0..<7 {
                try await b.registry.upsert(
                    Device(appID: app, token: String(format: "%064x", 0xD00 + i), platform: .ios, tags: ["t"])
                )
            }
            try await b.liveTokens.register(
                LiveToken(
                    appID: app,
                    token: String(format: "%064x", 0xE00),
                    kind: .activity,
                    activityType: "A",
                    activityID: "a1"
                )
            )
            try await b.store.addIdentityKey(IdentityKey(appID: app, publicKey: P256.Signing.PrivateKey().publicKey))
            let id = "n-\(app)"
            notifications[app] = id
            _ = try await b.store.insertNotification(
                StoredNotification(id: id, appID: app, message: ["title": "t"], response: .null, createdAt: Date()),
                idempotencyKey: "k"
            )
            try await b.queue.enqueue(
                (0..<3).map { NewDelivery(notificationID: id, appID: app, provider: .apns, target: "\(app)-\($0)") }
            )
            let first = try #require(try await b.queue.deliveries(notificationID: id).first?.id)
            #expect(
                try await b.receipts.record(
                    DeliveryReceipt(deliveryID: first, notificationID: id, report: ["attachments": [], "skipped": []])
                ) == .recorded
            )
        }

        #expect(try await b.deleteApp(id: gone.id))
        #expect(try await b.store.app(id: gone.id) == nil)
        #expect(try await b.store.authorize(key: goneKey) == nil)
        #expect(try await b.store.keys(appID: gone.id, after: "", limit: 100).isEmpty)
        #expect(try await b.registry.count(appID: gone.id) == 0)
        #expect(try await b.store.notification(id: notifications[gone.id]!) == nil)
        #expect(try await b.queue.deliveries(notificationID: notifications[gone.id]!).isEmpty)
        #expect(try await b.receipts.summary(notificationID: notifications[gone.id]!) == ReceiptSummary())
        #expect(try await b.liveTokens.tokens(appID: gone.id, audience: .activity("a1"), limit: 10).isEmpty)
        #expect(try await b.store.identityKeys(appID: gone.id).isEmpty)
        #expect(try await b.store.apps(after: "", limit: 100).map(\.id).contains(kept.id))
        #expect(!(try await b.store.apps(after: "", limit: 100).map(\.id).contains(gone.id)))
        // The other app is whole.
        #expect(try await b.store.app(id: kept.id) != nil)
        #expect(try await b.registry.count(appID: kept.id) == 7)
        #expect(try await b.queue.deliveries(notificationID: notifications[kept.id]!).count == 3)
        #expect(try await b.receipts.summary(notificationID: notifications[kept.id]!).count == 1)
        #expect(try await b.liveTokens.tokens(appID: kept.id, audience: .activity("a1"), limit: 10).count == 1)
        #expect(try await b.store.identityKeys(appID: kept.id).count == 1)
        // Nothing left to delete.
        #expect(try await !b.deleteApp(id: gone.id))
        // A request that began before the deletion and ends after it (a slow body, a slow media fetch) writes for
        // the app gone: the leader's next purge takes it, for a day after the deletion; then the id is forgotten.
        try await b.registry.upsert(
            Device(appID: gone.id, token: String(format: "%064x", 0xF00), platform: .ios, tags: ["late"])
        )
        _ = try await b.store.insertNotification(
            StoredNotification(
                id: "late-\(gone.id)",
                appID: gone.id,
                message: ["title": "t"],
                response: .null,
                createdAt: Date()
            ),
            idempotencyKey: nil
        )
        try await b.queue.enqueue([
            NewDelivery(notificationID: "late-\(gone.id)", appID: gone.id, provider: .apns, target: "late")
        ])
        // A node flushes the counts it kept for a notification of the app after the deletion.
        try await b.receipts.addMinutes([
            MinuteCount(notificationID: notifications[gone.id]!, minute: 1, kind: .delivered, count: 3)
        ])
        #expect(try await b.purgeDeletedApps(now: Date()) >= 1)
        #expect(try await b.registry.count(appID: gone.id) == 0)
        #expect(try await b.store.notification(id: "late-\(gone.id)") == nil)
        #expect(try await b.queue.deliveries(notificationID: "late-\(gone.id)").isEmpty)
        #expect(try await b.registry.count(appID: kept.id) == 7)
        _ = try await b.purgeDeletedApps(now: Date().addingTimeInterval(2 * 86_400))
        #expect(try await b.purgeDeletedApps(now: Date()) == 0)
    }

    /// A worker renews its leases while it settles some of the same deliveries: the two statements run at once on
    /// the same rows, listed in opposite orders. On every backend neither fails (on PostgreSQL both lock in id order;
    /// in other orders they deadlocked and PostgreSQL ended one of them), and the outcomes all land.
    @Test(arguments: Kind.allCases)
    func renewalsAndSettlesOfTheSameRowsNeverDeadlock(_ kind: Kind) async throws {
        let b = try await Self.make(kind)
        let app = "locks-\(UUID().uuidString.prefix(8))"
        for round in 0..<20 {
            let n = "n\(round)"
            try await b.queue.enqueue(
                (0..<60).map {
                    NewDelivery(notificationID: n, appID: app, provider: .apns, target: .token("t\($0)"))
                }
            )
            let claimed = try await b.queue.claim(owner: "w", limit: 60, now: Date().addingTimeInterval(1), lease: 60)
            #expect(claimed.count == 60)
            let ids = claimed.map(\.id).sorted()
            try await withThrowingTaskGroup(of: Void.self) { group in
                for k in 0..<4 {
                    group.addTask {
                        let order = k % 2 == 0 ? ids : ids.reversed()
                        _ = try await b.queue.extend(order, owner: "w", until: Date().addingTimeInterval(120))
                    }
                }
                group.addTask {
                    let settled = try await b.queue.settle(
                        ids.reversed().map { Settlement(id: $0, .finish(.delivered(providerID: "p"))) },
                        owner: "w",
                        now: Date()
                    )
                    #expect(settled.count == 60)
                }
                try await group.waitForAll()
            }
            let counts = try await b.queue.counts(notificationID: n)
            #expect(counts == [.delivered: 60], "\(counts)")
        }
    }

}
