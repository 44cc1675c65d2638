import Foundation
import PostgresNIO

/// The device registry in PostgreSQL, with tags and topics in their own indexed tables; pages follow the row id,
/// so a fan-out to millions of devices streams in a stable order.
public final class PostgresDeviceRegistry: DeviceRegistry {
    let db: PostgresDatabase

    public init(database: PostgresDatabase) { db = database }

    static let deviceColumns =
        "d.id, d.app_id, d.token, d.platform, d.provider, d.user_id, d.locale, d.time_zone, d.app_version, d.updated_at, d.permission"

    public func upsert(_ d: Device) async throws {
        try await upsert(contentsOf: [d])
    }

    /// Any number of devices in one transaction of five statements (columns as arrays): a device's lists are
    /// replaced whole. A token given twice counts once, its last registration.
    public func upsert(contentsOf given: [Device]) async throws {
        var latest: [String: Int] = [:]
        for (i, d) in given.enumerated() { latest[d.appID + "\u{0}" + d.token] = i }
        let devices = given.indices.filter { latest[given[$0].appID + "\u{0}" + given[$0].token] == $0 }.map {
            given[$0]
        }
        guard !devices.isEmpty else { return }
        // Optional columns travel as text with a mask of which are present (bit 0 user, 1 locale, 2 zone, 3 version,
        // 4 permission).
        let masks = devices.map { d in
            (d.userID != nil ? 1 : 0) | (d.locale != nil ? 2 : 0) | (d.timeZone != nil ? 4 : 0)
                | (d.appVersion != nil ? 8 : 0) | (d.permission != nil ? 16 : 0)
        }
        let insert: PostgresQuery = """
            INSERT INTO devices (app_id, token, platform, provider, user_id, locale, time_zone, app_version, permission, updated_at)
            SELECT a, t, p, pr, CASE WHEN m & 1 <> 0 THEN u END, CASE WHEN m & 2 <> 0 THEN l END, CASE WHEN m & 4 <> 0 THEN z END,
                CASE WHEN m & 8 <> 0 THEN v END, CASE WHEN m & 16 <> 0 THEN pe END, to_timestamp(at)
            FROM unnest(\(devices.map(\.appID))::text[], \(devices.map(\.token))::text[], \(devices.map(\.platform.rawValue))::text[],
                \(devices.map(\.provider.rawValue))::text[], \(devices.map { $0.userID ?? "" })::text[], \(devices.map { $0.locale ?? "" })::text[],
                \(devices.map { $0.timeZone ?? "" })::text[], \(devices.map { $0.appVersion ?? "" })::text[],
                \(devices.map { $0.permission?.rawValue ?? "" })::text[], \(masks)::int8[],
                \(devices.map { $0.updatedAt.timeIntervalSince1970 })::float8[]) AS x(a, t, p, pr, u, l, z, v, pe, m, at)
            ON CONFLICT (app_id, token) DO UPDATE SET platform = excluded.platform, provider = excluded.provider, user_id = excluded.user_id,
                locale = excluded.locale, time_zone = excluded.time_zone, app_version = excluded.app_version,
                permission = COALESCE(excluded.permission, devices.permission), updated_at = excluded.updated_at
            RETURNING id, app_id, token
            """
        try await db.transaction { c in
            let logger = self.db.logger
            var ids: [String: Int64] = [:]
            for row in try await c.query(insert, logger: logger).collect() {
                let (id, app, token) = try row.decode((Int64, String, String).self)
                ids[app + "\u{0}" + token] = id
            }
            let all = Array(ids.values)
            _ = try await c.query("DELETE FROM device_tags WHERE device_id = ANY(\(all)::int8[])", logger: logger)
                .collect()
            _ = try await c.query("DELETE FROM device_topics WHERE device_id = ANY(\(all)::int8[])", logger: logger)
                .collect()
            var tagIDs: [Int64] = []
            var tags: [String] = []
            var topicIDs: [Int64] = []
            var topics: [String] = []
            for d in devices {
                guard let id = ids[d.appID + "\u{0}" + d.token] else { continue }
                for t in Set(d.tags) {
                    tagIDs.append(id)
                    tags.append(t)
                }
                for t in Set(d.topics) {
                    topicIDs.append(id)
                    topics.append(t)
                }
            }
            if !tags.isEmpty {
                _ = try await c.query(
                    "INSERT INTO device_tags (device_id, tag) SELECT * FROM unnest(\(tagIDs)::int8[], \(tags)::text[])",
                    logger: logger
                ).collect()
            }
            if !topics.isEmpty {
                _ = try await c.query(
                    "INSERT INTO device_topics (device_id, topic) SELECT * FROM unnest(\(topicIDs)::int8[], \(topics)::text[])",
                    logger: logger
                ).collect()
            }
        }
    }

    public func register(_ d: Device, owner: RegistrationOwner, limits: RegistrationLimits) async throws {
        let keep = owner == .keepsKnown
        let logger = db.logger
        try await db.transaction { c in
            // The app's count from its counter rows (a few rows, whatever its size), asked only of a new token.
            // Registrations through several nodes at once may each pass the bound by one; the next meets it.
            let full =
                try await c.query(
                    """
                    SELECT NOT EXISTS (SELECT 1 FROM devices WHERE app_id = \(d.appID) AND token = \(d.token))
                        AND (SELECT COALESCE(SUM(n), 0) FROM app_counts WHERE app_id = \(d.appID) AND kind = 'devices') >= \(limits.devicesPerApp)
                    """,
                    logger: logger
                ).collect().first?.decode(Bool.self) ?? false
            if full { throw QuotaReached.devices(limits.devicesPerApp) }
            let rows = try await c.query(
                """
                INSERT INTO devices (app_id, token, platform, provider, user_id, locale, time_zone, app_version, permission, updated_at)
                VALUES (\(d.appID), \(d.token), \(d.platform.rawValue), \(d.provider.rawValue), \(keep ? nil : d.userID), \(d.locale),
                    \(d.timeZone), \(d.appVersion), \(d.permission?.rawValue), \(d.updatedAt))
                ON CONFLICT (app_id, token) DO UPDATE SET platform = excluded.platform, provider = excluded.provider,
                    user_id = CASE WHEN \(keep) THEN devices.user_id ELSE excluded.user_id END,
                    locale = excluded.locale, time_zone = excluded.time_zone, app_version = excluded.app_version,
                    permission = COALESCE(excluded.permission, devices.permission), updated_at = excluded.updated_at
                RETURNING id, user_id
                """,
                logger: logger
            ).collect()
            guard let (id, user) = try rows.first?.decode((Int64, String?).self) else { return }
            _ = try await c.query("DELETE FROM device_tags WHERE device_id = \(id)", logger: logger).collect()
            _ = try await c.query("DELETE FROM device_topics WHERE device_id = \(id)", logger: logger).collect()
            let tags = Array(Set(d.tags))
            let topics = Array(Set(d.topics))
            if !tags.isEmpty {
                _ = try await c.query(
                    "INSERT INTO device_tags (device_id, tag) SELECT \(id), unnest(\(tags)::text[])",
                    logger: logger
                ).collect()
            }
            if !topics.isEmpty {
                _ = try await c.query(
                    "INSERT INTO device_topics (device_id, topic) SELECT \(id), unnest(\(topics)::text[])",
                    logger: logger
                ).collect()
            }
            guard let user, limits.devicesPerUser < Int.max else { return }
            // The user's devices by the (app_id, user_id, id) index: as many rows as the bound, and one.
            _ = try await c.query(
                """
                DELETE FROM devices WHERE id IN (
                    SELECT id FROM devices WHERE app_id = \(d.appID) AND user_id = \(user)
                    ORDER BY updated_at DESC, id DESC OFFSET \(limits.devicesPerUser))
                """,
                logger: logger
            ).collect()
        }
    }

    @discardableResult
    public func remove(appID: String, token: String) async throws -> Bool {
        // Tags and topics go with the device (ON DELETE CASCADE).
        !(try await db.rows("DELETE FROM devices WHERE app_id = \(appID) AND token = \(token) RETURNING id")).isEmpty
    }

    public func device(appID: String, token: String) async throws -> Device? {
        let rows = try await db.rows(
            """
            SELECT \(unescaped: Self.deviceColumns), \(unescaped: Self.listColumns) FROM devices d WHERE d.app_id = \(appID) AND d.token = \(token)
            """
        )
        return try rows.first.map(Self.deviceWithLists)?.1
    }

    /// A device's tags and topics, as two columns after ``deviceColumns``.
    static let listColumns =
        "ARRAY(SELECT tag FROM device_tags WHERE device_id = d.id ORDER BY tag), ARRAY(SELECT topic FROM device_topics WHERE device_id = d.id ORDER BY topic)"

    /// A device from a row of ``deviceColumns`` and ``listColumns``, with its row id.
    static func deviceWithLists(_ row: PostgresRow) throws -> (Int64, Device) {
        var (id, device) = try Self.device(row)
        let columns = row.makeRandomAccess()
        device.tags = try columns[11].decode([String].self)
        device.topics = try columns[12].decode([String].self)
        return (id, device)
    }

    public func page(
        appID: String,
        audience: Audience,
        after cursor: Int64,
        limit: Int
    ) async throws -> (devices: [Device], next: Int64?) {
        let rows: [PostgresRow]
        if case .tokens(let tokens) = audience {
            let wanted = Array(Set(tokens))
            guard !wanted.isEmpty else { return ([], nil) }
            rows = try await db.rows(
                """
                SELECT \(unescaped: Self.deviceColumns) FROM devices d
                WHERE d.app_id = \(appID) AND d.token = ANY(\(wanted)::text[]) AND d.id > \(cursor) ORDER BY d.id LIMIT \(limit)
                """
            )
        } else {
            guard let f = AudienceFilter.postgres(audience, appID: appID) else { return ([], nil) }
            let q: SQL = """
                SELECT \(unescaped: Self.deviceColumns) FROM \(f.from) WHERE \(f.condition) AND d.id > \(cursor)
                ORDER BY d.id LIMIT \(limit)
                """
            rows = try await db.rows(q.postgres)
        }
        let pairs = try rows.map(Self.device)
        return (pairs.map(\.1), pairs.count == limit ? pairs.last?.0 : nil)
    }

    @discardableResult
    public func prune(appID: String, token: String, invalidSince: Date?) async throws -> Bool {
        // Not when the device registered again after the provider said it was gone.
        let rows = try await db.rows(
            """
            DELETE FROM devices WHERE app_id = \(appID) AND token = \(token) AND (\(invalidSince)::timestamptz IS NULL OR updated_at <= \(invalidSince))
            RETURNING id
            """
        )
        return !rows.isEmpty
    }

    public func search(
        appID: String,
        matching query: String,
        after cursor: Int64,
        limit: Int
    ) async throws -> (devices: [Device], next: Int64?) {
        let rows = try await db.rows(Self.searchQuery(appID: appID, matching: query, after: cursor, limit: limit))
        let found = try rows.map(Self.deviceWithLists)
        return (found.map(\.1), rows.count == limit ? found.last?.0 : nil)
    }

    /// A page of the search: three branches, each reading its own index in id order and stopping at `limit`
    /// (a token prefix as a range on the byte-order token index, a user id on `(app_id, user_id, id)`, a tag on
    /// the tag's `(tag, device_id)` key), merged and cut to the page. A one-branch `OR` would walk the app's
    /// devices in id order, testing each: a million rows for a query that matches none.
    static func searchQuery(appID: String, matching query: String, after cursor: Int64, limit: Int) -> PostgresQuery {
        let n = max(0, limit)
        return """
            SELECT \(unescaped: deviceColumns), \(unescaped: listColumns)
            FROM devices d WHERE d.id IN (
                (SELECT id FROM devices WHERE app_id = \(appID) AND id > \(cursor)
                   AND token COLLATE "C" >= \(query) AND token COLLATE "C" < \(query + "\u{10FFFF}")
                 ORDER BY id LIMIT \(n))
                UNION ALL
                (SELECT id FROM devices WHERE app_id = \(appID) AND user_id = \(query) AND id > \(cursor)
                 ORDER BY id LIMIT \(n))
                UNION ALL
                (SELECT t.device_id FROM device_tags t JOIN devices x ON x.id = t.device_id
                 WHERE t.tag = \(query) AND x.app_id = \(appID) AND t.device_id > \(cursor)
                 ORDER BY t.device_id LIMIT \(n)))
            ORDER BY d.id LIMIT \(n)
            """
    }

    public func count(appID: String) async throws -> Int {
        try await db.rows("SELECT count(*) FROM devices WHERE app_id = \(appID)").first?.decode(Int.self) ?? 0
    }

    public func permissions(appID: String) async throws -> [String: Int] {
        var counts: [String: Int] = [:]
        for row in try await db.rows(DeviceSQL.permissions(appID).postgres) {
            let (permission, n) = try row.decode((String, Int).self)
            counts[permission] = n
        }
        return counts
    }

    /// A device from a row of ``deviceColumns`` (without its lists), with its row id.
    static func device(_ row: PostgresRow) throws -> (Int64, Device) {
        let columns = row.makeRandomAccess()
        func text(_ i: Int) throws -> String { try columns[i].decode(String.self) }
        func optional(_ i: Int) throws -> String? { try columns[i].decode(String?.self) }
        let device = Device(
            appID: try text(1),
            token: try text(2),
            platform: Device.Platform(rawValue: try text(3)) ?? .ios,
            provider: DeliveryProvider(rawValue: try text(4)),
            userID: try optional(5),
            locale: try optional(6),
            timeZone: try optional(7),
            appVersion: try optional(8),
            permission: try optional(10).flatMap(Device.Permission.init(rawValue:)),
            updatedAt: try columns[9].decode(Date.self)
        )
        return (try columns[0].decode(Int64.self), device)
    }

    /// How many devices of a registry audience each provider reaches, counted in SQL (nil for the others).
    func countByProviderInDatabase(appID: String, audience: Audience) async throws -> [DeliveryProvider: Int]? {
        guard let filter = AudienceFilter.postgres(audience, appID: appID) else { return nil }
        var out: [DeliveryProvider: Int] = [:]
        for row in try await db.rows(filter.countByProvider.postgres) {
            let (provider, n) = try row.decode((String, Int).self)
            out[DeliveryProvider(rawValue: provider)] = n
        }
        return out
    }

    /// How many devices of a registry audience there are after a fan-out's cursor (nil for the others).
    func countInDatabase(appID: String, audience: Audience, after cursor: FanOutCursor? = nil) async throws -> Int? {
        guard let filter = AudienceFilter.postgres(audience, appID: appID) else { return nil }
        let from = cursor ?? filter.cursor(storedID: 0, storedToken: "")
        return try await db.rows(filter.count(after: from).postgres).first?.decode(Int.self) ?? 0
    }
}
