import Foundation
import PostgresNIO

/// The device registry in PostgreSQL, with tags and topics in their own indexed tables; pages follow the row id,
/// so a fan-out to millions of devices streams in a stable order.
public final class PostgresDeviceRegistry: DeviceRegistry {
    let db: PostgresDatabase

    public init(database: PostgresDatabase) { db = database }

    static let deviceColumns = "d.id, d.app_id, d.token, d.platform, d.provider, d.user_id, d.locale, d.time_zone, d.app_version, d.updated_at"

    public func upsert(_ d: Device) async throws {
        try await db.transaction { c in try await Self.upsert(d, on: c, logger: self.db.logger) }
    }

    /// Many devices in one transaction (imports, benchmarks).
    public func upsert(contentsOf devices: [Device]) async throws {
        try await db.transaction { c in
            for d in devices { try await Self.upsert(d, on: c, logger: self.db.logger) }
        }
    }

    static func upsert(_ d: Device, on c: PostgresConnection, logger: Logger) async throws {
        let rows = try await c.query("""
            INSERT INTO devices (app_id, token, platform, provider, user_id, locale, time_zone, app_version, updated_at)
            VALUES (\(d.appID), \(d.token), \(d.platform.rawValue), \(d.provider.rawValue), \(d.userID), \(d.locale), \(d.timeZone), \(d.appVersion), \(d.updatedAt))
            ON CONFLICT (app_id, token) DO UPDATE SET platform = excluded.platform, provider = excluded.provider, user_id = excluded.user_id,
                locale = excluded.locale, time_zone = excluded.time_zone, app_version = excluded.app_version, updated_at = excluded.updated_at
            RETURNING id
            """, logger: logger).collect()
        guard let id = try rows.first?.decode(Int64.self) else { return }
        // Lists replaced whole, each in one statement.
        _ = try await c.query("DELETE FROM device_tags WHERE device_id = \(id)", logger: logger).collect()
        _ = try await c.query("DELETE FROM device_topics WHERE device_id = \(id)", logger: logger).collect()
        let tags = Array(Set(d.tags)), topics = Array(Set(d.topics))
        if !tags.isEmpty {
            _ = try await c.query("INSERT INTO device_tags (device_id, tag) SELECT \(id), unnest(\(tags)::text[])", logger: logger).collect()
        }
        if !topics.isEmpty {
            _ = try await c.query("INSERT INTO device_topics (device_id, topic) SELECT \(id), unnest(\(topics)::text[])", logger: logger).collect()
        }
    }

    @discardableResult
    public func remove(appID: String, token: String) async throws -> Bool {
        // Tags and topics go with the device (ON DELETE CASCADE).
        !(try await db.rows("DELETE FROM devices WHERE app_id = \(appID) AND token = \(token) RETURNING id")).isEmpty
    }

    public func device(appID: String, token: String) async throws -> Device? {
        let rows = try await db.rows("""
            SELECT \(unescaped: Self.deviceColumns),
                ARRAY(SELECT tag FROM device_tags WHERE device_id = d.id ORDER BY tag),
                ARRAY(SELECT topic FROM device_topics WHERE device_id = d.id ORDER BY topic)
            FROM devices d WHERE d.app_id = \(appID) AND d.token = \(token)
            """)
        guard let row = rows.first else { return nil }
        var device = try Self.device(row).1
        let columns = row.makeRandomAccess()
        device.tags = try columns[10].decode([String].self)
        device.topics = try columns[11].decode([String].self)
        return device
    }

    public func page(appID: String, audience: Audience, after cursor: Int64, limit: Int) async throws -> (devices: [Device], next: Int64?) {
        let rows: [PostgresRow]
        if case .tokens(let tokens) = audience {
            let wanted = Array(Set(tokens))
            guard !wanted.isEmpty else { return ([], nil) }
            rows = try await db.rows("""
                SELECT \(unescaped: Self.deviceColumns) FROM devices d
                WHERE d.app_id = \(appID) AND d.token = ANY(\(wanted)::text[]) AND d.id > \(cursor) ORDER BY d.id LIMIT \(limit)
                """)
        } else {
            guard let sql = Self.audienceSQL(audience, appID: appID) else { return ([], nil) }
            var q = PostgresQuery(unsafeSQL: "SELECT \(Self.deviceColumns) FROM \(sql.from) WHERE \(sql.condition) AND d.id > $\(sql.binds.count + 1) ORDER BY d.id LIMIT $\(sql.binds.count + 2)", binds: sql.binds)
            q.binds.append(cursor)
            q.binds.append(limit)
            rows = try await db.rows(q)
        }
        let pairs = try rows.map(Self.device)
        return (pairs.map(\.1), pairs.count == limit ? pairs.last?.0 : nil)
    }

    @discardableResult
    public func prune(appID: String, token: String, invalidSince: Date?) async throws -> Bool {
        // Not when the device registered again after the provider said it was gone.
        let rows = try await db.rows("""
            DELETE FROM devices WHERE app_id = \(appID) AND token = \(token) AND (\(invalidSince)::timestamptz IS NULL OR updated_at <= \(invalidSince))
            RETURNING id
            """)
        return !rows.isEmpty
    }

    public func count(appID: String) async throws -> Int {
        try await db.rows("SELECT count(*) FROM devices WHERE app_id = \(appID)").first?.decode(Int.self) ?? 0
    }

    /// A device from a row of ``deviceColumns`` (without its lists), with its row id.
    static func device(_ row: PostgresRow) throws -> (Int64, Device) {
        let columns = row.makeRandomAccess()
        func text(_ i: Int) throws -> String { try columns[i].decode(String.self) }
        func optional(_ i: Int) throws -> String? { try columns[i].decode(String?.self) }
        let device = Device(
            appID: try text(1), token: try text(2), platform: Device.Platform(rawValue: try text(3)) ?? .ios,
            provider: DeliveryProvider(rawValue: try text(4)), userID: try optional(5), locale: try optional(6), timeZone: try optional(7),
            appVersion: try optional(8), updatedAt: try columns[9].decode(Date.self))
        return (try columns[0].decode(Int64.self), device)
    }

    /// The devices of a registry audience as SQL over `d` (devices) and its binds; nil for token lists and
    /// audiences that are not the registry's.
    static func audienceSQL(_ audience: Audience, appID: String) -> (from: String, condition: String, binds: PostgresBindings)? {
        var binds = PostgresBindings()
        switch audience {
        case .all:
            binds.append(appID)
            return ("devices d", "d.app_id = $1", binds)
        case .user(let u):
            binds.append(appID)
            binds.append(u)
            return ("devices d", "d.app_id = $1 AND d.user_id = $2", binds)
        case .tag(let t):
            binds.append(t)
            binds.append(appID)
            return ("device_tags g JOIN devices d ON d.id = g.device_id", "g.tag = $1 AND d.app_id = $2", binds)
        case .topic(let t):
            binds.append(t)
            binds.append(appID)
            return ("device_topics g JOIN devices d ON d.id = g.device_id", "g.topic = $1 AND d.app_id = $2", binds)
        case .tokens, .providerTokens, .fcmTopic, .fcmCondition:
            return nil
        }
    }

    /// How many devices of a registry audience each provider reaches, counted in SQL (nil for the others).
    func countByProviderInDatabase(appID: String, audience: Audience) async throws -> [DeliveryProvider: Int]? {
        guard let sql = Self.audienceSQL(audience, appID: appID) else { return nil }
        var out: [DeliveryProvider: Int] = [:]
        let q = PostgresQuery(unsafeSQL: "SELECT d.provider, count(*) FROM \(sql.from) WHERE \(sql.condition) GROUP BY d.provider", binds: sql.binds)
        for row in try await db.rows(q) {
            let (provider, n) = try row.decode((String, Int).self)
            if let p = DeliveryProvider(rawValue: provider) { out[p] = n }
        }
        return out
    }

    /// How many devices of a registry audience there are after a row id (nil for the others).
    func countInDatabase(appID: String, audience: Audience, after cursor: Int64 = 0) async throws -> Int? {
        guard let sql = Self.audienceSQL(audience, appID: appID) else { return nil }
        var q = PostgresQuery(unsafeSQL: "SELECT count(*) FROM \(sql.from) WHERE \(sql.condition) AND d.id > $\(sql.binds.count + 1)", binds: sql.binds)
        q.binds.append(cursor)
        return try await db.rows(q).first?.decode(Int.self) ?? 0
    }
}
