import Crypto
import Foundation
import GRDB
import NIOConcurrencyHelpers
import RichPushCore

/// Apps, API keys, notifications and receipts in the server's SQLite database. API keys are stored as SHA-256
/// hashes; the key itself is shown once, when it is created. Key grants and apps are cached for a few seconds
/// (every request needs both); changes made through this store take effect at once.
public final class SQLiteServerStore: ServerStore {
    let pool: DatabasePool
    let commits: GroupCommit
    /// How long a cached grant or app is trusted (a change made by another node shows after at most this).
    let cacheLifetime: TimeInterval
    private let grants: StoreCache<APIGrant>
    private let apps: StoreCache<ServerApp>
    private let identity: StoreCache<[IdentityKey]>

    /// Seals credentials before they are written; nil stores them as given.
    let sealer: CredentialSealer?
    let credentials: StoredCredentials

    /// With a `sealer`, credentials stored unsealed before are sealed now, and the key is checked against those
    /// sealed already (a wrong key stops here, not at the first send). Without one, sealed credentials stop here.
    public init(pool: DatabasePool, cacheLifetime: TimeInterval = 5, sealer: CredentialSealer? = nil) throws {
        self.pool = pool
        self.cacheLifetime = cacheLifetime
        self.sealer = sealer
        grants = StoreCache(lifetime: cacheLifetime, capacity: 100_000)
        apps = StoreCache(lifetime: cacheLifetime, capacity: 10_000)
        identity = StoreCache(lifetime: cacheLifetime, capacity: 10_000)
        commits = GroupCommit(pool: pool)
        try Self.migrator.migrate(pool)
        let credentials = StoredCredentials(sealer: sealer)
        self.credentials = credentials
        try pool.write { db in
            let rows = try Row.fetchAll(
                db,
                sql:
                    "SELECT id, apns, fcm, webpush FROM apps WHERE apns IS NOT NULL OR fcm IS NOT NULL OR webpush IS NOT NULL"
            )
            for row in rows {
                let id: String = row["id"]
                let apns: String? = row["apns"]
                let fcm: String? = row["fcm"]
                let webPush: String? = row["webpush"]
                let newAPNs = try apns.flatMap { try credentials.resealed($0, app: id) }
                let newFCM = try fcm.flatMap { try credentials.resealed($0, app: id) }
                let newWebPush = try webPush.flatMap { try credentials.resealed($0, app: id) }
                guard newAPNs != nil || newFCM != nil || newWebPush != nil else { continue }
                try db.execute(
                    sql: "UPDATE apps SET apns = ?, fcm = ?, webpush = ? WHERE id = ?",
                    arguments: [newAPNs ?? apns, newFCM ?? fcm, newWebPush ?? webPush, id]
                )
            }
        }
    }

    /// Whether any app's credentials are sealed (a server without its key file must not make a new one then).
    public static func hasSealedCredentials(pool: DatabasePool) throws -> Bool {
        try pool.read { db in
            guard try db.tableExists("apps") else { return false }
            let prefix = CredentialSealer.prefix + "%"
            return try Bool.fetchOne(
                db,
                sql: "SELECT EXISTS (SELECT 1 FROM apps WHERE apns LIKE ? OR fcm LIKE ? OR webpush LIKE ?)",
                arguments: [prefix, prefix, prefix]
            ) ?? false
        }
    }

    static var migrator: DatabaseMigrator {
        var m = DatabaseMigrator()
        m.registerMigration("server-v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE apps (id TEXT PRIMARY KEY, name TEXT NOT NULL, bundle_id TEXT NOT NULL, fcm_project_id TEXT, created_at REAL NOT NULL);
                    CREATE TABLE api_keys (key_hash TEXT PRIMARY KEY, app_id TEXT NOT NULL REFERENCES apps(id), scopes TEXT NOT NULL, created_at REAL NOT NULL);
                    CREATE TABLE notifications (
                        id TEXT PRIMARY KEY, app_id TEXT NOT NULL, idempotency_key TEXT, message TEXT NOT NULL, response TEXT NOT NULL, created_at REAL NOT NULL,
                        UNIQUE (app_id, idempotency_key));
                    """
            )
        }
        m.registerMigration("receipts-v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE receipts (
                        notification_id TEXT NOT NULL, token TEXT NOT NULL, report TEXT NOT NULL, received_at REAL NOT NULL,
                        PRIMARY KEY (notification_id, token));
                    """
            )
        }
        m.registerMigration("server-v2") { db in
            // Provider credentials per app; key ids; notifications remember their audience and fan-out progress.
            try db.execute(
                sql: """
                    ALTER TABLE apps ADD COLUMN apns TEXT;
                    ALTER TABLE apps ADD COLUMN fcm TEXT;
                    ALTER TABLE apps ADD COLUMN revision INTEGER NOT NULL DEFAULT 1;
                    ALTER TABLE api_keys ADD COLUMN key_id TEXT;
                    UPDATE api_keys SET key_id = 'key_' || substr(key_hash, 1, 12);
                    CREATE INDEX api_keys_app ON api_keys(app_id);
                    ALTER TABLE notifications ADD COLUMN audience TEXT;
                    ALTER TABLE notifications ADD COLUMN not_before REAL;
                    ALTER TABLE notifications ADD COLUMN expires_at REAL;
                    ALTER TABLE notifications ADD COLUMN spread REAL NOT NULL DEFAULT 0;
                    ALTER TABLE notifications ADD COLUMN fanout_state TEXT NOT NULL DEFAULT 'done';
                    ALTER TABLE notifications ADD COLUMN fanout_cursor INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE notifications ADD COLUMN fanout_inserted INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE notifications ADD COLUMN fanout_total INTEGER NOT NULL DEFAULT 0;
                    CREATE INDEX notifications_fanout ON notifications(fanout_state) WHERE fanout_state = 'pending';
                    """
            )
        }
        m.registerMigration("secrets-v1") { db in
            try db.execute(sql: "CREATE TABLE secrets (name TEXT PRIMARY KEY, value BLOB NOT NULL)")
        }
        m.registerMigration("notifications-by-app") { db in
            // An app's notifications listed newest first (the console's list).
            try db.execute(sql: "CREATE INDEX notifications_app ON notifications(app_id, created_at)")
        }
        m.registerMigration("receipts-by-delivery") { db in
            // One receipt per delivery, a few numbers each (the reports kept before were whole, one per device id
            // any poster named, and are not kept: they cannot be tied to a delivery).
            try db.execute(
                sql: """
                    DROP TABLE receipts;
                    CREATE TABLE delivery_receipts (
                        delivery_id INTEGER PRIMARY KEY, notification_id TEXT NOT NULL, attachments INTEGER NOT NULL,
                        skipped INTEGER NOT NULL, deadline_hit INTEGER NOT NULL, elapsed_ms INTEGER NOT NULL,
                        received_at REAL NOT NULL);
                    CREATE INDEX delivery_receipts_notification ON delivery_receipts(notification_id);
                    """
            )
        }
        m.registerMigration("webpush-v1") { db in
            // An app's VAPID key (sealed like the other credentials).
            try db.execute(sql: "ALTER TABLE apps ADD COLUMN webpush TEXT")
        }
        m.registerMigration("live-tokens-v1") { db in
            // Live Activity push-to-start and update tokens.
            try db.execute(sql: LiveTokenSQL.create(time: "REAL"))
        }
        m.registerMigration("notification-versions") { db in
            // Updates in place: each update is a version of its root (NotificationVersions).
            try db.execute(sql: NotificationVersions.sqliteColumns)
        }
        m.registerMigration("delivery-opens") { db in
            // What people did with each delivery, as their app reports it (DeliveryOpen).
            try db.execute(sql: OpenSQL.sqliteTable)
        }
        m.registerMigration("notification-minutes") { db in
            // Counts per notification and minute, for an app's time series (MinuteCount).
            try db.execute(sql: MinuteSQL.sqliteTable)
        }
        m.registerMigration("delivery-opens-link") { db in
            // The deep link an open led to.
            try db.execute(sql: OpenSQL.linkColumn)
        }
        m.registerMigration("live-tokens-bounds-v1") { db in
            // Each app's count of Live Activity tokens, kept by triggers (RegistrationLimits), and a user's tokens
            // by index (the per-user bound).
            try db.execute(sql: AppCountSQL.sqlite(table: "live_tokens", kind: AppCountSQL.live))
            try db.execute(sql: "CREATE INDEX live_tokens_user ON live_tokens (app_id, user_id, updated_at)")
        }
        m.registerMigration("identity-keys-v1") { db in
            // The public keys an app's backend signs identity proofs with (IdentityKey).
            try db.execute(sql: IdentityKeySQL.create(time: "REAL"))
        }
        m.registerMigration("media-upload-days-quota") { db in
            // Bytes uploaded per app and UTC day (the upload quota, counted where it is kept).
            try db.execute(sql: UploadSQL.table)
        }
        m.registerMigration("deleted-apps") { db in
            // Apps deleted in the last day, whose tables are emptied again (AppDeletion).
            try db.execute(sql: AppDeletion.table(time: "REAL"))
        }
        m.registerMigration("live-tokens-told") { db in
            // Whether a Live Activity token's registration was told (its removal and expiry are told only then).
            try db.execute(sql: LiveTokenSQL.toldColumn)
        }
        m.registerMigration("fanout-token") { db in
            // Where a whole app's fan-out stands in token order (FanOutCursor).
            try db.execute(sql: "ALTER TABLE notifications ADD COLUMN fanout_token TEXT NOT NULL DEFAULT ''")
        }
        return m
    }

    // MARK: Apps

    func app(_ row: Row) throws -> ServerApp {
        try credentials.app(
            id: row["id"],
            name: row["name"],
            bundleID: row["bundle_id"],
            fcmProjectID: row["fcm_project_id"],
            apns: row["apns"],
            fcm: row["fcm"],
            webPush: row["webpush"],
            revision: row["revision"]
        )
    }

    public func createApp(_ app: ServerApp) async throws -> (ServerApp, key: String) {
        var app = app
        if app.id.isEmpty { app.id = ServerApp.newID() }
        app.revision = 1
        let key = APIKeys.newKey()
        let (apns, fcm, webPush) = try credentials.columns(app)
        let stored = app
        try await pool.write { db in
            try db.execute(
                sql:
                    "INSERT INTO apps (id, name, bundle_id, fcm_project_id, apns, fcm, webpush, revision, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?)",
                arguments: [
                    stored.id, stored.name, stored.bundleID, stored.fcmProjectID, apns, fcm, webPush,
                    Date().timeIntervalSince1970,
                ]
            )
            let hash = APIKeys.hash(key)
            try Self.insertKey(hash: hash, appID: stored.id, scopes: Set(APIScope.allCases), in: db)
        }
        apps.set(app.id, app)
        return (app, key)
    }

    public func updateApp(_ app: ServerApp) async throws -> ServerApp? {
        let (apns, fcm, webPush) = try credentials.columns(app)
        let updated: ServerApp? = try await pool.write { db in
            try db.execute(
                sql:
                    "UPDATE apps SET name = ?, bundle_id = ?, fcm_project_id = ?, apns = ?, fcm = ?, webpush = ?, revision = revision + 1 WHERE id = ?",
                arguments: [app.name, app.bundleID, app.fcmProjectID, apns, fcm, webPush, app.id]
            )
            guard db.changesCount == 1 else { return nil }
            return try self.app(id: app.id, in: db)
        }
        apps.set(app.id, updated)
        return updated
    }

    func app(id: String, in db: Database) throws -> ServerApp? {
        try Row.fetchOne(db, sql: "SELECT * FROM apps WHERE id = ?", arguments: [id]).map { try self.app($0) }
    }

    public func app(id: String) async throws -> ServerApp? {
        try await apps.value(id) { try await pool.read { db in try self.app(id: id, in: db) } }
    }

    public func apps(after: String, limit: Int) async throws -> [ServerApp] {
        try await pool.read { db in
            try Row.fetchAll(
                db,
                sql: "SELECT * FROM apps WHERE id > ? ORDER BY id LIMIT ?",
                arguments: [after, max(0, limit)]
            ).map { try self.app($0) }
        }
    }

    public func removeApp(id: String) async throws -> Bool {
        let removed = try await pool.write { db in
            for statement in AppDeletion.rest(id) { try db.execute(query: statement) }
            try db.execute(query: AppDeletion.app(id))
            let removed = db.changesCount == 1
            try db.execute(query: AppDeletion.remember(id, at: Date()))
            return removed
        }
        apps.forget(id)
        identity.forget(id)
        return removed
    }

    // MARK: Keys

    public func createKey(appID: String, scopes: Set<APIScope>) async throws -> (APIGrant, key: String) {
        let key = APIKeys.newKey()
        let hash = APIKeys.hash(key)
        let grant = APIGrant(keyID: APIKeys.id(ofHash: hash), appID: appID, scopes: scopes)
        try await pool.write { db in
            // Counted in the write's transaction: two keys made at once cannot both take the last place.
            let held =
                try Int.fetchOne(db, sql: "SELECT count(*) FROM api_keys WHERE app_id = ?", arguments: [appID]) ?? 0
            guard held < APIKeys.maxPerApp else { throw APIKeys.LimitReached() }
            try Self.insertKey(hash: hash, appID: appID, scopes: scopes, in: db)
        }
        return (grant, key)
    }

    /// A key, stored as its hash only, with its scopes in their documented order.
    static func insertKey(hash: String, appID: String, scopes: Set<APIScope>, in db: Database) throws {
        try db.execute(
            sql: "INSERT INTO api_keys (key_hash, key_id, app_id, scopes, created_at) VALUES (?, ?, ?, ?, ?)",
            arguments: [hash, APIKeys.id(ofHash: hash), appID, APIScope.column(scopes), Date().timeIntervalSince1970]
        )
    }

    public func revokeKey(appID: String, keyID: String) async throws -> Bool {
        let removed: String? = try await pool.write { db in
            guard
                let hash = try String.fetchOne(
                    db,
                    sql: "SELECT key_hash FROM api_keys WHERE app_id = ? AND key_id = ?",
                    arguments: [appID, keyID]
                )
            else { return nil }
            try db.execute(sql: "DELETE FROM api_keys WHERE key_hash = ?", arguments: [hash])
            return hash
        }
        guard let removed else { return false }
        grants.forget(removed)
        return true
    }

    public func keys(appID: String, after: String, limit: Int) async throws -> [APIKeyInfo] {
        try await pool.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT key_id, scopes, created_at FROM api_keys WHERE app_id = ? AND key_id > ?
                    ORDER BY key_id LIMIT ?
                    """,
                arguments: [appID, after, max(0, limit)]
            ).map {
                APIKeyInfo(
                    keyID: $0["key_id"],
                    scopes: APIScope.parse($0["scopes"]),
                    createdAt: Date(timeIntervalSince1970: $0["created_at"])
                )
            }
        }
    }

    public func notifications(appID: String, before: Double?, limit: Int) async throws -> [StoredNotification] {
        try await pool.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT \(Columns.notification) FROM notifications WHERE app_id = ? AND created_at < ? ORDER BY created_at DESC, id DESC LIMIT ?
                    """,
                arguments: [appID, before ?? Double.greatestFiniteMagnitude, max(0, limit)]
            ).map(Self.notification)
        }
    }

    public func isKnownKey(keyHash h: String) -> Bool { grants.holdsValue(h) }

    public func authorize(keyHash h: String) async throws -> APIGrant? {
        try await grants.value(h) {
            try await pool.read { db in
                try Row.fetchOne(
                    db,
                    sql: "SELECT key_id, app_id, scopes FROM api_keys WHERE key_hash = ?",
                    arguments: [h]
                ).map { row in
                    APIGrant(keyID: row["key_id"], appID: row["app_id"], scopes: APIScope.parse(row["scopes"]))
                }
            }
        }
    }

    // MARK: Identity keys

    public func identityKeys(appID: String) async throws -> [IdentityKey] {
        try await identity.value(appID) {
            try await pool.read { db in
                try Row.fetchAll(db, query: IdentityKeySQL.list(appID)).compactMap { row in
                    IdentityKeySQL.key(
                        appID: appID,
                        kid: row[0],
                        publicKey: row[1],
                        createdAt: Date(timeIntervalSince1970: row[2])
                    )
                }
            }
        } ?? []
    }

    public func addIdentityKey(_ key: IdentityKey) async throws {
        try await pool.write { db in
            // One writer at a time: the count and the insert cannot be split by another node's.
            if try Int.fetchOne(db, query: IdentityKeySQL.exists(key)) ?? 0 > 0 { throw IdentityKeys.Exists() }
            guard try !Row.fetchAll(db, query: IdentityKeySQL.add(key)).isEmpty else {
                throw IdentityKeys.LimitReached()
            }
        }
        identity.forget(key.appID)
    }

    public func removeIdentityKey(appID: String, keyID: String) async throws -> Bool {
        let removed = try await pool.write { db in
            try !Row.fetchAll(db, query: IdentityKeySQL.remove(appID: appID, keyID: keyID)).isEmpty
        }
        identity.forget(appID)
        return removed
    }

    // MARK: Notifications

    public func insertNotification(
        _ n: StoredNotification,
        idempotencyKey: String?
    ) async throws -> (StoredNotification, created: Bool) {
        try await commits.write { db in try Self.insert(n, idempotencyKey: idempotencyKey, fanOut: nil, in: db) }
    }

    /// Inserts unless the idempotency key was used; `fanOut` is the audience and times of a fan-out still to run.
    static func insert(
        _ n: StoredNotification,
        idempotencyKey: String?,
        fanOut: AcceptPlan?,
        in db: Database
    ) throws -> (StoredNotification, created: Bool) {
        if let key = idempotencyKey,
            let row = try Row.fetchOne(
                db.cachedStatement(
                    sql: "SELECT \(Columns.notification) FROM notifications WHERE app_id = ? AND idempotency_key = ?"
                ),
                arguments: [n.appID, key]
            )
        {
            return (try Self.notification(row), false)
        }
        try db.cachedStatement(
            sql: """
                INSERT INTO notifications \(Columns.notificationInsert)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """
        ).execute(arguments: [
            n.id, n.appID, idempotencyKey, n.message.jsonString, n.response.jsonString,
            n.createdAt.timeIntervalSince1970,
            fanOut?.audience.json.jsonString, fanOut?.notBefore.timeIntervalSince1970,
            fanOut?.expiresAt?.timeIntervalSince1970, fanOut?.spread ?? 0,
            (fanOut == nil ? FanOutState.done : .pending).rawValue,
        ])
        return (n, true)
    }

    public func notification(id: String) async throws -> StoredNotification? {
        try await pool.read { db in
            try Row.fetchOne(
                db.cachedStatement(sql: "SELECT \(Columns.notification) FROM notifications WHERE id = ?"),
                arguments: [id]
            ).map(Self.notification)
        }
    }

    /// A notification's whole row, with its fan-out columns.
    static func notificationRow(id: String, in db: Database) throws -> Row? {
        try Row.fetchOne(db.cachedStatement(sql: "SELECT * FROM notifications WHERE id = ?"), arguments: [id])
    }

    static func notification(_ row: Row) throws -> StoredNotification {
        StoredNotification(
            id: row["id"],
            appID: row["app_id"],
            message: try JSONValue.parse(row["message"] as String),
            response: try JSONValue.parse(row["response"] as String),
            createdAt: Date(timeIntervalSince1970: row["created_at"])
        )
    }

    /// A secret of the server's (the receipt signing key), sealed at rest like provider credentials when a
    /// credentials key is in use; one stored before sealing is sealed the first time it is read.
    public func secret(named name: String) async throws -> [UInt8] {
        try await pool.write { [credentials] db in
            if let existing = try Data.fetchOne(db, sql: "SELECT value FROM secrets WHERE name = ?", arguments: [name])
            {
                let (bytes, replacement) = try credentials.openSecret(existing, name: name)
                if let replacement {
                    try db.execute(sql: "UPDATE secrets SET value = ? WHERE name = ?", arguments: [replacement, name])
                }
                return bytes
            }
            let (fresh, stored) = try credentials.newSecret()
            try db.execute(sql: "INSERT INTO secrets (name, value) VALUES (?, ?)", arguments: [name, stored])
            return fresh
        }
    }
}
