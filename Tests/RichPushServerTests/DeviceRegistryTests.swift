import Foundation
import RichPushServer
import Testing

@Suite struct DeviceRegistryTests {
    enum Kind: String, CaseIterable, Sendable { case sqlite, memory, postgres }

    static func make(_ kind: Kind) async throws -> (DeviceRegistry, DeliveryQueue) {
        switch kind {
        case .memory: return (MemoryDeviceRegistry(), MemoryDeliveryQueue())
        case .sqlite:
            let pool = try SQLiteDeliveryQueue.openPool(
                path: FileManager.default.temporaryDirectory.appendingPathComponent(
                    "registry-\(UUID().uuidString).sqlite"
                ).path
            )
            return (try SQLiteDeviceRegistry(pool: pool), try SQLiteDeliveryQueue(pool: pool))
        case .postgres:
            let b = try await PostgresFixture.backend()
            return (b.registry, b.queue)
        }
    }

    static func collect(
        _ r: DeviceRegistry,
        _ audience: Audience,
        app: String = "app",
        page: Int = 3
    ) async throws -> [String] {
        var out: [String] = []
        var cursor: Int64 = 0
        while true {
            let (devices, next) = try await r.page(appID: app, audience: audience, after: cursor, limit: page)
            out += devices.map(\.token)
            guard let next else { return out }
            cursor = next
        }
    }

    @Test(arguments: Kind.allCases)
    func audiencesPageThroughInRegistrationOrder(_ kind: Kind) async throws {
        let (r, _) = try await Self.make(kind)
        for i in 0..<10 {
            try await r.upsert(
                Device(
                    appID: "app",
                    token: "t\(i)",
                    platform: i % 2 == 0 ? .ios : .android,
                    userID: "u\(i % 3)",
                    tags: i < 4 ? ["vip", "beta"] : ["beta"],
                    topics: i % 5 == 0 ? ["news"] : []
                )
            )
        }
        try await r.upsert(Device(appID: "other", token: "t0", platform: .ios, tags: ["vip"]))
        #expect(try await Self.collect(r, .all) == (0..<10).map { "t\($0)" })
        #expect(try await Self.collect(r, .tag("vip")) == ["t0", "t1", "t2", "t3"])
        #expect(try await Self.collect(r, .tag("beta")).count == 10)
        #expect(try await Self.collect(r, .topic("news")) == ["t0", "t5"])
        #expect(try await Self.collect(r, .user("u1")) == ["t1", "t4", "t7"])
        #expect(try await Self.collect(r, .tokens(["t9", "t2", "nope", "t2"])) == ["t2", "t9"])
        #expect(try await r.count(appID: "app") == 10)
        #expect(try await r.count(appID: "other") == 1)
        let d = try #require(try await r.device(appID: "app", token: "t1"))
        #expect(d.provider == .fcm && d.tags.sorted() == ["beta", "vip"] && d.userID == "u1")
    }

    @Test(arguments: Kind.allCases)
    func upsertUpdatesAndRemoveForgets(_ kind: Kind) async throws {
        let (r, _) = try await Self.make(kind)
        try await r.upsert(Device(appID: "app", token: "a", platform: .ios, tags: ["x"]))
        try await r.upsert(Device(appID: "app", token: "a", platform: .ios, userID: "me", tags: ["y"], locale: "fr_FR"))
        let d = try await r.device(appID: "app", token: "a")
        #expect(d?.tags == ["y"] && d?.userID == "me" && d?.locale == "fr_FR")
        #expect(try await Self.collect(r, .tag("x")).isEmpty)
        #expect(try await r.count(appID: "app") == 1)
        #expect(try await r.remove(appID: "app", token: "a"))
        #expect(try await r.remove(appID: "app", token: "a") == false)
        #expect(try await Self.collect(r, .tag("y")).isEmpty)
    }

    /// Where a device's notification permission stands is kept as its app last said; a registration that does not
    /// say keeps it (an import, a server-side upsert); the counts by permission are the app's own.
    @Test(arguments: Kind.allCases)
    func permissionIsKeptAsLastReportedAndCounted(_ kind: Kind) async throws {
        let (r, _) = try await Self.make(kind)
        try await r.upsert(Device(appID: "app", token: "a", platform: .ios, permission: .authorized))
        try await r.upsert(Device(appID: "app", token: "b", platform: .ios, permission: .denied))
        try await r.upsert(Device(appID: "app", token: "c", platform: .android))
        try await r.upsert(Device(appID: "other", token: "a", platform: .ios, permission: .denied))
        // a turned notifications off; b registers again without saying (kept denied).
        try await r.upsert(Device(appID: "app", token: "a", platform: .ios, permission: .denied))
        try await r.upsert(Device(appID: "app", token: "b", platform: .ios, userID: "u"))
        #expect(try await r.device(appID: "app", token: "a")?.permission == .denied)
        let b = try await r.device(appID: "app", token: "b")
        #expect(b?.permission == .denied && b?.userID == "u")
        #expect(try await r.device(appID: "app", token: "c")?.permission == nil)
        #expect(try await r.permissions(appID: "app") == ["denied": 2, "unknown": 1])
        #expect(try await r.permissions(appID: "none").isEmpty)
        // Pages read for a fan-out carry it too.
        let (page, _) = try await r.page(appID: "app", audience: .all, after: 0, limit: 10)
        #expect(page.map { $0.permission?.rawValue ?? "-" } == ["denied", "denied", "-"])
        try await r.upsert(Device(appID: "app", token: "c", platform: .android, permission: .notDetermined))
        #expect(try await r.permissions(appID: "app") == ["denied": 2, "not_determined": 1])
    }

    @Test(arguments: Kind.allCases)
    func pruningRespectsARegistrationNewerThanTheProvidersTimestamp(_ kind: Kind) async throws {
        let (r, _) = try await Self.make(kind)
        let t = Date(timeIntervalSince1970: 1_800_000_000)
        try await r.upsert(Device(appID: "app", token: "old", platform: .ios, updatedAt: t))
        try await r.upsert(Device(appID: "app", token: "back", platform: .ios, updatedAt: t.addingTimeInterval(100)))
        #expect(try await r.prune(appID: "app", token: "old", invalidSince: t.addingTimeInterval(50)))
        #expect(try await r.prune(appID: "app", token: "back", invalidSince: t.addingTimeInterval(50)) == false)
        #expect(try await r.prune(appID: "app", token: "missing", invalidSince: nil) == false)
        #expect(try await r.count(appID: "app") == 1)
    }

    @Test(arguments: Kind.allCases)
    func fanOutEnqueuesEachMatchingDeviceOnce(_ kind: Kind) async throws {
        let (r, q) = try await Self.make(kind)
        let devices = (0..<5000).map {
            Device(
                appID: "app",
                token: "tok-\($0)",
                platform: $0 % 3 == 0 ? .android : .ios,
                tags: $0 % 2 == 0 ? ["even"] : []
            )
        }
        try await r.upsert(contentsOf: devices)
        let n = try await FanOut(pageSize: 333).enqueue(
            FanOutRequest(notificationID: "n", appID: "app", audience: .tag("even"), notBefore: Date()),
            registry: r,
            queue: q
        )
        #expect(n == 2500)
        let deliveries = try await q.deliveries(notificationID: "n")
        #expect(deliveries.count == 2500 && Set(deliveries.map(\.target)).count == 2500)
        #expect(
            deliveries.filter { $0.provider == .fcm }.count == (0..<5000).filter { $0 % 2 == 0 && $0 % 3 == 0 }.count
        )
    }
}
