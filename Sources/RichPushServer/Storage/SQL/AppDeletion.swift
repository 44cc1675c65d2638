import Foundation

/// An app deleted with everything it holds, written once for both databases. The admin's `DELETE /v1/apps/{app}`
/// first revokes the app's keys (nothing but the admin key reaches it from then on), then removes its data in
/// chunks, each its own transaction, so that an app of millions of devices and deliveries never holds the writers
/// up for long, and last the app itself. Interrupted (a crash, the database away), the app stays with no key, and
/// the same call finishes the work.
///
/// Hosted media is content-addressed and may be shared by several apps: it is not removed here; retention sweeps
/// what no notification keeps.
enum AppDeletion {
    /// Rows one transaction deletes.
    static let chunk = 5_000

    /// Some of the app's notifications: each goes as the retention sweep removes one, whatever its deliveries' state.
    static func notifications(_ app: String) -> SQL {
        "SELECT id FROM notifications WHERE app_id = \(app) LIMIT \(chunk)"
    }

    /// The statements that empty the app's tables by its id, each deleting at most ``chunk`` rows; run each until it
    /// deletes nothing. Deliveries come first: a fan-out that was running may have queued some after the notifications
    /// were read.
    static func chunks(_ app: String) -> [SQL] {
        [
            "DELETE FROM deliveries WHERE id IN (SELECT id FROM deliveries WHERE app_id = \(app) LIMIT \(chunk))",
            // tags and topics go with their device (ON DELETE CASCADE)
            "DELETE FROM devices WHERE id IN (SELECT id FROM devices WHERE app_id = \(app) LIMIT \(chunk))",
            """
            DELETE FROM live_tokens WHERE app_id = \(app) AND token IN
                (SELECT token FROM live_tokens WHERE app_id = \(app) LIMIT \(chunk))
            """,
        ]
    }

    /// The app's small tables, in the transaction that removes the app.
    static func rest(_ app: String) -> [SQL] {
        [
            "DELETE FROM identity_keys WHERE app_id = \(app)",
            "DELETE FROM app_counts WHERE app_id = \(app)",
            "DELETE FROM media_upload_days WHERE app_id = \(app)",
            "DELETE FROM api_keys WHERE app_id = \(app)",
        ]
    }

    /// The app itself, last.
    static func app(_ app: String) -> SQL { "DELETE FROM apps WHERE id = \(app)" }
}
