import Foundation
import Logging
import NIOConcurrencyHelpers
import PostgresNIO
import ServiceLifecycle

/// Everything in one PostgreSQL database that any number of nodes share: apps and keys, the device registry,
/// notifications with their deliveries, receipts and hosted media. Each node has an id: its leases, fan-outs and
/// heartbeat carry it.
///
/// ```swift
/// let backend = try await PostgresBackend.open(url: "postgres://richpush@db/richpush", sealer: sealer)
/// let api = RichPushAPI(backend: backend, adminKey: adminKey)
/// ```
public final class PostgresBackend: StorageBackend {
    public let database: PostgresDatabase
    public let nodeID: String
    public let pgStore: PostgresServerStore
    public let pgRegistry: PostgresDeviceRegistry
    public let pgQueue: PostgresDeliveryQueue
    public let pgIntake: PostgresIntake
    public let media: PostgresMediaFiles
    public let receipts: any ReceiptStore
    public let liveTokens: any LiveTokenStore
    public let updates: any NotificationUpdates
    public let uploads: any UploadLedger
    public let webhooks: any WebhookStore
    let announcer: WorkAnnouncer
    public let workQueued: WorkQueued

    public var store: any ServerStore { pgStore }
    public var registry: any DeviceRegistry { pgRegistry }
    public var queue: any DeliveryQueue { pgQueue }
    public var intake: any NotificationIntake { pgIntake }
    public var health: DatabaseHealth { database.health }
    public var sharedMedia: (any SharedMediaFiles)? { media }

    /// Opens the database, applies its migrations (one node at a time) and checks the credentials key.
    public static func open(
        url: String,
        sealer: CredentialSealer?,
        nodeID: String = PostgresBackend.newNodeID(),
        chunk: Int = 50_000,
        timeout: Duration = .seconds(10)
    ) async throws -> PostgresBackend {
        try await open(url: url, sealer: { _ in sealer }, nodeID: nodeID, chunk: chunk, timeout: timeout)
    }

    /// As above, with the sealer made once the database says whether sealed credentials exist (a node must not
    /// make a new key then: it would lock them away). `fanOutLease`: how long a fan-out stays with a node that
    /// stopped renewing it (each chunk renews it).

    public static func open(
        url: String,
        sealer makeSealer: (_ sealedExist: Bool) throws -> CredentialSealer?,
        nodeID: String = PostgresBackend.newNodeID(),
        chunk: Int = 50_000,
        fanOutLease: TimeInterval = 60,
        timeout: Duration = .seconds(10),
        logger: Logger = Logger(label: "richpush.postgres")
    ) async throws -> PostgresBackend {
        let db = try await PostgresDatabase.open(try PostgresSettings(url: url), timeout: timeout, logger: logger)
        do {
            let store = try await preparedStore(db, sealer: makeSealer)
            return PostgresBackend(database: db, store: store, nodeID: nodeID, chunk: chunk, fanOutLease: fanOutLease)
        } catch {
            await db.close()
            throw error
        }
    }

    /// A backend for a server's service group: the migrations, the credentials key's check and the secrets named
    /// are done on a client of their own that stops when they are done; the backend's database is not running yet
    /// (the group runs it, listed first).
    static func prepared(
        url: String,
        sealer makeSealer: @escaping @Sendable (_ sealedExist: Bool) throws -> CredentialSealer?,
        secrets: [String],
        nodeID: String,
        fanOutLease: TimeInterval,
        timeout: Duration = .seconds(10),
        logger: Logger
    ) async throws -> (backend: PostgresBackend, secrets: [String: [UInt8]]) {
        let settings = try PostgresSettings(url: url)
        let (sealer, values) = try await PostgresDatabase.withRunning(settings, timeout: timeout, logger: logger) {
            db -> (CredentialSealer?, [String: [UInt8]]) in
            let store = try await preparedStore(db, sealer: makeSealer)
            var values: [String: [UInt8]] = [:]
            for name in secrets { values[name] = try await store.secret(named: name) }
            return (store.credentials.sealer, values)
        }
        let db = try PostgresDatabase(settings, timeout: timeout, logger: logger)
        let backend = PostgresBackend(
            database: db,
            store: PostgresServerStore(checked: db, sealer: sealer),
            nodeID: nodeID,
            chunk: 50_000,
            fanOutLease: fanOutLease
        )
        return (backend, values)
    }

    /// What every opening does first, one node at a time: the migrations, the sealer (made once the database says
    /// whether sealed credentials exist), and the store over `db` with the credentials key checked.
    static func preparedStore(
        _ db: PostgresDatabase,
        sealer makeSealer: (_ sealedExist: Bool) throws -> CredentialSealer?
    ) async throws -> PostgresServerStore {
        try await PostgresMigrations.migrate(db)
        let sealer = try makeSealer(try await PostgresServerStore.hasSealedCredentials(db))
        return try await PostgresServerStore(database: db, sealer: sealer)
    }

    init(
        database: PostgresDatabase,
        store: PostgresServerStore,
        nodeID: String,
        chunk: Int,
        fanOutLease: TimeInterval = 60
    ) {
        self.database = database
        self.nodeID = nodeID
        let announcer = WorkAnnouncer(db: database)
        self.announcer = announcer
        let workQueued = WorkQueued()
        self.workQueued = workQueued
        workQueued.tellPeers(through: announcer.announce)
        pgStore = store
        pgRegistry = PostgresDeviceRegistry(database: database)
        let queue = PostgresDeliveryQueue(database: database)
        pgQueue = queue
        // New deliveries, this node's or another's, may sort before a claim mark (a fan-out of an older send, a
        // clock behind this one's): the marks past their earliest time move back to it, and every mark goes when
        // that time is not known. (Forgetting every mark at each accepted send made each claim of a steady stream of
        // sends read from the head of the due index: 4.8 to 5.5 ms a claim against 1.8, under cluster.sh's load.)
        workQueued.listenForTimes { queue.pullBackClaimMarks(to: $0) }
        pgIntake = PostgresIntake(database: database, nodeID: nodeID, chunk: chunk, fanOutLease: fanOutLease) {
            workQueued.tell(earliest: $0)
        }
        media = PostgresMediaFiles(database: database)
        receipts = PostgresReceiptStore(db: database)
        liveTokens = PostgresLiveTokenStore(db: database)
        updates = PostgresNotificationUpdates(database: database) { workQueued.tell() }
        uploads = PostgresUploadLedger(db: database)
        webhooks = PostgresWebhookStore(db: database, sealer: store.credentials.sealer)
    }

    /// `HOST-PID-RANDOM`: unique among the nodes, and it says where a lease's holder ran.
    public static func newNodeID() -> String {
        let host = ProcessInfo.processInfo.hostName.split(separator: ".").first.map(String.init) ?? "node"
        return "\(host)-\(ProcessInfo.processInfo.processIdentifier)-\(UUID().uuidString.prefix(6).lowercased())"
    }

    /// Applies the migrations and returns the versions applied (`richpush migrate`).
    public static func migrate(url: String) async throws -> (applied: [Int], current: Int) {
        // The client's note on each connection it could not make repeats every attempt; the error that ends the
        // command says why once.
        var logger = Logger(label: "richpush.postgres")
        logger.logLevel = .notice
        let applied = try await PostgresDatabase.withRunning(try PostgresSettings(url: url), logger: logger) { db in
            try await PostgresMigrations.migrate(db)
        }
        return (applied, PostgresMigrations.all.last?.version ?? 0)
    }

    public func close() async { await database.close() }

    public func backgroundServices(
        address: String,
        leaderJobs: [PeriodicJob],
        logger: Logger,
        onNodes: @escaping @Sendable (Int) -> Void
    ) -> [any Service] {
        // The cluster's services log through the database's logger, which is the server's (given at open).
        let workQueued = self.workQueued
        let store = pgStore
        return [
            PostgresListener(
                db: database,
                onWork: { workQueued.heardFromPeer(earliest: $0) },
                onCache: { store.forget($0) }
            ),
            PostgresHeartbeat(db: database, nodeID: nodeID, address: address, interval: 2, onNodes: onNodes),
            PostgresLeader(db: database, jobs: leaderJobs + clusterJobs()),
            announcer,
        ]
    }

    /// The database's own periodic work, done by the leader.
    func clusterJobs() -> [PeriodicJob] {
        let db = database
        return [
            // A dead node's leases go back to the queue (a claim takes them anyway; this keeps the counts honest),
            // passing over rows a statement holds (it never waits: waiting on rows in another order than the settles
            // and renewals lock them would deadlock with them).
            PeriodicJob(name: "reap-leases", interval: 5) {
                try await db.rows(
                    """
                    UPDATE deliveries d SET state = 'queued', lease_owner = NULL, lease_until = NULL, updated_at = now()
                    FROM (SELECT id FROM deliveries WHERE state = 'leased' AND lease_until < now() - interval '5 seconds'
                        ORDER BY id LIMIT 10000 FOR UPDATE SKIP LOCKED) r
                    WHERE d.id = r.id
                    """
                )
            },
            PeriodicJob(name: "forget-nodes", interval: 600) {
                try await db.rows("DELETE FROM nodes WHERE seen_at < now() - interval '1 day'")
            },
        ]
    }

    public func fanOutInDatabase(_ r: FanOutRequest) async throws -> Int? {
        guard AudienceFilter.postgres(r.audience, appID: r.appID) != nil else { return nil }
        let total = r.spread > 0 ? try await pgRegistry.countInDatabase(appID: r.appID, audience: r.audience) ?? 0 : 0
        return try await pgIntake.insertInChunks(
            notificationID: r.notificationID,
            appID: r.appID,
            audience: r.audience,
            notBefore: r.notBefore,
            expiresAt: r.expiresAt,
            step: Spread.step(r.spread, count: total),
            from: .init(cursor: nil, inserted: 0),
            tracked: false
        ).added
    }

    public func countByProviderInDatabase(appID: String, audience: Audience) async throws -> [DeliveryProvider: Int]? {
        try await pgRegistry.countByProviderInDatabase(appID: appID, audience: audience)
    }

    public func isUnavailable(_ error: any Error) -> Bool { PostgresDatabase.isUnavailable(error) }

    public func sweepNotifications(before cutoff: Date, limit: Int) async throws -> Int {
        let candidates = try await database.rows(NotificationSweep.candidates(before: cutoff, limit: limit).postgres)
            .map { try $0.decode(String.self) }
        var removed = 0
        for id in candidates {
            let open = try await database.rows(NotificationSweep.stillDelivering(id).postgres).first?.decode(Int.self)
            guard open == 0 else { continue }
            try await removeNotification(id)
            removed += 1
        }
        return removed
    }

    /// A notification with its deliveries (in chunks), receipts, opens and counts.
    func removeNotification(_ id: String) async throws {
        try await emptyInChunks(NotificationSweep.deliveriesChunk(id))
        let logger = database.logger
        try await database.transaction { c in
            for statement in [
                NotificationSweep.receipts(id), NotificationSweep.opens(id), NotificationSweep.minutes(id),
                NotificationSweep.notification(id),
            ] {
                _ = try await c.query(statement.postgres, logger: logger).collect()
            }
        }
    }

    /// Runs a statement that deletes a chunk until it deletes nothing, each run its own transaction.
    func emptyInChunks(_ statement: SQL) async throws {
        let counted: SQL = "WITH gone AS (\(statement) RETURNING 1) SELECT count(*) FROM gone"
        while try await database.rows(counted.postgres).first?.decode(Int.self) ?? 0 > 0 {}
    }

    public func deleteApp(id: String) async throws -> Bool {
        guard try await pgStore.app(id: id) != nil else { return false }
        for key in try await pgStore.keys(appID: id, after: "", limit: APIKeys.maxPerApp * 2) {
            _ = try await pgStore.revokeKey(appID: id, keyID: key.keyID)
        }
        try await purge(id)
        return try await pgStore.removeApp(id: id)
    }

    /// An app's notifications (with all that hangs on them), deliveries, devices and live tokens, in chunks.
    func purge(_ id: String) async throws {
        while case let ids = try await database.rows(AppDeletion.notifications(id).postgres).map({
            try $0.decode(String.self)
        }), !ids.isEmpty {
            for n in ids { try await removeNotification(n) }
        }
        for statement in AppDeletion.chunks(id, deliveries: true) { try await emptyInChunks(statement) }
    }

    public func purgeDeletedApps(now: Date) async throws -> Int {
        let watched = try await database.rows(AppDeletion.watched().postgres).map { try $0.decode(String.self) }
        for id in watched {
            try await purge(id)
            _ = try await database.transaction { c in
                for statement in AppDeletion.rest(id) {
                    _ = try await c.query(statement.postgres, logger: self.database.logger).collect()
                }
            }
        }
        if !watched.isEmpty { try await database.rows(AppDeletion.orphanMinutes.postgres) }
        try await database.rows(AppDeletion.forget(before: now.addingTimeInterval(-AppDeletion.watch)).postgres)
        return watched.count
    }
}
