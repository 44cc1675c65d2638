import Foundation

/// An app deleted with everything it holds, written once for both databases. The admin's `DELETE /v1/apps/{app}`
/// first revokes the app's keys (nothing but the admin key reaches it from then on), then removes its data in
/// chunks, each its own transaction, so that an app of millions of devices and deliveries never holds the writers
/// up for long, and last the app itself. Interrupted (a crash, the database away), the app stays with no key, and
/// the same call finishes the work.
///
/// A request that passed its key check before the keys went may still write after the app is gone (a registration
/// or a send whose body came slowly, a send whose media took seconds to fetch): the app's id is kept in
/// `deleted_apps` for a day, and the leader's `purge-deleted-apps` job empties its tables again every minute
/// meanwhile (``StorageBackend/purgeDeletedApps(now:)``).
///
/// Hosted media is content-addressed and may be shared by several apps: it is not removed here; retention sweeps
/// what no notification keeps.
enum AppDeletion {
    /// How long a deleted app's id is kept, and its tables emptied again: longer than any request takes.
    static let watch: TimeInterval = 86_400

    /// The ids of deleted apps, each with when it was deleted (SQLite migration `deleted-apps`, PostgreSQL 18).
    static func table(time: String) -> String {
        "CREATE TABLE deleted_apps (id TEXT PRIMARY KEY, deleted_at \(time) NOT NULL)"
    }

    static func remember(_ app: String, at date: Date) -> SQL {
        """
        INSERT INTO deleted_apps (id, deleted_at) VALUES (\(app), \(date))
        ON CONFLICT (id) DO UPDATE SET deleted_at = EXCLUDED.deleted_at
        """
    }

    static func watched() -> SQL { "SELECT id FROM deleted_apps ORDER BY deleted_at LIMIT 1000" }

    static func forget(before cutoff: Date) -> SQL { "DELETE FROM deleted_apps WHERE deleted_at < \(cutoff)" }

    /// Counts a node flushed for a notification after it went (they are kept in memory up to a few seconds, and
    /// name the notification, not its app): run while deletions are watched.
    static let orphanMinutes: SQL =
        "DELETE FROM notification_minutes WHERE notification_id NOT IN (SELECT id FROM notifications)"

    /// Rows one transaction deletes.
    static let chunk = 5_000

    /// Some of the app's notifications: each goes as the retention sweep removes one, whatever its deliveries' state.
    static func notifications(_ app: String) -> SQL {
        "SELECT id FROM notifications WHERE app_id = \(app) LIMIT \(chunk)"
    }

    /// The statements that empty the app's tables by its id, each deleting at most ``chunk`` rows; run each until it
    /// deletes nothing. With `deliveries`, first the deliveries a fan-out that was running may have queued after the
    /// notifications were read: no index has the app's id first, so that statement reads the whole table, which
    /// PostgreSQL does beside its writers; on SQLite it would hold the one writer for as long (0.34 s per 4 million
    /// rows, measured), and such deliveries end `notification_missing` when a worker reaches them instead.
    static func chunks(_ app: String, deliveries: Bool) -> [SQL] {
        (deliveries
            ? ["DELETE FROM deliveries WHERE id IN (SELECT id FROM deliveries WHERE app_id = \(app) LIMIT \(chunk))"]
            : [])
            + [
                // tags and topics go with their device (ON DELETE CASCADE)
                "DELETE FROM devices WHERE id IN (SELECT id FROM devices WHERE app_id = \(app) LIMIT \(chunk))",
                """
                DELETE FROM live_tokens WHERE app_id = \(app) AND token IN
                    (SELECT token FROM live_tokens WHERE app_id = \(app) LIMIT \(chunk))
                """,
                WebhookSQL.appEvents(app, chunk: chunk),
            ]
    }

    /// The app's small tables, in the transaction that removes the app.
    static func rest(_ app: String) -> [SQL] {
        WebhookSQL.appTables(app) + [
            "DELETE FROM identity_keys WHERE app_id = \(app)",
            "DELETE FROM app_counts WHERE app_id = \(app)",
            "DELETE FROM media_upload_days WHERE app_id = \(app)",
            "DELETE FROM api_keys WHERE app_id = \(app)",
        ]
    }

    /// The app itself, last.
    static func app(_ app: String) -> SQL { "DELETE FROM apps WHERE id = \(app)" }
}
