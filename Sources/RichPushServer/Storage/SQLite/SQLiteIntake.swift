import Foundation
import GRDB
import RichPushCore

/// The intake when store, registry and queue share one SQLite database: a token, FCM topic or condition send is
/// stored with its deliveries in one transaction (shared with concurrent requests: group commit); a registry
/// fan-out is recorded as pending with the notification and then run in chunks, each chunk committing its
/// progress, so that a crash at any point resumes exactly where it stopped.
public final class SQLiteIntake: NotificationIntake {
    let store: SQLiteServerStore
    let registry: SQLiteDeviceRegistry
    let queue: SQLiteDeliveryQueue
    let chunk: Int
    /// Told when deliveries were queued (``WorkQueued``).
    let queued: @Sendable () -> Void

    public struct NotShared: Error, CustomStringConvertible {
        public var description: String { "the store, registry and queue must share one database" }
    }

    public init(
        store: SQLiteServerStore,
        registry: SQLiteDeviceRegistry,
        queue: SQLiteDeliveryQueue,
        chunk: Int = 50_000,
        queued: @escaping @Sendable () -> Void = {}
    ) throws {
        guard store.pool === registry.pool, registry.pool === queue.pool else { throw NotShared() }
        self.queued = queued
        self.store = store
        self.registry = registry
        self.queue = queue
        self.chunk = chunk
    }

    public func accept(_ plan: AcceptPlan, respond: @escaping @Sendable (Int?) -> JSONValue) async throws -> Accepted {
        let accepted = try await store.commits.write { db in try Self.insert(plan, respond: respond, in: db) }
        if accepted.created && accepted.queued > 0 { queued() }
        return accepted
    }

    public func acceptAll(
        _ plans: [AcceptPlan],
        respond: @escaping @Sendable (Int, Int?) -> JSONValue
    ) async throws
        -> [Accepted]
    {
        let accepted = try await store.commits.write { db in
            try plans.enumerated().map { i, plan in try Self.insert(plan, respond: { respond(i, $0) }, in: db) }
        }
        if accepted.contains(where: { $0.created && $0.queued > 0 }) { queued() }
        return accepted
    }

    /// Stores one notification with its deliveries (or its pending fan-out) in the caller's transaction.
    static func insert(_ plan: AcceptPlan, respond: (Int?) -> JSONValue, in db: Database) throws -> Accepted {
        var n = plan.notification
        var targets: [(DeliveryProvider, DeliveryTarget)]? = plan.audience.directTargets
        if case .tokens(let tokens) = plan.audience {
            var seen = Set<String>()
            let wanted = tokens.filter { seen.insert($0).inserted }
            if wanted.count <= 32 {
                // One cached statement per token: no SQL compiled per request.
                let one = try db.cachedStatement(
                    sql: "SELECT id, provider FROM devices WHERE app_id = ? AND token = ?"
                )
                targets = try wanted.compactMap { t in
                    try Row.fetchOne(one, arguments: [n.appID, t]).map {
                        (
                            Int64($0["id"] as Int64), DeliveryProvider(rawValue: $0["provider"]),
                            DeliveryTarget.token(t)
                        )
                    }
                }.sorted { $0.0 < $1.0 }.map { ($0.1, $0.2) }
            } else {
                let marks = Array(repeating: "?", count: wanted.count).joined(separator: ",")
                var args: [any DatabaseValueConvertible] = [n.appID]
                args += wanted
                targets = try Row.fetchAll(
                    db,
                    sql: "SELECT provider, token FROM devices WHERE app_id = ? AND token IN (\(marks)) ORDER BY id",
                    arguments: StatementArguments(args)
                ).map {
                    (DeliveryProvider(rawValue: $0["provider"]), DeliveryTarget.token($0["token"]))
                }
            }
        }
        n.response = respond(targets?.count)
        let (stored, created) = try SQLiteServerStore.insert(
            n,
            idempotencyKey: plan.idempotencyKey,
            fanOut: targets == nil ? plan : nil,
            in: db
        )
        guard created else {
            return Accepted(notification: stored, created: false, queued: 0, fanOutPending: false)
        }
        guard let targets else {
            return Accepted(notification: stored, created: true, queued: 0, fanOutPending: true)
        }
        if targets.isEmpty {
            // Reached nobody: no settle will open it for notification.completed, so its accept does.
            try db.execute(query: WebhookSQL.openWithoutDeliveries(n.id, appID: n.appID, now: Date()))
        }
        let insert = try db.cachedStatement(sql: SQLiteDeliveryQueue.insertOne)
        let step = Spread.step(plan.spread, count: targets.count)
        let now = Date().timeIntervalSince1970
        for (i, (provider, target)) in targets.enumerated() {
            try insert.execute(arguments: [
                n.id, n.appID, provider.rawValue, target.stored,
                plan.notBefore.timeIntervalSince1970 + step * Double(i),
                plan.expiresAt?.timeIntervalSince1970, now,
            ])
        }
        return Accepted(notification: stored, created: true, queued: targets.count, fanOutPending: false)
    }

    public func completeFanOut(notificationID: String) async throws -> Int {
        guard
            let row = try await store.pool.read({ db in
                try SQLiteServerStore.notificationRow(id: notificationID, in: db)
            }),
            FanOutState(rawValue: row["fanout_state"]) == .pending
        else { return 0 }
        let appID: String = row["app_id"]
        guard let audience = Audience.stored(row["audience"]),
            let filter = AudienceFilter(audience, appID: appID)
        else {
            // A stored audience this version cannot read (damaged, or written by a later one) reaches nobody, and
            // its fan-out is over: left pending, every start tried it again and its notification read as fanning
            // out for good, and one that threw was tried again without end.
            try await store.pool.write { db in
                try db.execute(
                    query: "UPDATE notifications SET fanout_state = \(FanOutState.done) WHERE id = \(notificationID)"
                )
                try db.execute(query: WebhookSQL.openWithoutDeliveries(notificationID, appID: appID, now: Date()))
            }
            return 0
        }
        let notBefore = Date(timeIntervalSince1970: row["not_before"] ?? Date().timeIntervalSince1970)
        let expiresAt = (row["expires_at"] as Double?).map(Date.init(timeIntervalSince1970:))
        let spread: Double = row["spread"]
        var total: Int = row["fanout_total"]
        let start = SQLiteDeviceRegistry.FanOutProgress(
            cursor: filter.cursor(storedID: row["fanout_cursor"], storedToken: row["fanout_token"]),
            inserted: row["fanout_inserted"]
        )
        if spread > 0 && total == 0 {
            // Counted once and stored, so that a resumed fan-out keeps the same spacing.
            total =
                start.inserted
                + (try await registry.countInDatabase(appID: appID, audience: audience, after: start.cursor) ?? 0)
            let t = total
            try await store.pool.write { db in
                try db.execute(
                    sql: "UPDATE notifications SET fanout_total = ? WHERE id = ?",
                    arguments: [t, notificationID]
                )
            }
        }
        let added =
            try await registry.fanOutInDatabase(
                FanOutRequest(
                    notificationID: notificationID,
                    appID: appID,
                    audience: audience,
                    notBefore: notBefore,
                    expiresAt: expiresAt,
                    spread: spread
                ),
                chunk: chunk,
                total: total,
                from: start
            ) { db, progress, finished in
                let state: FanOutState = finished ? .done : .pending
                let (id, token) = progress.cursor?.stored ?? (0, "")
                try db.execute(
                    query: """
                        UPDATE notifications SET fanout_cursor = \(id), fanout_token = \(token),
                            fanout_inserted = \(progress.inserted), fanout_state = \(state) WHERE id = \(notificationID)
                        """
                )
                if finished {
                    // Done with the fan-out in the same transaction: one that reached nobody is opened for
                    // notification.completed (no settle will open it).
                    try db.execute(query: WebhookSQL.openWithoutDeliveries(notificationID, appID: appID, now: Date()))
                }
            } ?? 0
        if added > 0 { queued() }
        return added
    }

    public func pendingFanOuts() async throws -> [String] {
        try await store.pool.read { db in
            let (sql, arguments) = SQL(
                "SELECT id FROM notifications WHERE fanout_state = \(FanOutState.pending) ORDER BY created_at"
            ).sqlite
            return try String.fetchAll(db, sql: sql, arguments: arguments)
        }
    }
}
