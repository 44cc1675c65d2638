import Foundation

/// Retention of notifications, written once for both databases: a notification older than the cut-off whose
/// fan-out is done and whose deliveries have all ended goes, with its deliveries and receipts. Deliveries go in
/// chunks, each its own transaction, so that a large send's rows never hold the writers up for long.
enum NotificationSweep {
    /// How many delivery rows one transaction deletes.
    static let chunk = 5_000

    /// Notifications accepted before the cut-off whose fan-out is done, oldest first.
    static func candidates(before cutoff: Date, limit: Int) -> SQL {
        """
        SELECT id FROM notifications WHERE created_at < \(cutoff) AND fanout_state = \(FanOutState.done)
        ORDER BY created_at LIMIT \(limit)
        """
    }

    /// Whether a notification still has deliveries waiting or in flight (1 when it has).
    static func stillDelivering(_ id: String) -> SQL {
        "SELECT count(*) FROM (SELECT 1 FROM deliveries WHERE notification_id = \(id) AND state IN ('queued', 'leased') LIMIT 1) open"
    }

    static func deliveriesChunk(_ id: String) -> SQL {
        "DELETE FROM deliveries WHERE id IN (SELECT id FROM deliveries WHERE notification_id = \(id) LIMIT \(chunk))"
    }

    static func receipts(_ id: String) -> SQL { "DELETE FROM delivery_receipts WHERE notification_id = \(id)" }

    static func opens(_ id: String) -> SQL { OpenSQL.sweep(id) }

    static func minutes(_ id: String) -> SQL { MinuteSQL.sweep(id) }

    static func notification(_ id: String) -> SQL { "DELETE FROM notifications WHERE id = \(id)" }
}
