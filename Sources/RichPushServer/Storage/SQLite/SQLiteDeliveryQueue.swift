import Foundation
import GRDB
import RichPushCore

/// The delivery queue in an embedded SQLite file (WAL): durable across crashes and restarts, claimed in
/// transactions so that two workers never hold the same delivery.
///
/// ```swift
/// let queue = try SQLiteDeliveryQueue(path: "richpush.sqlite")
/// try await queue.enqueue([NewDelivery(notificationID: id, appID: app, provider: .apns, target: token)])
/// let batch = try await queue.claim(owner: "worker-1", limit: 100, now: Date(), lease: 30)
/// ```
public final class SQLiteDeliveryQueue: DeliveryQueue {
    let pool: DatabasePool

    /// Opens (and creates or migrates) the database at `path`.
    public convenience init(path: String) throws {
        try self.init(pool: try Self.openPool(path: path))
    }

    /// Uses a database the server already opened (one pool per file: registry and queue share it).
    public init(pool: DatabasePool) throws {
        self.pool = pool
        try Self.migrator.migrate(pool)
    }

    /// The server's database: WAL, a busy timeout, NORMAL synchronous (durable at each checkpoint).
    /// With `backgroundCheckpoints` no commit runs a checkpoint itself: run a ``WALCheckpointer`` beside it
    /// (a checkpoint inside a commit made every request behind it wait: p99 accept latency 160 ms against 24 ms).
    /// A WAL file that grew under a burst of writes is cut back to ``walSizeLimit`` when it is next reset
    /// (`journal_size_limit`; without it the file keeps its largest size for good).
    public static func openPool(path: String, backgroundCheckpoints: Bool = false) throws -> DatabasePool {
        var config = Configuration()
        config.busyMode = .timeout(10)
        config.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
            try db.execute(sql: "PRAGMA journal_size_limit = \(walSizeLimit)")
            if backgroundCheckpoints { try db.execute(sql: "PRAGMA wal_autocheckpoint = 0") }
        }
        return try DatabasePool(path: path, configuration: config)
    }

    /// Bytes the WAL file is cut back to when it is reset.
    public static let walSizeLimit = 64 << 20

    static var migrator: DatabaseMigrator {
        var m = DatabaseMigrator()
        m.registerMigration("deliveries-v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE deliveries (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        notification_id TEXT NOT NULL,
                        app_id TEXT NOT NULL,
                        provider TEXT NOT NULL,
                        target TEXT NOT NULL,
                        state TEXT NOT NULL,
                        attempts INTEGER NOT NULL DEFAULT 0,
                        not_before REAL NOT NULL,
                        expires_at REAL,
                        lease_owner TEXT,
                        lease_until REAL,
                        reason TEXT,
                        provider_id TEXT,
                        updated_at REAL NOT NULL
                    );
                    CREATE INDEX deliveries_due ON deliveries(state, not_before);
                    CREATE INDEX deliveries_lease ON deliveries(state, lease_until);
                    CREATE INDEX deliveries_notification ON deliveries(notification_id);
                    """
            )
        }
        m.registerMigration("deliveries-by-target") { db in
            // A device's delivery of a notification found by its token in one index read (an app's report names
            // its token; a key every app ships may send that report, so it must not read the whole send).
            try db.execute(sql: "CREATE INDEX deliveries_notification_target ON deliveries(notification_id, target)")
        }
        m.registerMigration("deliveries-claimed-fairly-by-app") { db in
            // A claim takes each app's share in due order: the apps with queued deliveries are found by skipping
            // through this index, and each app's earliest by one range read of it. The due index it replaces
            // served only the claim in due order across all apps.
            try db.execute(
                sql: """
                    CREATE INDEX deliveries_due_by_app ON deliveries(state, app_id, not_before, id);
                    DROP INDEX deliveries_due;
                    """
            )
        }
        m.registerMigration("deliveries-queued-by-app") { db in
            // The same order, for the queued deliveries alone: a delivery enters the index when queued and leaves it
            // when claimed, where the full index moved each delivery's entry at its claim and again at its outcome
            // and kept every outcome's (a fan-out's inserts, claims and settles cost the node 15% more CPU for it).
            // `state` is in the entry so that each of the claim's reads is covered by the index.
            try db.execute(
                sql: """
                    CREATE INDEX deliveries_queued_by_app ON deliveries(app_id, state, not_before) WHERE state = 'queued';
                    DROP INDEX deliveries_due_by_app;
                    """
            )
        }
        m.registerMigration("webhooks-v1") { db in
            // Webhook endpoints and their events, beside the deliveries: a settle writes the events of the
            // outcomes it records in its own transaction (WebhookSQL).
            for statement in WebhookSQL.create(postgres: false) { try db.execute(sql: statement) }
        }
        return m
    }

    /// The journal mode in use (`wal`).
    public func journalMode() throws -> String {
        try pool.read { db in try String.fetchOne(db, sql: "PRAGMA journal_mode") ?? "" }
    }

    /// How SQLite runs the claim's statements that touch the deliveries taken (a line per step, per statement): each
    /// must find them by id, whatever the queue holds.
    public func claimQueryPlans(batch: Int = 500) throws -> [String] {
        let marks = Array(repeating: "?", count: max(1, batch)).joined(separator: ",")
        return try plans([Self.expireTaken(marks), Self.leaseTaken(marks)])
    }

    /// How SQLite runs the claim's statements that choose what to take (the first app with queued deliveries, the
    /// next one, an app's due ones, the abandoned ones): each must read an index from a point, never scan a state.
    public func claimChoiceQueryPlans() throws -> [String] {
        try plans([Self.firstApp, Self.nextApp, Self.dueOfApp, Self.abandoned])
    }

    private func plans(_ statements: [String]) throws -> [String] {
        try pool.read { db in
            try statements.map { sql in
                try Row.fetchAll(
                    db,
                    sql: "EXPLAIN QUERY PLAN " + sql,
                    arguments: StatementArguments(Array(repeating: 1 as Int, count: sql.filter { $0 == "?" }.count))
                )
                .map { $0["detail"] as String? ?? "" }.joined(separator: "; ")
            }
        }
    }

    /// The columns a new delivery sets, in the order every insert gives them.
    /// One new delivery: notification, app, provider, target, not before, expires at, now (state `queued`).
    static let insertOne = "INSERT INTO deliveries \(Columns.deliveryInsert) VALUES (?, ?, ?, ?, 'queued', ?, ?, ?)"

    @discardableResult
    public func enqueue(_ deliveries: [NewDelivery]) async throws -> Int {
        let now = Date().timeIntervalSince1970
        return try await pool.write { db in
            let statement = try db.cachedStatement(sql: Self.insertOne)
            for d in deliveries {
                try statement.execute(arguments: [
                    d.notificationID, d.appID, d.provider.rawValue, d.target.stored, d.notBefore.timeIntervalSince1970,
                    d.expiresAt?.timeIntervalSince1970, now,
                ])
            }
            return deliveries.count
        }
    }

    /// Takes each app's share of the due deliveries (see ``DeliveryQueue/claim(owner:limit:now:lease:rooms:)``),
    /// then the abandoned ones; of those, what is past its time to live ends as expired and the rest is leased.
    /// The apps are found by skipping through the due index from one app to the next, and each app's due ones by
    /// one range read of it: a claim reads a few rows per app with queued deliveries and the rows it takes, however
    /// many are queued. Expiry is decided on the rows taken.
    public func claim(
        owner: String,
        limit: Int,
        now: Date,
        lease: TimeInterval,
        rooms: ClaimRooms
    ) async throws -> [DeliveryRecord] {
        let t = now.timeIntervalSince1970
        let limit = max(0, limit)
        guard limit > 0 else { return [] }
        return try await pool.write { db in
            // A claim that took only expired deliveries looks again: an empty answer means nothing is due.
            for _ in 0..<100 {
                let ids = try Self.choose(db, limit: limit, now: t, rooms: rooms)
                if ids.isEmpty { return [] }
                // The ids padded to one of a few counts: the two statements are compiled once per count and kept.
                let padded = ids.paddedForIN()
                let marks = Array(repeating: "?", count: padded.count).joined(separator: ",")
                var expiring: [any DatabaseValueConvertible] = [t, t]
                expiring += padded
                // Deliveries past their time to live end as expired rather than being sent late.
                try db.cachedStatement(sql: Self.expireTaken(marks)).execute(arguments: StatementArguments(expiring))
                if db.changesCount > 0, try Bool.fetchOne(db.cachedStatement(sql: WebhookSQL.anyEndpoint)) == true {
                    try db.execute(query: WebhookSQL.expired(ids: ids, now: now))
                }
                var leasing: [any DatabaseValueConvertible] = [owner, t + lease, t]
                leasing += padded
                let rows = try Row.fetchAll(
                    db.cachedStatement(sql: Self.leaseTaken(marks)),
                    arguments: StatementArguments(leasing)
                )
                if !rows.isEmpty {
                    return rows.map(Self.record).sorted { ($0.notBefore, $0.id) < ($1.notBefore, $1.id) }
                }
            }
            return []
        }
    }

    /// The first app with queued deliveries, and the one after a given app: a skip through the due index.
    /// The planner is told the index: without statistics it may choose the lease index for these and sort every
    /// queued delivery.
    static let firstApp = """
        SELECT app_id FROM deliveries INDEXED BY deliveries_queued_by_app WHERE state = 'queued' ORDER BY app_id LIMIT 1
        """
    static let nextApp = """
        SELECT app_id FROM deliveries INDEXED BY deliveries_queued_by_app
        WHERE state = 'queued' AND app_id > ? ORDER BY app_id LIMIT 1
        """
    /// An app's earliest due deliveries.
    static let dueOfApp = """
        SELECT id FROM deliveries INDEXED BY deliveries_queued_by_app
        WHERE state = 'queued' AND app_id = ? AND not_before <= ? ORDER BY not_before, id LIMIT ?
        """
    /// Deliveries whose lease ran out, the longest gone first.
    static let abandoned =
        "SELECT id FROM deliveries WHERE state = 'leased' AND lease_until < ? ORDER BY lease_until LIMIT ?"

    /// The ids one claim takes: each app's share of its due deliveries, then abandoned ones to the limit.
    static func choose(_ db: Database, limit: Int, now t: Double, rooms: ClaimRooms) throws -> [Int64] {
        let next = try db.cachedStatement(sql: nextApp)
        let due = try db.cachedStatement(sql: dueOfApp)
        // The apps with room and something due now.
        var ready: [String] = []
        var app = try String.fetchOne(db.cachedStatement(sql: firstApp))
        while let a = app {
            if rooms.room(a) > 0, try Int64.fetchOne(due, arguments: [a, t, 1]) != nil { ready.append(a) }
            app = try String.fetchOne(next, arguments: [a])
        }
        var ids: [Int64] = []
        if !ready.isEmpty {
            let share = (limit + ready.count - 1) / ready.count
            for a in ready {
                ids += try Int64.fetchAll(due, arguments: [a, t, min(share, rooms.room(a), limit - ids.count)])
                if ids.count >= limit { break }
            }
        }
        if ids.count < limit {
            ids += try Int64.fetchAll(db.cachedStatement(sql: abandoned), arguments: [t, limit - ids.count])
        }
        return ids
    }

    /// Ends as expired those of the taken deliveries past their time to live.
    static func expireTaken(_ marks: String) -> String {
        """
        UPDATE deliveries SET state = 'expired', reason = 'ttl', lease_owner = NULL, lease_until = NULL, updated_at = ?
        WHERE expires_at IS NOT NULL AND expires_at < ? AND id IN (\(marks))
        """
    }

    /// Leases the taken deliveries. `+state` keeps the planner on the ids: with `state IN (…)` alone it chose the
    /// lease index and read every queued delivery for each claim (a claim cost grew with the queue: 48% of a node's
    /// CPU with 680,000 queued).
    static func leaseTaken(_ marks: String) -> String {
        """
        UPDATE deliveries SET state = 'leased', lease_owner = ?, lease_until = ?, attempts = attempts + 1, updated_at = ?
        WHERE +state IN ('queued', 'leased') AND id IN (\(marks))
        RETURNING \(Columns.delivery)
        """
    }

    @discardableResult
    public func finish(id: Int64, owner: String, outcome: DeliveryOutcome, now: Date) async throws -> Bool {
        try await settle([Settlement(id: id, .finish(outcome))], owner: owner, now: now).contains(id)
    }

    @discardableResult
    public func reschedule(id: Int64, owner: String, notBefore: Date, reason: String, now: Date) async throws -> Bool {
        try await settle(
            [Settlement(id: id, .reschedule(notBefore: notBefore, reason: reason))],
            owner: owner,
            now: now
        ).contains(id)
    }

    public func settle(_ items: [Settlement], owner: String, now: Date) async throws -> Set<Int64> {
        guard !items.isEmpty else { return [] }
        let t = now.timeIntervalSince1970
        return try await pool.write { db in
            let finish = try db.cachedStatement(
                sql: """
                    UPDATE deliveries SET state = ?, reason = ?, provider_id = ?, lease_owner = NULL, lease_until = NULL, updated_at = ?
                    WHERE id = ? AND state = 'leased' AND lease_owner = ?
                    """
            )
            let reschedule = try db.cachedStatement(
                sql: """
                    UPDATE deliveries SET state = 'queued', not_before = ?, reason = ?, lease_owner = NULL, lease_until = NULL, updated_at = ?
                    WHERE id = ? AND state = 'leased' AND lease_owner = ?
                    """
            )
            let release = try db.cachedStatement(
                sql: """
                    UPDATE deliveries SET state = 'queued', not_before = ?, reason = ?, attempts = max(0, attempts - 1), lease_owner = NULL, lease_until = NULL, updated_at = ?
                    WHERE id = ? AND state = 'leased' AND lease_owner = ?
                    """
            )
            var held = Set<Int64>()
            var told: [Int64] = []
            for item in items {
                switch item.action {
                case .finish(let o):
                    try finish.execute(arguments: [o.state.rawValue, o.reason, o.providerID, t, item.id, owner])
                case let .reschedule(at, reason):
                    try reschedule.execute(arguments: [at.timeIntervalSince1970, reason, t, item.id, owner])
                case let .release(at, reason):
                    try release.execute(arguments: [at.timeIntervalSince1970, reason, t, item.id, owner])
                }
                if db.changesCount == 1 {
                    held.insert(item.id)
                    if item.tellsWebhooks { told.append(item.id) }
                }
            }
            if !told.isEmpty { try Self.writeEvents(db, told: told, at: t) }
            return held
        }
    }

    /// The webhooks' events of these outcomes, in the same transaction (an outbox: none is lost or invented).
    /// Who hears what: every endpoint's types while there are few (a read of a small table), else those of
    /// these deliveries' apps (each delivery read for its app: 1 % of a delivering node's CPU, measured). (Each
    /// update naming its app with RETURNING cost more: SQLite buffers a RETURNING's rows.) The statements run
    /// only when an app among these hears what they write. Its own function (never inlined), so that a profile
    /// tells its cost apart from the settle's.
    @inline(never)
    static func writeEvents(_ db: Database, told: [Int64], at t: Double) throws {
        var heardBy = try Row.fetchAll(db.cachedStatement(sql: WebhookSQL.everyHearing))
        guard !heardBy.isEmpty else { return }  // no endpoint at all
        let ids = "[" + told.map(String.init).joined(separator: ",") + "]"
        if heardBy.count > WebhookSQL.everyHearingLimit {
            heardBy = try Row.fetchAll(db.cachedStatement(sql: WebhookSQL.settledHearing), arguments: [ids])
        }
        let types: [WebhookEventType] = [
            .deliveryDelivered, .deliveryFailed, .tokenInvalid, .notificationCompleted,
        ]
        var hearing = Array(repeating: Set<String>(), count: types.count)
        for row in heardBy {
            let (app, heard): (String, String) = (row[0], row[1])
            let kinds = Set(heard.split(separator: ","))
            for (i, type) in types.enumerated() where kinds.contains(Substring(type.rawValue)) {
                hearing[i].insert(app)
            }
        }
        // Each statement with the apps that hear what it writes; one whose apps hear none of it is skipped.
        let heard = [[hearing[0], hearing[1]], [hearing[2]], [hearing[3]]]
        for (sql, apps) in zip(WebhookSQL.settled, heard) where apps.contains(where: { !$0.isEmpty }) {
            let arguments = StatementArguments(
                [t, ids] + apps.map { JSONValue.array($0.sorted().map { .string($0) }).jsonString }
            )
            try db.cachedStatement(sql: sql).execute(arguments: arguments)
        }
    }

    public func extend(_ ids: [Int64], owner: String, until: Date) async throws -> Set<Int64> {
        guard !ids.isEmpty else { return [] }
        return try await pool.write { db in
            let statement = try db.cachedStatement(
                sql: "UPDATE deliveries SET lease_until = ? WHERE id = ? AND state = 'leased' AND lease_owner = ?"
            )
            var held = Set<Int64>()
            for id in ids {
                try statement.execute(arguments: [until.timeIntervalSince1970, id, owner])
                if db.changesCount == 1 { held.insert(id) }
            }
            return held
        }
    }

    public func counts() async throws -> [DeliveryState: Int] {
        try await pool.read { db in
            var c: [DeliveryState: Int] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT state, COUNT(*) AS n FROM deliveries GROUP BY state") {
                if let s = DeliveryState(rawValue: row["state"]) { c[s] = row["n"] }
            }
            return c
        }
    }

    public func deliveries(notificationID: String) async throws -> [DeliveryRecord] {
        try await pool.read { db in
            try Row.fetchAll(
                db,
                sql: "SELECT \(Columns.delivery) FROM deliveries WHERE notification_id = ? ORDER BY id",
                arguments: [notificationID]
            ).map(Self.record)
        }
    }

    public func counts(notificationID: String) async throws -> [DeliveryState: Int] {
        try await pool.read { db in
            var c: [DeliveryState: Int] = [:]
            let rows = try Row.fetchAll(
                db,
                sql: "SELECT state, COUNT(*) AS n FROM deliveries WHERE notification_id = ? GROUP BY state",
                arguments: [notificationID]
            )
            for row in rows {
                if let s = DeliveryState(rawValue: row["state"]) { c[s] = row["n"] }
            }
            return c
        }
    }

    public func deliveries(notificationID: String, after: Int64, limit: Int) async throws -> [DeliveryRecord] {
        try await pool.read { db in
            try Row.fetchAll(
                db,
                sql:
                    "SELECT \(Columns.delivery) FROM deliveries WHERE notification_id = ? AND id > ? ORDER BY id LIMIT ?",
                arguments: [notificationID, after, max(0, limit)]
            ).map(Self.record)
        }
    }

    /// The columns ``record(_:)`` reads, in its order: every query that makes records selects these (by
    /// position, a row is read without looking its columns up by name: a claim reads hundreds).

    static func record(_ row: Row) -> DeliveryRecord {
        func date(_ index: Int) -> Date? { (row[index] as Double?).map { Date(timeIntervalSince1970: $0) } }
        return DeliveryRecord(
            id: row[0],
            notificationID: row[1],
            appID: row[2],
            provider: DeliveryProvider(rawValue: row[3]),
            target: DeliveryTarget(stored: row[4]),
            state: DeliveryState(rawValue: row[5]) ?? .queued,
            attempts: row[6],
            notBefore: date(7) ?? .distantPast,
            expiresAt: date(8),
            leaseOwner: row[9],
            leaseUntil: date(10),
            reason: row[11],
            providerID: row[12],
            updatedAt: date(13) ?? .distantPast
        )
    }
}
