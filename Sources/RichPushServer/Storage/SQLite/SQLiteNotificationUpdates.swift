import Foundation
import GRDB
import NIOConcurrencyHelpers
import RichPushCore

/// Updates in the server's SQLite database. An update is its own transaction (not the group commit: it copies the
/// root's targets, which may be many, and a refusal must not replay the group).
public final class SQLiteNotificationUpdates: NotificationUpdates {
    let pool: DatabasePool
    /// Told when deliveries were queued (``WorkQueued``).
    let queued: @Sendable () -> Void

    public init(pool: DatabasePool, queued: @escaping @Sendable () -> Void = {}) {
        self.pool = pool
        self.queued = queued
    }

    public func family(of id: String) async throws -> NotificationFamily? {
        try await pool.read { db in
            try Row.fetchAll(db, query: NotificationVersions.family(id)).first.map(NotificationVersions.family)
        }
    }

    public func accept(
        _ plan: UpdatePlan,
        respond: @escaping @Sendable (Int, Int, Int) -> JSONValue
    ) async throws -> UpdateAccepted {
        let accepted = try await pool.write { db in
            guard
                let root = try Row.fetchAll(db, query: NotificationVersions.family(plan.rootID)).first.map(
                    NotificationVersions.family
                ), root.id == root.rootID, root.appID == plan.notification.appID
            else { throw UpdateRefused.noRoot }
            guard !root.fanOutPending else { throw UpdateRefused.fanOutPending }
            if let key = plan.idempotencyKey,
                let row = try Row.fetchAll(
                    db,
                    query: NotificationVersions.byIdempotencyKey(appID: root.appID, key: key)
                )
                .first
            {
                let first = try SQLiteServerStore.notification(row)
                let version = try Row.fetchAll(db, query: NotificationVersions.family(first.id)).first?[2] as Int?
                return UpdateAccepted(
                    notification: first,
                    created: false,
                    version: version ?? 0,
                    queued: 0,
                    superseded: 0
                )
            }
            let times = try Row.fetchAll(db, query: NotificationVersions.times(root: root.id)).map {
                Date(timeIntervalSince1970: $0[0] as Double)
            }
            try plan.limits.check(latest: root.latest, times: times, now: Date())
            let version = root.latest + 1
            try db.execute(query: NotificationVersions.bump(root: root.id, from: root.latest))
            let now = Date()
            var superseded = 0
            if let previous = try String.fetchOne(
                db,
                query: NotificationVersions.versionID(root: root.id, version: root.latest)
            ) {
                try db.execute(query: NotificationVersions.supersede(previous, by: version, now: now))
                superseded = db.changesCount
            }
            var n = plan.notification
            try db.execute(
                query: NotificationVersions.copyTargets(root: root.id, to: n.id, expiresAt: plan.expiresAt, now: now)
            )
            let queued = db.changesCount
            n.response = respond(version, queued, superseded)
            try db.execute(
                query: NotificationVersions.insert(
                    n,
                    idempotencyKey: plan.idempotencyKey,
                    root: root.id,
                    version: version
                )
            )
            if queued == 0 {
                // Reached nobody: no settle will open it for notification.completed, so its accept does.
                try db.execute(query: WebhookSQL.openWithoutDeliveries(n.id, appID: n.appID, now: now))
            }
            return UpdateAccepted(
                notification: n,
                created: true,
                version: version,
                queued: queued,
                superseded: superseded
            )
        }
        if accepted.created && accepted.queued > 0 { queued() }
        return accepted
    }

    public func verdicts(_ batch: [DeliveryRecord]) async throws -> [Int64: VersionVerdict] {
        let ids = Array(Set(batch.map(\.notificationID)))
        guard !ids.isEmpty else { return [:] }
        return try await pool.read { db in
            // Asked of every claimed batch (most hold one notification): the statement is compiled once per shape.
            let families = try Row.fetchAll(db, kept: NotificationVersions.families(ids.paddedForIN())) {
                NotificationVersions.family($0)
            }
            guard !families.isEmpty else { return [:] }
            return try NotificationVersions.verdicts(
                batch,
                families: Dictionary(families.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
            ) { root, version in
                try Row.fetchAll(db, query: NotificationVersions.inFlight(root: root, below: version)).map {
                    ($0[0] as Int64, $0[1] as String)
                }
            }
        }
    }

    public func release(_ ids: [Int64], owner: String, notBefore: Date, now: Date) async throws -> Set<Int64> {
        guard !ids.isEmpty else { return [] }
        return try await pool.write { db in
            Set(
                try Row.fetchAll(
                    db,
                    query: NotificationVersions.release(ids, owner: owner, notBefore: notBefore, now: now)
                ).map { $0[0] as Int64 }
            )
        }
    }
}
