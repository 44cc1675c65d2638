import Crypto
import Foundation
import PostgresNIO
import RichPushCore

/// Apps, API keys, notifications, receipts and secrets in PostgreSQL, shared by every node. Keys are stored as
/// SHA-256 hashes. Grants and apps are cached for a few seconds on each node; a change is announced on the
/// `richpush_cache` channel, so every node forgets the old value within a second (a revoked key is refused
/// everywhere).
public final class PostgresServerStore: ServerStore {
    let db: PostgresDatabase
    let credentials: StoredCredentials
    let grants: StoreCache<APIGrant>
    let apps: StoreCache<ServerApp>
    let identity: StoreCache<[IdentityKey]>
    static let cacheChannel = "richpush_cache"

    /// Checks the credentials key against the database (every node must seal with the same key) and seals
    /// credentials stored unsealed.
    public convenience init(
        database: PostgresDatabase,
        sealer: CredentialSealer?,
        cacheLifetime: TimeInterval = 5
    ) async throws {
        self.init(checked: database, sealer: sealer, cacheLifetime: cacheLifetime)
        try await prepare()
    }

    /// A store over a database whose key was checked already (``prepare()`` on another client of it, before the
    /// server's own started): no statement runs here.
    init(checked database: PostgresDatabase, sealer: CredentialSealer?, cacheLifetime: TimeInterval = 5) {
        db = database
        credentials = StoredCredentials(sealer: sealer)
        grants = StoreCache(lifetime: cacheLifetime, capacity: 100_000)
        apps = StoreCache(lifetime: cacheLifetime, capacity: 10_000)
        identity = StoreCache(lifetime: cacheLifetime, capacity: 10_000)
    }

    /// Checks the credentials key and seals what is stored unsealed.
    func prepare() async throws {
        try await checkKey(credentials.sealer)
        let rows = try await db.rows(
            "SELECT id, apns, fcm, webpush FROM apps WHERE apns IS NOT NULL OR fcm IS NOT NULL OR webpush IS NOT NULL"
        )
        for row in rows {
            let (id, apns, fcm, webPush) = try row.decode((String, String?, String?, String?).self)
            let newAPNs = try apns.flatMap { try credentials.resealed($0, app: id) }
            let newFCM = try fcm.flatMap { try credentials.resealed($0, app: id) }
            let newWebPush = try webPush.flatMap { try credentials.resealed($0, app: id) }
            guard newAPNs != nil || newFCM != nil || newWebPush != nil else { continue }
            try await db.rows(
                """
                UPDATE apps SET apns = \(newAPNs ?? apns), fcm = \(newFCM ?? fcm), webpush = \(newWebPush ?? webPush)
                WHERE id = \(id)
                """
            )
        }
    }

    /// The first node records a check value of its key; a node with another key refuses to start (it would seal
    /// what the others cannot open). Nodes share the key file, as they share the database.
    func checkKey(_ sealer: CredentialSealer?) async throws {
        guard let sealer else { return }
        let check = CredentialRotation.check(sealer)
        try await db.rows(
            "INSERT INTO secrets (name, value) VALUES ('credentials-key-check', \(check)) ON CONFLICT (name) DO NOTHING"
        )
        let stored = try await db.rows("SELECT value FROM secrets WHERE name = 'credentials-key-check'").first?.decode(
            Data.self
        )
        guard stored == check else {
            throw CredentialSealer.Problem(
                description:
                    "\(sealer.source) is not the key this database's credentials are sealed with: give every node the same key file"
            )
        }
    }

    /// Whether any app's credentials are sealed (a node without a key file must not make a new one then).
    public static func hasSealedCredentials(_ db: PostgresDatabase) async throws -> Bool {
        let prefix = CredentialSealer.prefix + "%"
        let rows = try await db.rows(
            """
            SELECT EXISTS (SELECT 1 FROM apps WHERE apns LIKE \(prefix) OR fcm LIKE \(prefix) OR webpush LIKE \(prefix))
                OR EXISTS (SELECT 1 FROM secrets WHERE name = 'credentials-key-check')
            """
        )
        return try rows.first?.decode(Bool.self) ?? false
    }

    /// A change another node announced: `app:ID`, `key:HASH`, `identity:APP` (its identity keys), or anything
    /// else to forget everything.
    public func forget(_ payload: String) {
        if payload.hasPrefix("app:") {
            apps.forget(String(payload.dropFirst(4)))
        } else if payload.hasPrefix("key:") {
            grants.forget(String(payload.dropFirst(4)))
        } else if payload.hasPrefix("identity:") {
            identity.forget(String(payload.dropFirst(9)))
        } else {
            apps.forgetAll()
            grants.forgetAll()
            identity.forgetAll()
        }
    }

    // MARK: Apps

    static let appColumns = "id, name, bundle_id, fcm_project_id, apns, fcm, webpush, revision"

    func app(_ row: PostgresRow) throws -> ServerApp {
        let (id, name, bundle, project, apns, fcm, webPush, revision) = try row.decode(
            (String, String, String, String?, String?, String?, String?, Int).self
        )
        return try credentials.app(
            id: id,
            name: name,
            bundleID: bundle,
            fcmProjectID: project,
            apns: apns,
            fcm: fcm,
            webPush: webPush,
            revision: revision
        )
    }

    public func createApp(_ app: ServerApp) async throws -> (ServerApp, key: String) {
        var app = app
        if app.id.isEmpty { app.id = ServerApp.newID() }
        app.revision = 1
        let key = APIKeys.newKey()
        let hash = APIKeys.hash(key)
        let (apns, fcm, webPush) = try credentials.columns(app)
        let stored = app
        try await db.transaction { c in
            try await c.query(
                """
                INSERT INTO apps (id, name, bundle_id, fcm_project_id, apns, fcm, webpush, revision)
                VALUES (\(stored.id), \(stored.name), \(stored.bundleID), \(stored.fcmProjectID), \(apns), \(fcm), \(webPush), 1)
                """,
                logger: self.db.logger
            )
            try await c.query(
                Self.insertKey(hash: hash, appID: stored.id, scopes: Set(APIScope.allCases)),
                logger: self.db.logger
            )
        }
        apps.set(app.id, app)
        return (app, key)
    }

    public func updateApp(_ app: ServerApp) async throws -> ServerApp? {
        let (apns, fcm, webPush) = try credentials.columns(app)
        let rows = try await db.rows(
            """
            UPDATE apps SET name = \(app.name), bundle_id = \(app.bundleID), fcm_project_id = \(app.fcmProjectID), apns = \(apns), fcm = \(fcm),
                webpush = \(webPush), revision = revision + 1
            WHERE id = \(app.id) RETURNING \(unescaped: Self.appColumns)
            """
        )
        let updated = try rows.first.map(self.app)
        apps.set(app.id, updated)
        await db.notify(Self.cacheChannel, "app:" + app.id)
        return updated
    }

    public func app(id: String) async throws -> ServerApp? {
        try await apps.value(id) {
            try await db.rows("SELECT \(unescaped: Self.appColumns) FROM apps WHERE id = \(id)").first.map(self.app)
        }
    }

    public func apps(after: String, limit: Int) async throws -> [ServerApp] {
        try await db.rows(
            "SELECT \(unescaped: Self.appColumns) FROM apps WHERE id > \(after) ORDER BY id LIMIT \(max(0, limit))"
        ).map(self.app)
    }

    public func removeApp(id: String) async throws -> Bool {
        let logger = db.logger
        let removed = try await db.transaction { c in
            for statement in AppDeletion.rest(id) {
                _ = try await c.query(statement.postgres, logger: logger).collect()
            }
            let gone: SQL = "WITH gone AS (\(AppDeletion.app(id)) RETURNING 1) SELECT count(*) FROM gone"
            let removed = try await c.query(gone.postgres, logger: logger).collect().first?.decode(Int.self) == 1
            _ = try await c.query(AppDeletion.remember(id, at: Date()).postgres, logger: logger).collect()
            return removed
        }
        apps.forget(id)
        identity.forget(id)
        await db.notify(Self.cacheChannel, "app:" + id)
        await db.notify(Self.cacheChannel, "identity:" + id)
        return removed
    }

    // MARK: Keys

    static func insertKey(hash: String, appID: String, scopes: Set<APIScope>) -> PostgresQuery {
        "INSERT INTO api_keys (key_hash, key_id, app_id, scopes) VALUES (\(hash), \(APIKeys.id(ofHash: hash)), \(appID), \(APIScope.column(scopes)))"
    }

    public func createKey(appID: String, scopes: Set<APIScope>) async throws -> (APIGrant, key: String) {
        let key = APIKeys.newKey()
        let hash = APIKeys.hash(key)
        // One statement: counted and inserted together (two made at once may both pass: at most one over, once).
        let made = try await db.rows(
            """
            INSERT INTO api_keys (key_hash, key_id, app_id, scopes)
            SELECT \(hash), \(APIKeys.id(ofHash: hash)), \(appID), \(APIScope.column(scopes))
            WHERE (SELECT count(*) FROM api_keys WHERE app_id = \(appID)) < \(APIKeys.maxPerApp)
            RETURNING key_id
            """
        )
        guard !made.isEmpty else { throw APIKeys.LimitReached() }
        return (APIGrant(keyID: APIKeys.id(ofHash: hash), appID: appID, scopes: scopes), key)
    }

    public func revokeKey(appID: String, keyID: String) async throws -> Bool {
        let rows = try await db.rows(
            "DELETE FROM api_keys WHERE app_id = \(appID) AND key_id = \(keyID) RETURNING key_hash"
        )
        guard let hash = try rows.first?.decode(String.self) else { return false }
        grants.forget(hash)
        await db.notify(Self.cacheChannel, "key:" + hash)
        return true
    }

    public func keys(appID: String, after: String, limit: Int) async throws -> [APIKeyInfo] {
        try await db.rows(
            """
            SELECT key_id, scopes, created_at FROM api_keys WHERE app_id = \(appID) AND key_id > \(after)
            ORDER BY key_id LIMIT \(max(0, limit))
            """
        ).map { row in
            let (id, scopes, created) = try row.decode((String, String, Date).self)
            return APIKeyInfo(keyID: id, scopes: APIScope.parse(scopes), createdAt: created)
        }
    }

    public func notifications(appID: String, before seconds: Double?, limit: Int) async throws -> [StoredNotification] {
        let before = seconds.map { Date(timeIntervalSince1970: $0) }
        return try await db.rows(
            """
            SELECT \(unescaped: Columns.notification) FROM notifications
            WHERE app_id = \(appID) AND (\(before)::timestamptz IS NULL OR created_at < \(before))
            ORDER BY created_at DESC, id DESC LIMIT \(max(0, limit))
            """
        ).map(Self.notification)
    }

    public func isKnownKey(keyHash h: String) -> Bool { grants.holdsValue(h) }

    public func authorize(keyHash h: String) async throws -> APIGrant? {
        try await grants.value(h) {
            try await db.rows("SELECT key_id, app_id, scopes FROM api_keys WHERE key_hash = \(h)").first.map { row in
                let (id, app, scopes) = try row.decode((String, String, String).self)
                return APIGrant(keyID: id, appID: app, scopes: APIScope.parse(scopes))
            }
        }
    }

    // MARK: Identity keys

    public func identityKeys(appID: String) async throws -> [IdentityKey] {
        try await identity.value(appID) {
            try await db.rows(IdentityKeySQL.list(appID).postgres).compactMap { row in
                let (kid, key, created) = try row.decode((String, String, Date).self)
                return IdentityKeySQL.key(appID: appID, kid: kid, publicKey: key, createdAt: created)
            }
        } ?? []
    }

    public func addIdentityKey(_ key: IdentityKey) async throws {
        // Counted in the statement: two added at once through two nodes may both pass (at most one over, once).
        let added = try await db.rows(IdentityKeySQL.add(key).postgres)
        if added.isEmpty {
            let held = try await db.rows(IdentityKeySQL.exists(key).postgres).first?.decode(Int.self) ?? 0
            throw held > 0 ? IdentityKeys.Exists() as any Error : IdentityKeys.LimitReached()
        }
        identity.forget(key.appID)
        await db.notify(Self.cacheChannel, "identity:" + key.appID)
    }

    public func removeIdentityKey(appID: String, keyID: String) async throws -> Bool {
        let removed = try await !db.rows(IdentityKeySQL.remove(appID: appID, keyID: keyID).postgres).isEmpty
        identity.forget(appID)
        // Every node forgets it within a second: a deleted key verifies nothing anywhere after that.
        await db.notify(Self.cacheChannel, "identity:" + appID)
        return removed
    }

    // MARK: Notifications

    public func insertNotification(
        _ n: StoredNotification,
        idempotencyKey: String?
    ) async throws -> (StoredNotification, created: Bool) {
        try await db.transaction { c in
            try await Self.insert(n, idempotencyKey: idempotencyKey, fanOut: nil, on: c, logger: self.db.logger)
        }
    }

    /// Inserts unless the app used the idempotency key before (then the first notification is returned);
    /// `fanOut` is the audience and times of a fan-out still to run.
    static func insert(
        _ n: StoredNotification,
        idempotencyKey: String?,
        fanOut: AcceptPlan?,
        on c: PostgresConnection,
        logger: Logger
    ) async throws -> (StoredNotification, created: Bool) {
        let inserted = try await c.query(
            """
            INSERT INTO notifications \(unescaped: Columns.notificationInsert)
            VALUES (\(n.id), \(n.appID), \(idempotencyKey), \(n.message.jsonString), \(n.response.jsonString), \(n.createdAt),
                \(fanOut?.audience.json.jsonString), \(fanOut?.notBefore), \(fanOut?.expiresAt), \(fanOut?.spread ?? 0), \((fanOut == nil ? FanOutState.done : .pending).rawValue))
            ON CONFLICT (app_id, idempotency_key) DO NOTHING RETURNING id
            """,
            logger: logger
        ).collect()
        if !inserted.isEmpty { return (n, true) }
        let existing = try await c.query(
            """
            SELECT \(unescaped: Columns.notification) FROM notifications WHERE app_id = \(n.appID) AND idempotency_key = \(idempotencyKey)
            """,
            logger: logger
        ).collect()
        guard let row = existing.first else {
            throw DatabaseUnavailable("a notification's idempotency key was taken and then not found")
        }
        return (try notification(row), false)
    }

    static func notification(_ row: PostgresRow) throws -> StoredNotification {
        let (id, app, message, response, created) = try row.decode((String, String, String, String, Date).self)
        return StoredNotification(
            id: id,
            appID: app,
            message: try JSONValue.parse(message),
            response: try JSONValue.parse(response),
            createdAt: created
        )
    }

    public func notification(id: String) async throws -> StoredNotification? {
        try await db.rows("SELECT \(unescaped: Columns.notification) FROM notifications WHERE id = \(id)").first
            .map(Self.notification)
    }

    public func secret(named name: String) async throws -> [UInt8] {
        let (fresh, stored) = try credentials.newSecret()
        // The first node to ask makes it; every other node reads that one.
        try await db.rows("INSERT INTO secrets (name, value) VALUES (\(name), \(stored)) ON CONFLICT (name) DO NOTHING")
        guard let value = try await db.rows("SELECT value FROM secrets WHERE name = \(name)").first?.decode(Data.self)
        else {
            throw DatabaseUnavailable("the \(name) secret was written and then not found")
        }
        if value == stored { return fresh }
        let (bytes, replacement) = try credentials.openSecret(value, name: name)
        if let replacement {
            try await db.rows("UPDATE secrets SET value = \(replacement) WHERE name = \(name) AND value = \(value)")
        }
        return bytes
    }
}
