import Foundation
import GRDB

/// The device registry in the embedded SQLite database, with tags and topics in their own indexed tables.
public final class SQLiteDeviceRegistry: DeviceRegistry {
    let pool: DatabasePool

    public init(pool: DatabasePool) throws {
        self.pool = pool
        try Self.migrator.migrate(pool)
    }

    /// Opens its own database file.
    public convenience init(path: String) throws {
        try self.init(pool: try SQLiteDeliveryQueue.openPool(path: path))
    }

    static var migrator: DatabaseMigrator {
        var m = DatabaseMigrator()
        m.registerMigration("devices-v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE devices (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        app_id TEXT NOT NULL,
                        token TEXT NOT NULL,
                        platform TEXT NOT NULL,
                        provider TEXT NOT NULL,
                        user_id TEXT,
                        locale TEXT,
                        time_zone TEXT,
                        app_version TEXT,
                        updated_at REAL NOT NULL,
                        UNIQUE(app_id, token)
                    );
                    CREATE INDEX devices_user ON devices(app_id, user_id, id);
                    CREATE TABLE device_tags (device_id INTEGER NOT NULL REFERENCES devices(id) ON DELETE CASCADE, tag TEXT NOT NULL, PRIMARY KEY (tag, device_id)) WITHOUT ROWID;
                    CREATE TABLE device_topics (device_id INTEGER NOT NULL REFERENCES devices(id) ON DELETE CASCADE, topic TEXT NOT NULL, PRIMARY KEY (topic, device_id)) WITHOUT ROWID;
                    CREATE INDEX device_tags_device ON device_tags(device_id);
                    CREATE INDEX device_topics_device ON device_topics(device_id);
                    """
            )
        }
        m.registerMigration("devices-permission") { db in try db.execute(sql: DeviceSQL.permissionColumn) }
        m.registerMigration("devices-count-v1") { db in
            // Each app's count of devices, kept by triggers (RegistrationLimits).
            try db.execute(sql: AppCountSQL.sqlite(table: "devices", kind: AppCountSQL.devices))
        }
        m.registerMigration("devices-by-app") { db in
            // An app's devices in row order (PostgreSQL's devices_app): a page of a large app, or a fan-out begun in
            // row order, read from where it stands, where the planner used to read the whole app and sort it.
            try db.execute(sql: "CREATE INDEX devices_app ON devices(app_id, id)")
        }
        return m
    }

    public func upsert(_ d: Device) async throws {
        try await pool.write { db in try Self.upsert(d, in: db) }
    }

    public func register(_ d: Device, owner: RegistrationOwner, limits: RegistrationLimits) async throws {
        try await pool.write { db in
            // One writer at a time: what is counted is what the insert meets.
            let known = try Int64.fetchOne(
                db,
                sql: "SELECT id FROM devices WHERE app_id = ? AND token = ?",
                arguments: [d.appID, d.token]
            )
            if known == nil,
                try Int.fetchOne(db, query: AppCountSQL.total(d.appID, AppCountSQL.devices)) ?? 0
                    >= limits.devicesPerApp
            {
                throw QuotaReached.devices(limits.devicesPerApp)
            }
            let user = try Self.upsert(d, keepsUser: owner == .keepsKnown, in: db)
            if let user, limits.devicesPerUser < Int.max {
                // The user's devices by the (app_id, user_id, id) index: as many rows as the bound, and one.
                let past = try Int64.fetchAll(
                    db,
                    sql: """
                        SELECT id FROM devices WHERE app_id = ? AND user_id = ?
                        ORDER BY updated_at DESC, id DESC LIMIT -1 OFFSET ?
                        """,
                    arguments: [d.appID, user, limits.devicesPerUser]
                )
                for id in past { try Self.delete(id, in: db) }
            }
        }
    }

    /// Many devices in one transaction (imports, benchmarks).
    public func upsert(contentsOf devices: [Device]) async throws {
        try await pool.write { db in
            for d in devices { try Self.upsert(d, in: db) }
        }
    }

    /// Inserts or updates a device with its lists; returns the user id it holds now. With `keepsUser` a known
    /// token keeps its user (a public registration without a proof).
    @discardableResult
    static func upsert(_ d: Device, keepsUser: Bool = false, in db: Database) throws -> String? {
        // Cached statements: a bulk import parses each SQL once.
        let insert = try db.cachedStatement(
            sql: """
                INSERT INTO devices (app_id, token, platform, provider, user_id, locale, time_zone, app_version, permission, updated_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT(app_id, token) DO UPDATE SET platform = excluded.platform, provider = excluded.provider,
                    user_id = CASE WHEN ? THEN devices.user_id ELSE excluded.user_id END,
                    locale = excluded.locale, time_zone = excluded.time_zone, app_version = excluded.app_version,
                    permission = COALESCE(excluded.permission, devices.permission), updated_at = excluded.updated_at
                RETURNING id, user_id
                """
        )
        guard
            let row = try Row.fetchOne(
                insert,
                arguments: [
                    d.appID, d.token, d.platform.rawValue, d.provider.rawValue, keepsUser ? nil : d.userID, d.locale,
                    d.timeZone, d.appVersion, d.permission?.rawValue, d.updatedAt.timeIntervalSince1970, keepsUser,
                ]
            )
        else { throw DatabaseError(resultCode: .SQLITE_ERROR, message: "an upsert returned no row") }
        let id: Int64 = row[0]
        try Self.deleteLists(of: id, in: db)
        let tag = try db.cachedStatement(sql: "INSERT INTO device_tags (device_id, tag) VALUES (?, ?)")
        for t in Set(d.tags) { try tag.execute(arguments: [id, t]) }
        let topic = try db.cachedStatement(sql: "INSERT INTO device_topics (device_id, topic) VALUES (?, ?)")
        for t in Set(d.topics) { try topic.execute(arguments: [id, t]) }
        return row[1]
    }

    /// A device's tags and topics.
    static func deleteLists(of id: Int64, in db: Database) throws {
        try db.cachedStatement(sql: "DELETE FROM device_tags WHERE device_id = ?").execute(arguments: [id])
        try db.cachedStatement(sql: "DELETE FROM device_topics WHERE device_id = ?").execute(arguments: [id])
    }

    /// A device with its tags and topics.
    static func delete(_ id: Int64, in db: Database) throws {
        try deleteLists(of: id, in: db)
        try db.cachedStatement(sql: "DELETE FROM devices WHERE id = ?").execute(arguments: [id])
    }

    @discardableResult
    public func remove(appID: String, token: String) async throws -> Bool {
        try await pool.write { db in
            guard
                let id = try Int64.fetchOne(
                    db,
                    sql: "SELECT id FROM devices WHERE app_id = ? AND token = ?",
                    arguments: [appID, token]
                )
            else { return false }
            try Self.delete(id, in: db)
            return true
        }
    }

    public func device(appID: String, token: String) async throws -> Device? {
        try await pool.read { db in
            guard
                let row = try Row.fetchOne(
                    db,
                    sql: "SELECT * FROM devices WHERE app_id = ? AND token = ?",
                    arguments: [appID, token]
                )
            else { return nil }
            return try Self.device(row, db: db)
        }
    }

    public func page(
        appID: String,
        audience: Audience,
        after cursor: Int64,
        limit: Int
    ) async throws -> (devices: [Device], next: Int64?) {
        try await pool.read { db in
            let rows: [Row]
            switch audience {
            case .all:
                rows = try Row.fetchAll(db, sql: Self.listSQL, arguments: [appID, cursor, limit])
            case .user(let u):
                rows = try Row.fetchAll(
                    db,
                    sql: "SELECT * FROM devices WHERE app_id = ? AND user_id = ? AND id > ? ORDER BY id LIMIT ?",
                    arguments: [appID, u, cursor, limit]
                )
            case .tag(let t):
                rows = try Row.fetchAll(
                    db,
                    sql: """
                        SELECT d.* FROM device_tags g JOIN devices d ON d.id = g.device_id
                        WHERE g.tag = ? AND g.device_id > ? AND d.app_id = ? ORDER BY g.device_id LIMIT ?
                        """,
                    arguments: [t, cursor, appID, limit]
                )
            case .topic(let t):
                rows = try Row.fetchAll(
                    db,
                    sql: """
                        SELECT d.* FROM device_topics g JOIN devices d ON d.id = g.device_id
                        WHERE g.topic = ? AND g.device_id > ? AND d.app_id = ? ORDER BY g.device_id LIMIT ?
                        """,
                    arguments: [t, cursor, appID, limit]
                )
            case .tokens(let tokens):
                let wanted = Array(Set(tokens)).sorted()
                guard !wanted.isEmpty else { return ([], nil) }
                let marks = Array(repeating: "?", count: wanted.count).joined(separator: ",")
                var args: [any DatabaseValueConvertible] = [appID]
                args += wanted
                args += [cursor, limit]
                rows = try Row.fetchAll(
                    db,
                    sql:
                        "SELECT * FROM devices WHERE app_id = ? AND token IN (\(marks)) AND id > ? ORDER BY id LIMIT ?",
                    arguments: StatementArguments(args)
                )
            case .providerTokens, .fcmTopic, .fcmCondition, .apnsChannel:
                return ([], nil)  // not registry audiences
            }
            let devices = try rows.map { try Self.device($0, db: db, withLists: false) }
            let next: Int64? = rows.count == limit ? rows.last?["id"] : nil
            return (devices, next)
        }
    }

    @discardableResult
    public func prune(appID: String, token: String, invalidSince: Date?) async throws -> Bool {
        try await pool.write { db in
            guard
                let row = try Row.fetchOne(
                    db,
                    sql: "SELECT id, updated_at FROM devices WHERE app_id = ? AND token = ?",
                    arguments: [appID, token]
                )
            else { return false }
            let updated: Double = row["updated_at"]
            // registered again since
            if let since = invalidSince, updated > since.timeIntervalSince1970 { return false }
            try Self.delete(row["id"], in: db)
            return true
        }
    }

    /// Where an in-database fan-out stands: the last device done and how many deliveries so far.
    public struct FanOutProgress: Sendable, Hashable {
        /// Nil: from the start, in the audience's own order.
        public var cursor: FanOutCursor?
        public var inserted: Int
        public init(cursor: FanOutCursor? = nil, inserted: Int = 0) {
            self.cursor = cursor
            self.inserted = inserted
        }
    }

    /// How many devices of an audience each provider reaches, counted in SQL (nil for token lists).
    func countByProviderInDatabase(appID: String, audience: Audience) async throws -> [DeliveryProvider: Int]? {
        guard let filter = AudienceFilter(audience, appID: appID) else { return nil }
        return try await pool.read { db in
            var out: [DeliveryProvider: Int] = [:]
            for row in try Row.fetchAll(db, query: filter.countByProvider) {
                out[DeliveryProvider(rawValue: row[0])] = row[1]
            }
            return out
        }
    }

    /// How many devices an audience matches (for spreading a send).
    func countInDatabase(appID: String, audience: Audience, after cursor: FanOutCursor? = nil) async throws -> Int? {
        guard let filter = AudienceFilter(audience, appID: appID) else { return nil }
        let from = cursor ?? filter.cursor(storedID: 0, storedToken: "")
        return try await pool.read { db in try Int.fetchOne(db, query: filter.count(after: from)) ?? 0 }
    }

    /// Fan-out inside SQLite when the queue lives in the same database: `INSERT … SELECT` in chunks, each its
    /// own transaction, so that no row passes through Swift and writers are never blocked for long.
    ///
    /// With a `spread` > 0 the deliveries' times run evenly from `notBefore` to `notBefore + spread` over the
    /// `total` devices, in row order. `checkpoint` runs inside each chunk's transaction with the progress after
    /// it (the server stores it with the notification, so that a fan-out cut short by a crash resumes exactly).
    func fanOutInDatabase(
        _ r: FanOutRequest,
        chunk: Int,
        total: Int = 0,
        from start: FanOutProgress = .init(),
        checkpoint: @escaping @Sendable (Database, FanOutProgress, _ finished: Bool) throws -> Void = { _, _, _ in }
    ) async throws -> Int? {
        guard let filter = AudienceFilter(r.audience, appID: r.appID) else { return nil }
        var progress = start
        let step = Spread.step(r.spread, count: total)
        let (notificationID, notBefore, expiresAt) = (r.notificationID, r.notBefore, r.expiresAt)
        while true {
            let before = progress
            let cursor = before.cursor ?? filter.cursor(storedID: 0, storedToken: "")
            let (after, finished): (FanOutProgress, Bool) = try await pool.write { db in
                let bound = filter.chunkEnd(after: cursor, limit: chunk)
                let read: FanOutCursor? =
                    switch cursor {
                    case .id: try Int64.fetchOne(db, query: bound).map { .id($0) }
                    case .token: try String.fetchOne(db, query: bound).map { .token($0) }
                    }
                guard let end = read else {
                    try checkpoint(db, before, true)
                    return (before, true)
                }
                // In the walk's order (for a whole app, the deliveries' index's order); spread sends number the
                // rows to space them, others need no window function.
                let order = filter.order(of: cursor)
                let times: SQL =
                    step > 0
                    ? "\(notBefore) + (\(before.inserted) + ROW_NUMBER() OVER (ORDER BY \(order)) - 1) * \(step)"
                    : "\(notBefore)"
                try db.execute(
                    query: """
                        INSERT INTO deliveries \(unescaped: Columns.deliveryInsert)
                        SELECT \(notificationID), d.app_id, d.provider, d.token, 'queued', \(times),
                            \(expiresAt), \(Date())
                        FROM \(filter.from) WHERE \(filter.condition) AND \(filter.chunk(after: cursor, upTo: end))
                        ORDER BY \(order)
                        """
                )
                let next = FanOutProgress(cursor: end, inserted: before.inserted + db.changesCount)
                try checkpoint(db, next, false)
                return (next, false)
            }
            progress = after
            if finished { return progress.inserted - start.inserted }
        }
    }

    public func search(
        appID: String,
        matching query: String,
        after cursor: Int64,
        limit: Int
    ) async throws -> (devices: [Device], next: Int64?) {
        try await pool.read { db in
            let limit = max(0, limit)
            let rows =
                query.isEmpty
                ? try Row.fetchAll(db, sql: Self.listSQL, arguments: [appID, cursor, limit])
                : try Row.fetchAll(
                    db,
                    sql: Self.searchSQL,
                    arguments: [appID, cursor, query, query + "\u{10FFFF}", query, limit]
                )
            let devices = try rows.map { try Self.device($0, db: db) }
            return (devices, rows.count == limit ? rows.last?["id"] : nil)
        }
    }

    /// A page of every device of an app (arguments: app, cursor, limit), along `(app_id, id)`.
    static let listSQL = "SELECT * FROM devices WHERE app_id = ? AND id > ? ORDER BY id LIMIT ?"

    /// A page of the search (arguments: app, cursor, query, query + U+10FFFF, query, limit): three branches,
    /// each along its own index and at most a page, merged and cut to the page. A user's devices on
    /// `(app_id, user_id, id)` and a tag's on its `(tag, device_id)` key, both from the cursor in row order; a token
    /// prefix as a range on `(app_id, token)` (every token from the query up to the query followed by the highest
    /// character), put in row order, so that its cost grows with the prefix's matches and not with the app. One
    /// condition over the app (the query this replaced) read every device of it, however rare the match.
    static let searchSQL = """
        SELECT * FROM devices WHERE app_id = ?1 AND id IN (
          SELECT id FROM (SELECT id FROM devices WHERE app_id = ?1 AND token >= ?3 AND token < ?4 AND +id > ?2
            ORDER BY +id LIMIT ?6)
          UNION ALL SELECT id FROM (SELECT id FROM devices WHERE app_id = ?1 AND user_id = ?5 AND id > ?2
            ORDER BY id LIMIT ?6)
          UNION ALL SELECT id FROM (SELECT g.device_id AS id FROM device_tags g CROSS JOIN devices x ON x.id = g.device_id
            WHERE g.tag = ?5 AND x.app_id = ?1 AND g.device_id > ?2 ORDER BY g.device_id LIMIT ?6)
        ) ORDER BY id LIMIT ?6
        """

    public func count(appID: String) async throws -> Int {
        try await pool.read { db in
            try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM devices WHERE app_id = ?", arguments: [appID]) ?? 0
        }
    }

    public func permissions(appID: String) async throws -> [String: Int] {
        try await pool.read { db in
            var counts: [String: Int] = [:]
            for row in try Row.fetchAll(db, query: DeviceSQL.permissions(appID)) { counts[row[0]] = row[1] }
            return counts
        }
    }

    /// A device from its row; tags and topics are read only when asked (a fan-out needs neither).
    static func device(_ row: Row, db: Database, withLists: Bool = true) throws -> Device {
        let id: Int64 = row["id"]
        let tags =
            withLists
            ? try String.fetchAll(
                db,
                sql: "SELECT tag FROM device_tags WHERE device_id = ? ORDER BY tag",
                arguments: [id]
            ) : []
        let topics =
            withLists
            ? try String.fetchAll(
                db,
                sql: "SELECT topic FROM device_topics WHERE device_id = ? ORDER BY topic",
                arguments: [id]
            ) : []
        return Device(
            appID: row["app_id"],
            token: row["token"],
            platform: Device.Platform(rawValue: row["platform"]) ?? .ios,
            provider: DeliveryProvider(rawValue: row["provider"]),
            userID: row["user_id"],
            tags: tags,
            topics: topics,
            locale: row["locale"],
            timeZone: row["time_zone"],
            appVersion: row["app_version"],
            permission: (row["permission"] as String?).flatMap(Device.Permission.init(rawValue:)),
            updatedAt: Date(timeIntervalSince1970: row["updated_at"])
        )
    }
}
