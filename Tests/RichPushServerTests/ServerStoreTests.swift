import Foundation
import RichPushCore
import RichPushServer
import Testing

/// Apps, keys, notifications, receipts and secrets: the same answers from the in-memory twin, SQLite and
/// PostgreSQL.
@Suite struct ServerStoreTests {
    typealias Kind = StorageBackendTests.Kind

    static let apnsKey =
        "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\n-----END PRIVATE KEY-----"

    @Test(arguments: Kind.allCases)
    func appsAreCreatedChangedAndReadBack(_ kind: Kind) async throws {
        let store = try await StorageBackendTests.make(kind).store
        let (app, key) = try await store.createApp(
            ServerApp(id: "", name: "Shop", bundleID: "com.example.shop", fcmProjectID: "shop-123456")
        )
        #expect(app.id.hasPrefix("app_") && app.revision == 1 && key.hasPrefix("rp_"))
        #expect(try await store.app(id: app.id) == app)
        var changed = app
        changed.name = "Shop 2"
        changed.apns = APNsCredentials(
            keyPEM: Self.apnsKey,
            keyID: "ABCDEFGHIJ",
            teamID: "TEAM123456",
            environment: .development
        )
        let updated = try #require(try await store.updateApp(changed))
        #expect(
            updated.revision == 2 && updated.name == "Shop 2" && updated.apns?.environment == .development
                && updated.apns?.keyPEM == Self.apnsKey
        )
        #expect(try await store.app(id: app.id)?.revision == 2)
        #expect(try await store.updateApp(ServerApp(id: "app_none", name: "x", bundleID: "y")) == nil)
        #expect(try await store.app(id: "app_none") == nil)
    }

    @Test(arguments: Kind.allCases)
    func keysAuthorizeUntilRevoked(_ kind: Kind) async throws {
        let store = try await StorageBackendTests.make(kind).store
        let (app, first) = try await store.createApp(ServerApp(id: "", name: "A", bundleID: "com.example.a"))
        #expect(try await store.authorize(key: first)?.scopes == Set(APIScope.allCases))
        let (grant, second) = try await store.createKey(appID: app.id, scopes: [.send])
        #expect(
            try await store.authorize(key: second) == grant && grant.scopes == [.send] && grant.keyID.hasPrefix("key_")
        )
        #expect(try await store.authorize(key: "rp_unknown") == nil)
        #expect(try await store.revokeKey(appID: app.id, keyID: grant.keyID))
        #expect(try await store.authorize(key: second) == nil)
        #expect(!(try await store.revokeKey(appID: app.id, keyID: grant.keyID)))
        #expect(!(try await store.revokeKey(appID: "app_other", keyID: APIKeys.id(ofHash: APIKeys.hash(first)))))
        #expect(try await store.authorize(key: first) != nil)
    }

    /// At most 100 keys an app (counted where the key is written), listed a page at a time by key id.
    @Test(arguments: Kind.allCases)
    func keysAreCappedPerAppAndListedAPageAtATime(_ kind: Kind) async throws {
        let store = try await StorageBackendTests.make(kind).store
        let (app, _) = try await store.createApp(ServerApp(id: "", name: "A", bundleID: "com.example.a"))
        let (other, _) = try await store.createApp(ServerApp(id: "", name: "B", bundleID: "com.example.b"))
        var made: [String] = []
        for _ in 1..<APIKeys.maxPerApp {
            made.append(try await store.createKey(appID: app.id, scopes: [.send]).0.keyID)
        }
        await #expect(throws: APIKeys.LimitReached.self) {
            _ = try await store.createKey(appID: app.id, scopes: [.send])
        }
        // Another app is not held back; revoking one makes room.
        _ = try await store.createKey(appID: other.id, scopes: [.read])
        #expect(try await store.revokeKey(appID: app.id, keyID: made.removeLast()))
        _ = try await store.createKey(appID: app.id, scopes: [.send])
        var listed: [String] = []
        var after = ""
        while true {
            let page = try await store.keys(appID: app.id, after: after, limit: 30)
            #expect(page.count <= 30)
            listed += page.map(\.keyID)
            guard page.count == 30, let last = page.last else { break }
            after = last.keyID
        }
        #expect(listed.count == APIKeys.maxPerApp && Set(listed).count == listed.count && listed == listed.sorted())
        #expect(try await store.keys(appID: other.id, after: "", limit: 100).count == 2)
    }

    @Test(arguments: Kind.allCases)
    func anIdempotencyKeyReturnsTheFirstNotification(_ kind: Kind) async throws {
        let store = try await StorageBackendTests.make(kind).store
        let n1 = StoredNotification(
            id: "n1",
            appID: "app",
            message: ["title": "one"],
            response: ["id": "n1"],
            createdAt: Date(timeIntervalSince1970: 1_900_000_000)
        )
        let n2 = StoredNotification(
            id: "n2",
            appID: "app",
            message: ["title": "two"],
            response: ["id": "n2"],
            createdAt: Date()
        )
        #expect(try await store.insertNotification(n1, idempotencyKey: "k").created)
        let again = try await store.insertNotification(n2, idempotencyKey: "k")
        #expect(!again.created && again.0.id == "n1" && again.0.response == ["id": "n1"])
        #expect(try await store.insertNotification(n2, idempotencyKey: nil).created)
        // The same key in another app is another notification.
        #expect(
            try await store.insertNotification(
                StoredNotification(id: "n3", appID: "other", message: [:], response: [:], createdAt: Date()),
                idempotencyKey: "k"
            ).created
        )
        let read = try #require(try await store.notification(id: "n1"))
        #expect(read.message == ["title": "one"] && abs(read.createdAt.timeIntervalSince1970 - 1_900_000_000) < 0.001)
        #expect(try await store.notification(id: "none") == nil)
    }

    @Test(arguments: Kind.allCases)
    func receiptsAreOnePerDeliveryOfTheirNotificationAndSumToAFewNumbers(_ kind: Kind) async throws {
        let backend = try await StorageBackendTests.make(kind)
        let receipts = backend.receipts
        let n = "n-\(UUID().uuidString.prefix(8))"
        try await backend.queue.enqueue(
            ["t1", "t2", "t3"].map { NewDelivery(notificationID: n, appID: "app", provider: .apns, target: $0) }
        )
        try await backend.queue.enqueue([
            NewDelivery(notificationID: "other", appID: "app", provider: .fcm, target: "t1")
        ])
        let ids = try await backend.queue.deliveries(notificationID: n).sorted { $0.target < $1.target }.map(\.id)
        let foreign = try #require(try await backend.queue.deliveries(notificationID: "other").first?.id)
        #expect(try await receipts.delivery(notificationID: n, target: "t2") == ids[1])
        #expect(try await receipts.delivery(notificationID: n, target: "nobody") == nil)
        let first = DeliveryReceipt(
            deliveryID: ids[0],
            notificationID: n,
            report: [
                "attachments": [["file": "a.png"]], "elapsed_ms": 120,
                "skipped": [["reason": "too-large"], ["reason": "too-large"], ["reason": "made-up"]],
            ]
        )
        #expect(first.skipped.list == ["too-large", "other"])
        #expect(try await receipts.record(first) == .recorded)
        #expect(try await receipts.record(first) == .repeated)
        let second = DeliveryReceipt(
            deliveryID: ids[1],
            notificationID: n,
            report: [
                "attachments": [], "skipped": [["reason": "too-large"]], "deadline_hit": true, "elapsed_ms": 1e300,
            ]
        )
        #expect(second.elapsedMilliseconds == 600_000)
        #expect(try await receipts.record(second) == .recorded)
        // Another notification's delivery, or a delivery that does not exist, is not this notification's.
        let stray = DeliveryReceipt(deliveryID: foreign, notificationID: n, report: ["attachments": [], "skipped": []])
        #expect(try await receipts.record(stray) == .notDelivered)
        let missing = DeliveryReceipt(
            deliveryID: 987_654,
            notificationID: n,
            report: ["attachments": [], "skipped": []]
        )
        #expect(try await receipts.record(missing) == .notDelivered)
        #expect(
            try await receipts.summary(notificationID: n)
                == ReceiptSummary(count: 2, withMedia: 1, deadlineHit: 1, skipped: ["too-large": 2, "other": 1])
        )
        #expect(try await receipts.summary(notificationID: "none") == ReceiptSummary())
    }

    @Test(arguments: Kind.allCases)
    func aSecretIsMadeOnceAndKept(_ kind: Kind) async throws {
        let store = try await StorageBackendTests.make(kind).store
        let first = try await store.secret(named: "receipts")
        #expect(first.count == 32)
        #expect(try await store.secret(named: "receipts") == first)
        #expect(try await store.secret(named: "other") != first)
    }
}
