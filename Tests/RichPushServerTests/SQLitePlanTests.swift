import Foundation
import GRDB
import Testing

@testable import RichPushServer

/// What SQLite's planner makes of the registry's reads that grow with an app: each must go along an index from
/// where it stands, never read the app whole. SQLite keeps no statistics here, so a plan is the same for ten
/// devices as for a million: these plans are the ones a large app gets.
@Suite struct SQLitePlanTests {
    static func registry() throws -> (DatabasePool, SQLiteDeviceRegistry) {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("plan-\(UUID().uuidString).sqlite")
        let pool = try SQLiteDeliveryQueue.openPool(path: path.path)
        _ = try SQLiteDeliveryQueue(pool: pool)
        return (pool, try SQLiteDeviceRegistry(pool: pool))
    }

    static func plan(_ pool: DatabasePool, _ sql: String, _ arguments: StatementArguments) async throws -> String {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + sql, arguments: arguments).map { $0["detail"] as String }
        }.joined(separator: "\n")
    }

    static func plan(_ pool: DatabasePool, _ query: RichPushServer.SQL) async throws -> String {
        let (sql, arguments) = query.sqlite
        return try await plan(pool, sql, arguments)
    }

    @Test func theSearchReadsEachIndexFromTheCursor() async throws {
        let (pool, _) = try Self.registry()
        let list = try await Self.plan(pool, SQLiteDeviceRegistry.listSQL, ["app", 10, 20])
        #expect(list == "SEARCH devices USING INDEX devices_app (app_id=? AND id>?)", "\(list)")
        let search = try await Self.plan(
            pool,
            SQLiteDeviceRegistry.searchSQL,
            ["app", 10, "ab", "ab\u{10FFFF}", "ab", 20]
        )
        #expect(search.contains("(app_id=? AND token>? AND token<?)"), "\(search)")
        #expect(search.contains("devices_user (app_id=? AND user_id=? AND id>?)"), "\(search)")
        #expect(search.contains("PRIMARY KEY (tag=? AND device_id>?)"), "\(search)")
        #expect(!search.contains("SCAN devices"), "\(search)")
    }

    @Test func aFanOutsChunksReadFromWhereTheyStand() async throws {
        let (pool, _) = try Self.registry()
        let all = try #require(AudienceFilter(.all, appID: "app"))
        let byToken = try await Self.plan(pool, all.chunkEnd(after: .token("ab"), limit: 50_000))
        #expect(byToken.contains("(app_id=? AND token>?)") && !byToken.contains("TEMP B-TREE"), "\(byToken)")
        let byRow = try await Self.plan(pool, all.chunkEnd(after: .id(7), limit: 50_000))
        #expect(byRow.contains("devices_app (app_id=? AND id>?)") && !byRow.contains("TEMP B-TREE"), "\(byRow)")
        for audience in [Audience.tag("vip"), .topic("news")] {
            let filter = try #require(AudienceFilter(audience, appID: "app"))
            let chunk = try await Self.plan(pool, filter.chunkEnd(after: .id(7), limit: 50_000))
            #expect(chunk.contains("PRIMARY KEY (") && !chunk.contains("TEMP B-TREE"), "\(chunk)")
            let range = try await Self.plan(
                pool,
                RichPushServer.SQL(
                    "SELECT count(*) FROM \(filter.from) WHERE \(filter.condition) AND \(filter.chunk(after: .id(7), upTo: .id(9)))"
                )
            )
            #expect(range.contains("AND device_id>? AND device_id<?)"), "\(range)")
        }
        let user = try #require(AudienceFilter(.user("u1"), appID: "app"))
        let userChunk = try await Self.plan(pool, user.chunkEnd(after: .id(7), limit: 50_000))
        #expect(userChunk.contains("devices_user (app_id=? AND user_id=? AND id>?)"), "\(userChunk)")
    }

    /// The search's pages: a tag another app also uses fills no page of this app's, and the pages go on to the end.
    @Test func theSearchPagesThroughOneAppsMatches() async throws {
        let (_, registry) = try Self.registry()
        for i in 0..<7 {
            try await registry.upsert(Device(appID: "other", token: "o\(i)", platform: .ios, tags: ["vip"]))
            try await registry.upsert(
                Device(
                    appID: "app",
                    token: "a\(i)",
                    platform: .ios,
                    userID: i == 6 ? "vip" : nil,
                    tags: i < 4 ? ["vip"] : []
                )
            )
        }
        var found: [String] = []
        var after: Int64 = 0
        while true {
            let page = try await registry.search(appID: "app", matching: "vip", after: after, limit: 2)
            found += page.devices.map(\.token)
            guard let next = page.next else { break }
            after = next
        }
        #expect(found == ["a0", "a1", "a2", "a3", "a6"])
        let prefix = try await registry.search(appID: "app", matching: "a", after: 0, limit: 10)
        #expect(prefix.devices.map(\.token) == (0..<7).map { "a\($0)" } && prefix.next == nil)
        let everyone = try await registry.search(appID: "app", matching: "", after: 0, limit: 7)
        #expect(everyone.devices.count == 7 && everyone.next != nil)
    }

    /// A list named in `IN (…)` is padded with its last value to a power of two, so that its statements take a few
    /// shapes; the values and their order stay, and a list of 1,024 or more is left as it is.
    @Test func listsInINArePaddedToAFewShapes() {
        #expect([Int64]().paddedForIN().isEmpty)
        #expect([7].paddedForIN() == [7])
        #expect([1, 2, 3].paddedForIN() == [1, 2, 3, 3])
        let claim = Array(Int64(1)...500)
        #expect(claim.paddedForIN().count == 512 && Array(claim.paddedForIN().prefix(500)) == claim)
        #expect(Set(claim.paddedForIN().suffix(12)) == [500])
        #expect(Array(1...1_024).paddedForIN().count == 1_024 && Array(1...1_500).paddedForIN().count == 1_500)
        let shapes = Set((1...1_023).map { Array(repeating: 0, count: $0).paddedForIN().count })
        #expect(shapes.count == 11)
    }
}
