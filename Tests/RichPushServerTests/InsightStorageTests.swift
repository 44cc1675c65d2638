import Foundation
import RichPushCore
import RichPushServer
import Testing

/// Opens, funnel reads and minute counts answer alike on SQLite, PostgreSQL and the memory twin.
@Suite struct InsightStorageTests {
    typealias Kind = StorageBackendTests.Kind

    /// Ends every delivery of the notification as the push service accepting it (`failing`: those refused).
    static func deliver(_ id: String, on b: any StorageBackend, failing: Set<Int> = []) async throws {
        let mine = Set(try await b.queue.deliveries(notificationID: id).map(\.id))
        var settlements: [Settlement] = []
        for d in try await b.queue.claim(owner: "t", limit: 10_000, now: Date(), lease: 60) where mine.contains(d.id) {
            let i = settlements.count
            settlements.append(
                Settlement(
                    id: d.id,
                    .finish(failing.contains(i) ? .failed("BadDeviceToken") : .delivered(providerID: nil))
                )
            )
        }
        #expect(settlements.count == mine.count)
        _ = try await b.queue.settle(settlements, owner: "t", now: Date())
    }

    @Test(arguments: Kind.allCases)
    func opensAndMinutesAnswerAlike(_ kind: Kind) async throws {
        let b = try await StorageBackendTests.make(kind)
        let tokens = (0..<3).map { String(format: "%064x", 0x1D00 + $0) }
        for t in tokens { try await b.registry.upsert(Device(appID: "app", token: t, platform: .ios)) }
        _ = try await b.store.insertNotification(
            .init(id: "other-app", appID: "other", message: ["title": "t"], response: .null, createdAt: Date()),
            idempotencyKey: nil
        )
        _ = try await b.intake.accept(StorageBackendTests.plan("n-\(kind)", .tokens(tokens))) { _ in .null }
        let id = "n-\(kind)"
        // Opens count for deliveries the push service accepted: these were.
        try await Self.deliver(id, on: b)
        let deliveries = try await b.queue.deliveries(notificationID: id)
        #expect(deliveries.count == 3)
        let r = b.receipts
        // One instant for every open: the timeline counts by ten minutes, and opens a few seconds apart on a busy
        // machine can fall either side of a boundary.
        let at = Date(timeIntervalSince1970: 1_800_000_300)
        #expect(
            try await r.recordOpen(.init(deliveryID: deliveries[0].id, notificationID: id, event: .opened, at: at))
                == .recorded
        )
        #expect(
            try await r.recordOpen(.init(deliveryID: deliveries[0].id, notificationID: id, event: .dismissed, at: at))
                == .repeated
        )
        #expect(
            try await r.recordOpen(
                .init(
                    deliveryID: deliveries[1].id,
                    notificationID: id,
                    event: .opened,
                    action: "later",
                    link: "shop://orders/42",
                    at: at
                )
            ) == .recorded
        )
        #expect(
            try await r.recordOpen(.init(deliveryID: deliveries[2].id, notificationID: id, event: .dismissed, at: at))
                == .recorded
        )
        #expect(
            try await r.recordOpen(.init(deliveryID: 999_999, notificationID: id, event: .opened, at: at))
                == .notDelivered
        )
        #expect(
            try await r.recordOpen(
                .init(deliveryID: deliveries[0].id, notificationID: "other-app", event: .opened, at: at)
            )
                == .notDelivered
        )
        #expect(
            try await r.openSummary(notificationID: id)
                == OpenSummary(
                    opened: 2,
                    dismissed: 1,
                    actions: ["default": 1, "later": 1],
                    links: ["shop://orders/42": 1]
                )
        )
        #expect(try await r.openTimeline(notificationID: id).map(\.opens) == [2])
        let breakdown = try await r.breakdown(notificationID: id)
        #expect(breakdown == [DeliveryBreakdown(state: .delivered, reason: "", tried: true, count: 3)])

        let minute = Int64(Date().timeIntervalSince1970 / 60)
        try await r.addMinutes([
            MinuteCount(notificationID: id, minute: minute, kind: .accepted, count: 3),
            MinuteCount(notificationID: id, minute: minute, kind: .failed, reason: "BadDeviceToken", count: 1),
            MinuteCount(notificationID: "other-app", minute: minute, kind: .accepted, count: 7),
        ])
        try await r.addMinutes([MinuteCount(notificationID: id, minute: minute, kind: .accepted, count: 2)])
        let (hours, failures) = try await r.appHours(appID: "app", since: Date().addingTimeInterval(-3600))
        #expect(hours.count == 1 && hours.first?.counts == [.accepted: 5, .failed: 1])
        #expect(failures.map(\.0) == ["BadDeviceToken"] && failures.map(\.1) == [1])
        #expect(try await r.appHours(appID: "app", since: Date().addingTimeInterval(3600)).hours.isEmpty)
    }

    /// An open counts only for a delivery the push service accepted: one of a failed delivery, or one still queued,
    /// is refused with its state and counts nothing, alike on every backend.
    @Test(arguments: Kind.allCases)
    func opensOfDeliveriesTheServiceDidNotAcceptCountNothing(_ kind: Kind) async throws {
        let b = try await StorageBackendTests.make(kind)
        let tokens = (0..<3).map { String(format: "%064x", 0x3F00 + $0) }
        for t in tokens { try await b.registry.upsert(Device(appID: "app", token: t, platform: .ios)) }
        let id = "refused-\(kind)"
        _ = try await b.intake.accept(StorageBackendTests.plan(id, .tokens(tokens))) { _ in .null }
        let queued = try await b.queue.deliveries(notificationID: id)
        try #require(queued.count == 3)
        #expect(
            try await b.receipts.recordOpen(.init(deliveryID: queued[0].id, notificationID: id, event: .opened))
                == .notAccepted(.queued)
        )
        try await Self.deliver(id, on: b, failing: [0, 1])
        let ended = try await b.queue.deliveries(notificationID: id).sorted { $0.id < $1.id }
        let failed = ended.filter { $0.state == .failed }
        #expect(failed.count == 2)
        for d in failed {
            #expect(
                try await b.receipts.recordOpen(.init(deliveryID: d.id, notificationID: id, event: .opened))
                    == .notAccepted(.failed)
            )
            #expect(
                try await b.receipts.recordOpen(.init(deliveryID: d.id, notificationID: id, event: .dismissed))
                    == .notAccepted(.failed)
            )
        }
        let delivered = try #require(ended.first { $0.state == .delivered })
        #expect(
            try await b.receipts.recordOpen(.init(deliveryID: delivered.id, notificationID: id, event: .opened))
                == .recorded
        )
        #expect(
            try await b.receipts.recordOpen(.init(deliveryID: delivered.id, notificationID: id, event: .opened))
                == .repeated
        )
        #expect(try await b.receipts.openSummary(notificationID: id).opened == 1)
        #expect(try await b.receipts.openSummary(notificationID: id).dismissed == 0)
    }

    /// Opens that each followed a link of their own (one per person) are read as the 20 most followed and the rest
    /// as `other`, alike on every backend: 30 opens, 5 of them to one link, 24 to links of their own, 1 to none.
    @Test(arguments: Kind.allCases)
    func linksAreReadAsTheMostFollowedAndTheRest(_ kind: Kind) async throws {
        let b = try await StorageBackendTests.make(kind)
        let tokens = (0..<30).map { String(format: "%064x", 0x2E00 + $0) }
        for t in tokens { try await b.registry.upsert(Device(appID: "app", token: t, platform: .ios)) }
        let id = "links-\(kind)"
        _ = try await b.intake.accept(StorageBackendTests.plan(id, .tokens(tokens))) { _ in .null }
        try await Self.deliver(id, on: b)
        let deliveries = try await b.queue.deliveries(notificationID: id)
        #expect(deliveries.count == 30)
        for (i, d) in deliveries.enumerated() {
            // The last one opened without a link.
            let link = i == 29 ? nil : i < 5 ? "shop://sale" : "shop://user/\(100 + i)"
            let open = DeliveryOpen(deliveryID: d.id, notificationID: id, event: .opened, link: link)
            #expect(try await b.receipts.recordOpen(open) == .recorded)
        }
        let summary = try await b.receipts.openSummary(notificationID: id)
        #expect(summary.opened == 30)
        #expect(summary.links.count == 21 && summary.links["shop://sale"] == 5)
        // After the shared one, the others tie at 1 and come in link order: 105 to 123 shown, 124 to 128 the rest.
        #expect(summary.links["shop://user/105"] == 1 && summary.links["shop://user/123"] == 1)
        #expect(summary.links["shop://user/124"] == nil && summary.links["other"] == 5)
        #expect(summary.links.values.reduce(0, +) == 29)
    }
}
