import Foundation
import GRDB

/// The embedded backend: store, registry and queue in one SQLite database (WAL), so that a notification is
/// stored with its deliveries in one transaction and a registry fan-out runs inside the database.
public struct SQLiteBackend: StorageBackend {
    public let pool: DatabasePool
    public let sqliteStore: SQLiteServerStore
    public let sqliteRegistry: SQLiteDeviceRegistry
    public let sqliteQueue: SQLiteDeliveryQueue
    public let sqliteIntake: SQLiteIntake
    public let receipts: any ReceiptStore
    public let liveTokens: any LiveTokenStore
    public let updates: any NotificationUpdates
    public let uploads: any UploadLedger
    public let webhooks: any WebhookStore

    public var store: any ServerStore { sqliteStore }
    public var registry: any DeviceRegistry { sqliteRegistry }
    public var queue: any DeliveryQueue { sqliteQueue }
    public var intake: any NotificationIntake { sqliteIntake }
    public let health = DatabaseHealth()
    public let workQueued: WorkQueued

    /// Every store over one pool (migrated on open). `chunk`: devices per fan-out transaction.
    public init(pool: DatabasePool, sealer: CredentialSealer? = nil, chunk: Int = 50_000) throws {
        self.pool = pool
        sqliteQueue = try SQLiteDeliveryQueue(pool: pool)
        sqliteRegistry = try SQLiteDeviceRegistry(pool: pool)
        sqliteStore = try SQLiteServerStore(pool: pool, sealer: sealer)
        let workQueued = WorkQueued()
        self.workQueued = workQueued
        sqliteIntake = try SQLiteIntake(
            store: sqliteStore,
            registry: sqliteRegistry,
            queue: sqliteQueue,
            chunk: chunk
        ) { workQueued.tell() }
        receipts = SQLiteReceiptStore(pool: pool)
        liveTokens = SQLiteLiveTokenStore(pool: pool)
        updates = SQLiteNotificationUpdates(pool: pool) { workQueued.tell() }
        uploads = SQLiteUploadLedger(pool: pool)
        webhooks = SQLiteWebhookStore(pool: pool, sealer: sealer)
    }

    /// Opens (or creates) the database file.
    public init(path: String, backgroundCheckpoints: Bool = false, sealer: CredentialSealer? = nil) throws {
        try self.init(
            pool: try SQLiteDeliveryQueue.openPool(path: path, backgroundCheckpoints: backgroundCheckpoints),
            sealer: sealer
        )
    }

    public func fanOutInDatabase(_ r: FanOutRequest) async throws -> Int? {
        let total =
            r.spread > 0 ? try await sqliteRegistry.countInDatabase(appID: r.appID, audience: r.audience) ?? 0 : 0
        return try await sqliteRegistry.fanOutInDatabase(r, chunk: sqliteIntake.chunk, total: total)
    }

    public func countByProviderInDatabase(appID: String, audience: Audience) async throws -> [DeliveryProvider: Int]? {
        try await sqliteRegistry.countByProviderInDatabase(appID: appID, audience: audience)
    }

    public func sweepNotifications(before cutoff: Date, limit: Int) async throws -> Int {
        let candidates = try await pool.read { db in
            try Row.fetchAll(db, query: NotificationSweep.candidates(before: cutoff, limit: limit)).map {
                $0[0] as String
            }
        }
        var removed = 0
        for id in candidates {
            let open = try await pool.read { db in
                try Int.fetchOne(db, query: NotificationSweep.stillDelivering(id)) ?? 0
            }
            guard open == 0 else { continue }
            try await removeNotification(id)
            removed += 1
        }
        return removed
    }

    /// A notification with its deliveries (in chunks), receipts, opens and counts.
    func removeNotification(_ id: String) async throws {
        try await emptyInChunks(NotificationSweep.deliveriesChunk(id))
        try await pool.write { db in
            try db.execute(query: NotificationSweep.receipts(id))
            try db.execute(query: NotificationSweep.opens(id))
            try db.execute(query: NotificationSweep.minutes(id))
            try db.execute(query: NotificationSweep.notification(id))
        }
    }

    /// Runs a statement that deletes a chunk until it deletes nothing, each run its own transaction.
    func emptyInChunks(_ statement: SQL) async throws {
        while try await pool.write({ db in
            try db.execute(query: statement)
            return db.changesCount
        }) > 0 {}
    }

    public func deleteApp(id: String) async throws -> Bool {
        guard try await sqliteStore.app(id: id) != nil else { return false }
        for key in try await sqliteStore.keys(appID: id, after: "", limit: APIKeys.maxPerApp * 2) {
            _ = try await sqliteStore.revokeKey(appID: id, keyID: key.keyID)
        }
        try await purge(id)
        return try await sqliteStore.removeApp(id: id)
    }

    /// An app's notifications (with all that hangs on them), devices and live tokens, in chunks.
    func purge(_ id: String) async throws {
        while case let ids = try await pool.read({ db in
            try Row.fetchAll(db, query: AppDeletion.notifications(id)).map { $0[0] as String }
        }), !ids.isEmpty {
            for n in ids { try await removeNotification(n) }
        }
        for statement in AppDeletion.chunks(id, deliveries: false) { try await emptyInChunks(statement) }
    }

    public func purgeDeletedApps(now: Date) async throws -> Int {
        let watched = try await pool.read { db in
            try Row.fetchAll(db, query: AppDeletion.watched()).map { $0[0] as String }
        }
        for id in watched {
            try await purge(id)
            // What the keyed rows of the small tables hold too (a key made by the admin in between).
            try await pool.write { db in for statement in AppDeletion.rest(id) { try db.execute(query: statement) } }
        }
        if !watched.isEmpty { try await pool.write { db in try db.execute(query: AppDeletion.orphanMinutes) } }
        try await pool.write { db in
            try db.execute(query: AppDeletion.forget(before: now.addingTimeInterval(-AppDeletion.watch)))
        }
        return watched.count
    }
}
