import Foundation
import PostgresNIO
import RichPushCore

/// Updates in place on PostgreSQL, over the statements SQLite runs (``NotificationVersions``). An update locks its
/// root row for its transaction, so that two nodes accepting updates to one notification at once take versions in
/// turn.
public final class PostgresNotificationUpdates: NotificationUpdates {
    let db: PostgresDatabase
    /// Called after a commit that queued deliveries (other nodes' workers are told).
    let queued: @Sendable () -> Void

    public init(database: PostgresDatabase, queued: @escaping @Sendable () -> Void = {}) {
        db = database
        self.queued = queued
    }

    static func family(_ row: PostgresRow) throws -> NotificationFamily {
        let (id, root, version, latest, app, fanOut) = try row.decode((String, String, Int, Int, String, String).self)
        return NotificationFamily(
            id: id,
            rootID: root,
            version: version,
            latest: latest,
            appID: app,
            fanOutPending: fanOut == FanOutState.pending.rawValue
        )
    }

    /// How many rows a statement changed.
    static func counted(_ statement: SQL) -> SQL {
        "WITH changed AS (" + statement + " RETURNING 1) SELECT count(*) FROM changed"
    }

    public func family(of id: String) async throws -> NotificationFamily? {
        try await db.rows(NotificationVersions.family(id).postgres).first.map(Self.family)
    }

    public func accept(
        _ plan: UpdatePlan,
        respond: @escaping @Sendable (Int, Int, Int) -> JSONValue
    ) async throws -> UpdateAccepted {
        let accepted = try await db.transaction { c -> UpdateAccepted in
            let logger = self.db.logger
            func rows(_ q: SQL) async throws -> [PostgresRow] {
                try await c.query(q.postgres, logger: logger).collect()
            }
            func count(_ q: SQL) async throws -> Int {
                try await rows(Self.counted(q)).first?.decode(Int.self) ?? 0
            }
            _ = try await rows(NotificationVersions.lockRoot(plan.rootID))
            guard let root = try await rows(NotificationVersions.family(plan.rootID)).first.map(Self.family),
                root.id == root.rootID, root.appID == plan.notification.appID
            else { throw UpdateRefused.noRoot }
            guard !root.fanOutPending else { throw UpdateRefused.fanOutPending }
            if let key = plan.idempotencyKey,
                let row = try await rows(NotificationVersions.byIdempotencyKey(appID: root.appID, key: key)).first
            {
                let first = try PostgresServerStore.notification(row)
                let version = try await rows(NotificationVersions.family(first.id)).first.map(Self.family)?.version
                return UpdateAccepted(
                    notification: first,
                    created: false,
                    version: version ?? 0,
                    queued: 0,
                    superseded: 0
                )
            }
            let times = try await rows(NotificationVersions.times(root: root.id)).map { try $0.decode(Date.self) }
            try plan.limits.check(latest: root.latest, times: times, now: Date())
            let version = root.latest + 1
            _ = try await rows(NotificationVersions.bump(root: root.id, from: root.latest))
            let now = Date()
            var superseded = 0
            if let previous = try await rows(NotificationVersions.versionID(root: root.id, version: root.latest))
                .first?.decode(String.self)
            {
                superseded = try await count(NotificationVersions.supersede(previous, by: version, now: now))
            }
            var n = plan.notification
            let queued = try await count(
                NotificationVersions.copyTargets(root: root.id, to: n.id, expiresAt: plan.expiresAt, now: now)
            )
            n.response = respond(version, queued, superseded)
            _ = try await rows(
                NotificationVersions.insert(n, idempotencyKey: plan.idempotencyKey, root: root.id, version: version)
            )
            if queued == 0 {
                // Reached nobody: no settle will open it for notification.completed, so its accept does.
                _ = try await rows(WebhookSQL.openWithoutDeliveries(n.id, appID: n.appID, now: now))
            }
            return UpdateAccepted(
                notification: n,
                created: true,
                version: version,
                queued: queued,
                superseded: superseded
            )
        }
        if accepted.queued > 0 { queued() }
        return accepted
    }

    public func verdicts(_ batch: [DeliveryRecord]) async throws -> [Int64: VersionVerdict] {
        let ids = Array(Set(batch.map(\.notificationID)))
        guard !ids.isEmpty else { return [:] }
        let families = try await db.rows(NotificationVersions.families(ids).postgres).map(Self.family)
        guard !families.isEmpty else { return [:] }
        // Each family's versions in flight, read before deciding (the decision itself is the shared one).
        var inFlight: [String: [(Int64, String)]] = [:]
        for f in families where f.version > 0 && f.version >= f.latest {
            let key = "\(f.rootID)|\(f.version)"
            guard inFlight[key] == nil else { continue }
            inFlight[key] = try await db.rows(NotificationVersions.inFlight(root: f.rootID, below: f.version).postgres)
                .map { try $0.decode((Int64, String).self) }
        }
        return NotificationVersions.verdicts(
            batch,
            families: Dictionary(families.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        ) { root, version in inFlight["\(root)|\(version)"] ?? [] }
    }

    public func release(_ ids: [Int64], owner: String, notBefore: Date, now: Date) async throws -> Set<Int64> {
        guard !ids.isEmpty else { return [] }
        return Set(
            try await db.rows(NotificationVersions.release(ids, owner: owner, notBefore: notBefore, now: now).postgres)
                .map { try $0.decode(Int64.self) }
        )
    }
}
