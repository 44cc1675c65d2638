import Foundation
import PostgresNIO
import Testing

@testable import RichPushServer

/// Read routes on a large registry: with 1,000,000 devices of one app in PostgreSQL, the device search reads its
/// indexes (no sequential scan) and only about a page of rows, whatever is asked: a token prefix, a user id, a tag,
/// nothing (the plain list), or a value that matches nothing. The one-`OR` query this replaced is measured beside
/// it: for a value that matches nothing it walked every device of the app.
@Suite struct PostgresScaleTests {
    /// The plan's text for a query, run (`EXPLAIN ANALYZE`).
    static func plan(_ db: RichPushServer.PostgresDatabase, _ query: PostgresQuery) async throws -> [String] {
        try await db.rows(PostgresQuery(unsafeSQL: "EXPLAIN (ANALYZE, COSTS OFF) " + query.sql, binds: query.binds))
            .map { try $0.decode(String.self) }
    }

    /// Rows the plan's scans read, all loops counted: those they produced and those their filters threw away.
    static func rowsRead(_ plan: [String]) -> Int {
        var total = 0
        var loops = 1
        for line in plan {
            if line.contains("Scan"),
                let r = line.range(of: #"rows=(\d+) loops=(\d+)"#, options: .regularExpression)
            {
                let parts = line[r].split(separator: " ").map { $0.split(separator: "=")[1] }
                loops = Int(parts[1]) ?? 1
                total += (Int(parts[0]) ?? 0) * loops
            } else if let r = line.range(of: #"Rows Removed by Filter: \d+"#, options: .regularExpression) {
                total += (Int(line[r].split(separator: " ").last ?? "") ?? 0) * loops
            }
        }
        return total
    }

    @Test func aMillionDevicesAreSearchedByIndexAPageAtATime() async throws {
        let backend = try await PostgresFixture.backend()
        defer { Task { await backend.close() } }
        let db = backend.database
        let started = Date()
        // One app with 1,000,000 devices (a user id on every tenth, tag-N on every seventh), another with a few.
        try await db.rows(
            """
            INSERT INTO devices (app_id, token, platform, provider, user_id, updated_at)
            SELECT 'app_big', md5(i::text) || md5((i + 7)::text), 'ios', 'apns',
                   CASE WHEN i % 10 = 0 THEN 'user-' || (i / 10) END, now()
            FROM generate_series(1, 1000000) AS i
            """
        )
        try await db.rows(
            """
            INSERT INTO device_tags (device_id, tag)
            SELECT id, 'tag-' || (id % 50) FROM devices WHERE app_id = 'app_big' AND id % 7 = 0
            """
        )
        try await db.rows(
            """
            INSERT INTO devices (app_id, token, platform, provider, user_id, updated_at)
            SELECT 'app_small', md5('s' || i::text) || md5(i::text), 'android', 'fcm', 'user-10', now()
            FROM generate_series(1, 100) AS i
            """
        )
        try await db.rows("ANALYZE devices")
        try await db.rows("ANALYZE device_tags")
        let seeded = Date().timeIntervalSince(started)
        let someToken = try #require(
            try await db.rows("SELECT token FROM devices WHERE app_id = 'app_big' ORDER BY id OFFSET 500000 LIMIT 1")
                .first?.decode(String.self)
        )
        var report: [String] = []
        for (what, q) in [
            ("token prefix", String(someToken.prefix(8))), ("user id", "user-77777"), ("tag", "tag-3"),
            ("the whole list", ""), ("nothing matches", "no-such-thing"),
        ] {
            let query = PostgresDeviceRegistry.searchQuery(appID: "app_big", matching: q, after: 0, limit: 20)
            let plan = try await Self.plan(db, query)
            let text = plan.joined(separator: "\n")
            #expect(!text.contains("Seq Scan"), "\(what): \(text)")
            let read = Self.rowsRead(plan)
            #expect(read <= 2_000, "\(what): \(read) rows read\n\(text)")
            let found = try await backend.registry.search(appID: "app_big", matching: q, after: 0, limit: 20)
            #expect(q == "no-such-thing" ? found.devices.isEmpty : !found.devices.isEmpty, "\(what)")
            #expect(found.devices.allSatisfy { $0.appID == "app_big" })
            report.append("\(what): \(read) rows")
        }
        // The second app's user-10 devices are not the first app's.
        let user10 = try await backend.registry.search(appID: "app_big", matching: "user-10", after: 0, limit: 20)
        #expect(user10.devices.count == 1)

        // The query this replaced: one OR, walked in id order.
        let old: PostgresQuery = """
            SELECT d.id FROM devices d WHERE d.app_id = 'app_big' AND d.id > 0
              AND ((d.token COLLATE "C" >= 'no-such-thing' AND d.token COLLATE "C" < \("no-such-thing\u{10FFFF}"))
                   OR d.user_id = 'no-such-thing'
                   OR d.id IN (SELECT device_id FROM device_tags WHERE tag = 'no-such-thing'))
            ORDER BY d.id LIMIT 20
            """
        let oldRead = Self.rowsRead(try await Self.plan(db, old))
        #expect(oldRead > 100_000, "the old query read \(oldRead) rows: the comparison no longer shows the problem")
        print(
            "registry scale test: 1,000,000 devices seeded in \(Int(seeded)) s; rows read per search page: "
                + report.joined(separator: ", ") + "; the one-OR query before, for nothing: \(oldRead) rows"
        )
    }
}
