import Foundation
import NIOConcurrencyHelpers
import RichPushCore
import Testing

@testable import RichPushServer

/// Webhooks' storage, the same on every backend: the bound per app, events written with the outcomes they tell
/// (only for an app that hears their type), the cursor, a retry's exact batch, replays, and completions.
@Suite struct WebhookStoreTests {
    typealias Kind = StorageBackendTests.Kind

    static func endpoint(
        _ app: String,
        _ types: Set<WebhookEventType> = Set(WebhookEventType.subscribable)
    )
        -> WebhookEndpoint
    {
        WebhookEndpoint(appID: app, url: "https://hooks.example.com/\(app)", types: types)
    }

    /// The app's events after `after`, once `count` are there (on PostgreSQL an event is read once every write
    /// transaction older than it has ended, in any database of the server: the suite's other tests write beside).
    static func events(
        _ b: any StorageBackend,
        _ app: String,
        after: WebhookCursor,
        count: Int
    ) async throws -> [WebhookEvent] {
        let deadline = Date().addingTimeInterval(20)
        while true {
            let found = try await b.webhooks.events(appID: app, after: after, through: nil, limit: 1000)
            if found.count >= count || Date() > deadline { return found }
            try await Task.sleep(nanoseconds: 20_000_000)
        }
    }

    /// Queues and settles one delivery per outcome: delivered, failed for good, retried, pruned, released.
    static func settleSome(_ b: any StorageBackend, app: String, notification: String) async throws {
        try await b.queue.enqueue(
            (0..<5).map {
                NewDelivery(notificationID: notification, appID: app, provider: .apns, target: .token("t\($0)"))
            }
        )
        let claimed = try await b.queue.claim(owner: "w", limit: 10, now: Date().addingTimeInterval(1), lease: 60)
        #expect(claimed.count == 5)
        let byTarget = Dictionary(uniqueKeysWithValues: claimed.map { ($0.target.stored, $0.id) })
        let items: [Settlement] = [
            Settlement(id: byTarget["t0"]!, .finish(.delivered(providerID: "apns-1"))),
            Settlement(id: byTarget["t1"]!, .finish(.failed("PayloadTooLarge"))),
            Settlement(
                id: byTarget["t2"]!,
                .reschedule(notBefore: Date().addingTimeInterval(30), reason: "TooManyRequests")
            ),
            Settlement(id: byTarget["t3"]!, .finish(.init(state: .pruned, reason: "Unregistered", providerID: nil))),
            Settlement(id: byTarget["t4"]!, .release(notBefore: Date().addingTimeInterval(3600), reason: "app_busy")),
        ]
        let held = try await b.queue.settle(items, owner: "w", now: Date())
        #expect(held.count == 5)
    }

    @Test(arguments: Kind.allCases)
    func eventsAreWrittenWithTheOutcomesTheyTell(_ kind: Kind) async throws {
        let b = try await StorageBackendTests.make(kind)
        let app = "hooks-\(UUID().uuidString.prefix(8))"
        // No endpoint yet: nothing is recorded.
        try await Self.settleSome(b, app: app, notification: "n0")
        #expect(try await b.webhooks.events(appID: app, after: .start, through: nil, limit: 100).isEmpty)

        let all = try await b.webhooks.create(Self.endpoint(app))
        let onlyPruned = try await b.webhooks.create(Self.endpoint(app, [.tokenInvalid]))
        try await Self.settleSome(b, app: app, notification: "n1")
        let events = try await Self.events(b, app, after: all.cursor, count: 5)
        #expect(
            events.map(\.type) == [
                "delivery.delivered", "delivery.failed", "delivery.failed", "delivery.failed", "token.invalid",
            ]
        )
        #expect(events.allSatisfy { $0.notificationID == "n1" && $0.appID == app })
        #expect(zip(events, events.dropFirst()).allSatisfy { $0.cursor < $1.cursor })
        // The fast writer and the general one write the same bytes.
        for e in events { #expect(e.serialized() == e.json().serialized(), "\(e.type)") }
        let retried = try #require(events.first { $0.state == "queued" }).json()
        #expect(retried["data"]?["retried"] == true)
        #expect(retried["data"]?["reason"] == "TooManyRequests")
        #expect(retried["data"]?["next_attempt_at"] != nil)
        let delivered = events[0].json()
        #expect(delivered["data"]?["provider_id"] == "apns-1")
        #expect(delivered["data"]?["token"] == "t0")
        #expect(delivered["id"]?.stringValue == events[0].id)
        let failed = events[1].json()
        #expect(failed["data"]?["retried"] == false && failed["data"]?["meaning"] != nil)
        // The endpoint that hears only token.invalid gets that one event in its batch.
        let batch = WebhookBatch(events, for: onlyPruned, exact: nil)
        #expect(batch.events.map(\.type) == ["token.invalid"])
        #expect(batch.end == events.last!.cursor)

        // Another app's outcomes are not this app's events.
        try await Self.settleSome(b, app: app + "-other", notification: "n2")
        #expect(try await b.webhooks.events(appID: app, after: .start, through: nil, limit: 100).count == 5)
    }

    /// Past the number of endpoints a settle reads all of (``WebhookSQL/everyHearingLimit``), who hears what is read
    /// for the settled deliveries' apps: the same events either way.
    @Test(arguments: Kind.allCases)
    func manyEndpointsHearAsFewDo(_ kind: Kind) async throws {
        let b = try await StorageBackendTests.make(kind)
        let app = "many-\(UUID().uuidString.prefix(8))"
        let pruned = try await b.webhooks.create(Self.endpoint(app, [.tokenInvalid]))
        for other in 0..<7 {
            for _ in 0..<WebhookLimits.endpointsPerApp {
                _ = try await b.webhooks.create(Self.endpoint("\(app)-\(other)", [.open]))
            }
        }
        #expect(7 * WebhookLimits.endpointsPerApp > WebhookSQL.everyHearingLimit)
        try await Self.settleSome(b, app: app, notification: "m1")
        try await Self.settleSome(b, app: "\(app)-0", notification: "m2")
        let events = try await Self.events(b, app, after: pruned.cursor, count: 1)
        #expect(events.map(\.type) == ["token.invalid"])
        // An app whose endpoints hear only opens has no event of its settled deliveries.
        #expect(try await b.webhooks.events(appID: "\(app)-0", after: .start, through: nil, limit: 100).isEmpty)
    }

    @Test(arguments: Kind.allCases)
    func endpointsAreBoundedClaimedOnceAndMovedByAcknowledgement(_ kind: Kind) async throws {
        let b = try await StorageBackendTests.make(kind)
        let app = "hooks-\(UUID().uuidString.prefix(8))"
        var made: [WebhookEndpoint] = []
        for _ in 0..<WebhookLimits.endpointsPerApp { made.append(try await b.webhooks.create(Self.endpoint(app))) }
        await #expect(throws: WebhookLimitReached.self) { _ = try await b.webhooks.create(Self.endpoint(app)) }
        for e in made.dropFirst() { #expect(try await b.webhooks.remove(appID: app, id: e.id)) }
        #expect(try await b.webhooks.remove(appID: app, id: made[1].id) == false)
        #expect(try await b.webhooks.endpoint(appID: "other", id: made[0].id) == nil)

        // Nothing to send: not claimed.
        #expect(try await b.webhooks.claim(owner: "a", now: Date(), lease: 60, limit: 10).isEmpty)
        try await Self.settleSome(b, app: app, notification: "n1")
        _ = try await Self.events(b, app, after: .start, count: 5)
        let first = try await b.webhooks.claim(owner: "a", now: Date(), lease: 60, limit: 10)
        #expect(first.map(\.id) == [made[0].id])
        #expect(first.first?.secret == made[0].secret)
        // Held: no other node gets it.
        #expect(try await b.webhooks.claim(owner: "b", now: Date(), lease: 60, limit: 10).isEmpty)

        // A failure keeps the batch's end; the retry reads exactly those events.
        let rows = try await b.webhooks.events(appID: app, after: made[0].cursor, through: nil, limit: 3)
        let batch = WebhookBatch(rows, for: first[0], exact: nil)
        try await b.webhooks.fail(
            id: made[0].id,
            owner: "a",
            batchEnd: batch.end,
            error: "HTTP 500",
            next: Date().addingTimeInterval(-1),
            disable: nil,
            now: Date()
        )
        try await b.webhooks.release(id: made[0].id, owner: "a")
        let again = try #require(try await b.webhooks.claim(owner: "b", now: Date(), lease: 60, limit: 10).first)
        #expect(again.failures == 1 && again.lastError == "HTTP 500" && again.batchEnd == batch.end)
        let retryRows = try await b.webhooks.events(
            appID: app,
            after: again.cursor,
            through: again.batchEnd,
            limit: 100
        )
        let retry = WebhookBatch(retryRows, for: again, exact: again.batchEnd)
        #expect(retry.id == batch.id && retry.body == batch.body)
        try await b.webhooks.acknowledge(id: again.id, owner: "b", cursor: retry.end, now: Date())
        let after = try #require(try await b.webhooks.endpoint(appID: app, id: again.id))
        #expect(after.failures == 0 && after.batchEnd == nil && after.cursor == batch.end && after.lastSuccessAt != nil)
        let rest = try await b.webhooks.events(appID: app, after: after.cursor, through: nil, limit: 100)
        #expect(rest.count == 2)
        // Acknowledged with the lease extended at once (the sender's next request): the endpoint as it now stands,
        // only for the lease's owner.
        let until = Date().addingTimeInterval(600)
        let stranger = try await b.webhooks.acknowledgeAndExtend(
            id: again.id,
            owner: "c",
            cursor: rest[0].cursor,
            now: Date(),
            until: until
        )
        #expect(stranger == nil)
        let moved = try #require(
            try await b.webhooks.acknowledgeAndExtend(
                id: again.id,
                owner: "b",
                cursor: rest[0].cursor,
                now: Date(),
                until: until
            )
        )
        #expect(moved.cursor == rest[0].cursor && moved.failures == 0 && moved.id == again.id)
        #expect(try await b.webhooks.claim(owner: "c", now: Date(), lease: 60, limit: 10).isEmpty)
        try await b.webhooks.acknowledge(id: again.id, owner: "b", cursor: after.cursor, now: Date())

        // A replay sends again what was recorded in its range.
        #expect(try await b.webhooks.replay(appID: app, id: again.id, from: Date().addingTimeInterval(-60), to: Date()))
        let replaying = try #require(try await b.webhooks.endpoint(appID: app, id: again.id)?.replay)
        let replayed = try await b.webhooks.replayEvents(appID: app, replay: replaying, limit: 100)
        #expect(replayed.count == 5)

        // Disabled: not claimed; enabled again: claimed at once.
        #expect(try await b.webhooks.setEnabled(appID: app, id: again.id, enabled: false, now: Date()))
        try await b.webhooks.release(id: again.id, owner: "b")
        #expect(try await b.webhooks.claim(owner: "c", now: Date(), lease: 60, limit: 10).isEmpty)
        #expect(try await b.webhooks.endpoint(appID: app, id: again.id)?.state == "disabled")
        #expect(try await b.webhooks.setEnabled(appID: app, id: again.id, enabled: true, now: Date()))
        #expect(try await b.webhooks.claim(owner: "c", now: Date(), lease: 60, limit: 10).count == 1)

        // A rotated secret: both sign until the overlap ends.
        #expect(
            try await b.webhooks.rotateSecret(appID: app, id: again.id, secret: WebhookSigner.newSecret(), now: Date())
        )
        let rotated = try #require(try await b.webhooks.endpoint(appID: app, id: again.id))
        #expect(rotated.previousSecret == made[0].secret)
        #expect(rotated.signingSecrets(at: Date()).count == 2)
        #expect(rotated.signingSecrets(at: Date().addingTimeInterval(WebhookLimits.secretOverlap + 1)).count == 1)
    }

    /// The events' times, written by hand, agree with Foundation's formatter over four centuries of instants.
    @Test func timesAreRFC3339InUTCWithMilliseconds() {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        var rng = SystemRandomNumberGenerator()
        var instants: [Double] = [0, -0.001, 951_782_400, 4_107_542_399.999, -2_208_988_800, 253_402_300_799.999]
        for _ in 0..<5000 {
            instants.append(Double(Int64.random(in: -12_000_000_000_000...250_000_000_000_000, using: &rng)) / 1000)
        }
        for t in instants {
            let d = Date(timeIntervalSince1970: t)
            let ms = (d.timeIntervalSince1970 * 1000).rounded(.down) / 1000
            #expect(WebhookTime.rfc3339(d) == f.string(from: Date(timeIntervalSince1970: ms)), "\(t)")
        }
    }

    @Test(arguments: Kind.allCases)
    func eventsPastTheirRetentionAreSwept(_ kind: Kind) async throws {
        let b = try await StorageBackendTests.make(kind)
        let app = "hooks-\(UUID().uuidString.prefix(8))"
        _ = try await b.webhooks.create(Self.endpoint(app))
        let old = Date().addingTimeInterval(-4 * 86_400)
        let event = NewWebhookEvent(appID: app, type: .tokenInvalid, detail: ["token": "x"])
        try await b.webhooks.append(Array(repeating: event, count: 7), now: old)
        try await b.webhooks.append(Array(repeating: event, count: 3), now: Date())
        let cutoff = Date().addingTimeInterval(-WebhookLimits.retention)
        #expect(try await b.webhooks.sweep(before: cutoff, limit: 5) == 5)
        #expect(try await b.webhooks.sweep(before: cutoff, limit: 5) == 2)
        #expect(try await b.webhooks.sweep(before: cutoff, limit: 5) == 0)
        // Read as the sender reads: on PostgreSQL the last three are seen once older writes elsewhere have ended.
        #expect(try await Self.events(b, app, after: .start, count: 3).count == 3)
    }

    /// A backend, an app with an endpoint hearing `notification.completed`, and a notification of the app.
    static func hearingCompletions(
        _ kind: Kind
    ) async throws -> (any StorageBackend, String, WebhookEndpoint, String) {
        let b = try await StorageBackendTests.make(kind)
        let app = "hooks-\(UUID().uuidString.prefix(8))"
        let e = try await b.webhooks.create(Self.endpoint(app, [.notificationCompleted]))
        let id = UUID().uuidString
        try await b.store.insertNotification(
            StoredNotification(id: id, appID: app, message: ["title": "t"], response: .null, createdAt: Date()),
            idempotencyKey: nil
        )
        return (b, app, e, id)
    }

    @Test(arguments: Kind.allCases)
    func aNotificationThatEndedIsToldOnce(_ kind: Kind) async throws {
        let (b, app, e, id) = try await Self.hearingCompletions(kind)
        try await b.queue.enqueue(
            (0..<3).map { NewDelivery(notificationID: id, appID: app, provider: .apns, target: .token("c\($0)")) }
        )
        var claimed = try await b.queue.claim(owner: "w", limit: 2, now: Date().addingTimeInterval(1), lease: 60)
        _ = try await b.queue.settle(
            claimed.map { Settlement(id: $0.id, .finish(.delivered(providerID: nil))) },
            owner: "w",
            now: Date()
        )
        // One still queued: not complete.
        #expect(try await b.webhooks.completeNotifications(now: Date().addingTimeInterval(2), limit: 10) == 0)
        claimed = try await b.queue.claim(owner: "w", limit: 2, now: Date().addingTimeInterval(1), lease: 60)
        _ = try await b.queue.settle(
            claimed.map { Settlement(id: $0.id, .finish(.failed("BadDeviceToken"))) },
            owner: "w",
            now: Date()
        )
        #expect(try await b.webhooks.completeNotifications(now: Date().addingTimeInterval(10), limit: 10) == 1)
        #expect(try await b.webhooks.completeNotifications(now: Date().addingTimeInterval(100), limit: 10) == 0)
        let events = try await Self.events(b, app, after: e.cursor, count: 1)
        #expect(events.map(\.type) == ["notification.completed"])
        let json = events[0].json()
        #expect(json["data"]?["total"] == 3)
        #expect(json["data"]?["counts"]?["delivered"] == 2)
        #expect(json["data"]?["counts"]?["failed"] == 1)
        #expect(json["data"]?["notification_id"]?.stringValue == id)
    }

    /// An audience that reached nobody queues no delivery, so no settle opens it: the intake opens it in the
    /// transaction that accepts it (tokens none of which is registered) or ends its fan-out (a tag nobody has), so
    /// a crash right after cannot lose it; an update that reaches nobody likewise. Each is told complete once with
    /// every count 0; an app that does not hear
    /// `notification.completed` opens nothing.
    @Test(arguments: Kind.allCases)
    func aNotificationWithoutDeliveriesIsToldComplete(_ kind: Kind) async throws {
        let b = try await StorageBackendTests.make(kind)
        let app = "hooks-\(UUID().uuidString.prefix(8))"
        let e = try await b.webhooks.create(Self.endpoint(app, [.notificationCompleted]))
        func plan(_ audience: Audience, app: String) -> AcceptPlan {
            var p = StorageBackendTests.plan(UUID().uuidString, audience)
            p.notification.appID = app
            return p
        }
        let nobody = String(repeating: "0", count: 64)
        let direct = try await b.intake.accept(plan(.tokens([nobody]), app: app)) { _ in .null }
        #expect(direct.created && direct.queued == 0 && !direct.fanOutPending)
        #expect(try await b.webhooks.completeNotifications(now: Date().addingTimeInterval(2), limit: 10) == 1)
        let fanned = try await b.intake.accept(plan(.tag("nobody-\(kind)"), app: app)) { _ in .null }
        #expect(fanned.fanOutPending)
        #expect(try await b.webhooks.completeNotifications(now: Date().addingTimeInterval(4), limit: 10) == 0)
        #expect(try await b.intake.completeFanOut(notificationID: fanned.notification.id) == 0)
        #expect(try await b.webhooks.completeNotifications(now: Date().addingTimeInterval(6), limit: 10) == 1)
        // An update of it reaches nobody either: opened by the update's own transaction.
        let update = try await b.updates.accept(
            UpdatePlan(
                notification: .init(
                    id: UUID().uuidString,
                    appID: app,
                    message: ["title": "v2"],
                    response: .null,
                    createdAt: Date()
                ),
                rootID: fanned.notification.id,
                idempotencyKey: nil,
                expiresAt: nil
            )
        ) { _, _, _ in .null }
        #expect(update.created && update.queued == 0)
        #expect(try await b.webhooks.completeNotifications(now: Date().addingTimeInterval(8), limit: 10) == 1)
        #expect(try await b.webhooks.completeNotifications(now: Date().addingTimeInterval(100), limit: 10) == 0)
        let events = try await Self.events(b, app, after: e.cursor, count: 3)
        #expect(events.map(\.type) == Array(repeating: "notification.completed", count: 3))
        #expect(
            events.map(\.notificationID) == [direct.notification.id, fanned.notification.id, update.notification.id]
        )
        for event in events {
            #expect(event.json()["data"]?["total"] == 0 && event.json()["data"]?["counts"] == [:])
        }
        // An app that does not hear it: nothing.
        _ = try await b.intake.accept(plan(.tokens([nobody]), app: "someone-else")) { _ in .null }
        #expect(try await b.webhooks.completeNotifications(now: Date().addingTimeInterval(200), limit: 10) == 0)
    }

    /// Decided on the row, alike on every backend: a replay starts unless one is under way or the endpoint is
    /// disabled; a rotation moves the secret before it aside in the same statement (two at once both sign).
    @Test(arguments: Kind.allCases)
    func replaysAndRotationsAreDecidedOnTheRow(_ kind: Kind) async throws {
        let b = try await StorageBackendTests.make(kind)
        let app = "hooks-\(UUID().uuidString.prefix(8))"
        let e = try await b.webhooks.create(Self.endpoint(app))
        let (from, to) = (Date().addingTimeInterval(-60), Date())
        #expect(try await b.webhooks.replay(appID: app, id: e.id, from: from, to: to))
        #expect(!(try await b.webhooks.replay(appID: app, id: e.id, from: from, to: to)))
        #expect(try await b.webhooks.endpoint(appID: app, id: e.id)?.replay != nil)
        let off = try await b.webhooks.create(Self.endpoint(app))
        #expect(try await b.webhooks.setEnabled(appID: app, id: off.id, enabled: false, now: Date()))
        #expect(!(try await b.webhooks.replay(appID: app, id: off.id, from: from, to: to)))
        #expect(!(try await b.webhooks.replay(appID: "someone-else", id: e.id, from: from, to: to)))

        let secrets = (0..<2).map { _ in WebhookSigner.newSecret() }
        try await withThrowingTaskGroup(of: Bool.self) { group in
            for s in secrets {
                group.addTask { try await b.webhooks.rotateSecret(appID: app, id: e.id, secret: s, now: Date()) }
            }
            for try await rotated in group { #expect(rotated) }
        }
        let stored = try #require(try await b.webhooks.endpoint(appID: app, id: e.id))
        #expect(Set([stored.secret] + [stored.previousSecret].compactMap { $0 }) == Set(secrets))
        #expect(!(try await b.webhooks.rotateSecret(appID: "someone-else", id: e.id, secret: secrets[0], now: Date())))
    }

    /// A Live Activity token's removal and expiry are told only when its registration was (so the events public
    /// callers cause stay within the budget the store asks), the budget is asked only for an event a change writes
    /// (removing a token never registered asks nothing), and a token the user's bound evicts is told removed.
    @Test(arguments: Kind.allCases)
    func liveTokenEventsAreToldOfTokensWhoseRegistrationWas(_ kind: Kind) async throws {
        let b = try await StorageBackendTests.make(kind)
        let app = "hooks-\(UUID().uuidString.prefix(8))"
        let e = try await b.webhooks.create(Self.endpoint(app))
        let asked = NIOLockedValueBox(0)
        func budget(_ allows: Bool) -> LiveTokenEvents {
            {
                asked.withLockedValue { $0 += 1 }
                return allows
            }
        }
        let old = Date().addingTimeInterval(-40 * 86_400)
        func token(_ n: Int, user: String? = nil, at: Date = Date()) -> LiveToken {
            LiveToken(
                appID: app,
                token: String(format: "%064x", n),
                kind: .pushToStart,
                activityType: "T",
                userID: user,
                updatedAt: at
            )
        }
        let live = b.liveTokens
        // Registered while the budget refused: untold, and never told removed or expired.
        try await live.register(token(1), owner: .asGiven, limits: .none, events: budget(false))
        try await live.register(token(2, at: old), owner: .asGiven, limits: .none, events: budget(false))
        #expect(try await live.remove(appID: app, token: token(1).token, heldBy: nil, events: budget(true)))
        #expect(!(try await live.remove(appID: app, token: token(9).token, heldBy: nil, events: budget(true))))
        #expect(asked.withLockedValue { $0 } == 2)
        // Told: its removal and its expiry are told too.
        try await live.register(token(3), owner: .asGiven, limits: .none, events: budget(true))
        try await live.register(token(4, at: old), owner: .asGiven, limits: .none, events: budget(true))
        #expect(try await live.remove(appID: app, token: token(3).token, heldBy: nil, events: budget(true)))
        #expect(
            try await live.sweep(.pushToStart, before: Date().addingTimeInterval(-30 * 86_400), limit: 100_000) >= 2
        )
        // A user's bound of two: the third token evicts the first, told removed.
        var limits = RegistrationLimits()
        limits.liveTokensPerUser = 2
        for n in 5...7 {
            let t = token(n, user: "u", at: Date().addingTimeInterval(Double(n)))
            try await live.register(t, owner: .asGiven, limits: limits, events: budget(true))
        }
        // Asked: two refused registrations, three told changes, three registrations and one eviction.
        #expect(asked.withLockedValue { $0 } == 9)
        let events = try await Self.events(b, app, after: e.cursor, count: 8)
        let told = events.map { event -> String in
            let data = event.json()["data"]
            return "\(data?["state"]?.stringValue ?? "?") \(data?["token"]?.stringValue?.suffix(1) ?? "?")"
        }
        let expected: [String] = [
            "registered 3", "registered 4", "removed 3", "expired 4", "registered 5", "registered 6", "registered 7",
            "removed 5",
        ]
        #expect(told == expected)
    }

    @Test(arguments: Kind.allCases)
    func receiptsOpensAndLiveTokensAreEvents(_ kind: Kind) async throws {
        let b = try await StorageBackendTests.make(kind)
        let app = "hooks-\(UUID().uuidString.prefix(8))"
        let e = try await b.webhooks.create(Self.endpoint(app))
        try await b.queue.enqueue([NewDelivery(notificationID: "n", appID: app, provider: .apns, target: "r0")])
        let d = try #require(
            try await b.queue.claim(owner: "w", limit: 1, now: Date().addingTimeInterval(1), lease: 60).first
        )
        _ = try await b.queue.settle(
            [Settlement(id: d.id, .finish(.delivered(providerID: nil)))],
            owner: "w",
            now: Date()
        )
        let receipt = DeliveryReceipt(
            deliveryID: d.id,
            notificationID: "n",
            attachments: 1,
            skipped: SkipReasons(rawValue: 0),
            deadlineHit: false,
            elapsedMilliseconds: 420,
            receivedAt: Date()
        )
        #expect(try await b.receipts.record(receipt) == .recorded)
        #expect(try await b.receipts.record(receipt) == .repeated)
        let open = DeliveryOpen(
            deliveryID: d.id,
            notificationID: "n",
            event: .opened,
            action: "reply",
            link: nil,
            at: Date()
        )
        #expect(try await b.receipts.recordOpen(open) == .recorded)
        try await b.liveTokens.register(
            LiveToken(appID: app, token: String(repeating: "ab", count: 32), kind: .pushToStart, activityType: "Score")
        )
        #expect(try await b.liveTokens.remove(appID: app, token: String(repeating: "ab", count: 32)))
        let events = try await Self.events(b, app, after: e.cursor, count: 5)
        #expect(events.map(\.type) == ["delivery.delivered", "receipt.received", "open", "live.token", "live.token"])
        #expect(events[1].json()["data"]?["elapsed_ms"] == 420)
        #expect(events[1].json()["data"]?["token"] == "r0")
        #expect(events[2].json()["data"]?["action"] == "reply")
        #expect(events[3].json()["data"]?["state"] == "registered")
        #expect(events[4].json()["data"]?["state"] == "removed")
    }
}
