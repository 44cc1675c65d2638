import Foundation
import RichPushCore

/// The statements opens take, written once for both databases.
enum OpenSQL {
    static let sqliteTable = """
        CREATE TABLE delivery_opens (
            delivery_id INTEGER PRIMARY KEY, notification_id TEXT NOT NULL, event TEXT NOT NULL, action TEXT,
            at REAL NOT NULL);
        CREATE INDEX delivery_opens_notification ON delivery_opens(notification_id)
        """
    static let postgresTable = """
        CREATE TABLE delivery_opens (
            delivery_id bigint PRIMARY KEY, notification_id text NOT NULL, event text NOT NULL, action text,
            at timestamptz NOT NULL);
        CREATE INDEX delivery_opens_notification ON delivery_opens (notification_id)
        """
    /// The deep link an open led to (added after the table; the same statement in both databases).
    static let linkColumn = "ALTER TABLE delivery_opens ADD COLUMN link TEXT"

    /// Records an open for its delivery, checked to be the notification's and accepted by the push service
    /// (delivered), unless the delivery has one.
    static func record(_ o: DeliveryOpen, returning: String = "1") -> SQL {
        """
        INSERT INTO delivery_opens (delivery_id, notification_id, event, action, link, at)
        SELECT d.id, d.notification_id, \(o.event.rawValue), \(o.action), \(o.link), \(o.at)
        FROM deliveries d WHERE d.id = \(o.deliveryID) AND d.notification_id = \(o.notificationID)
            AND d.state = \(DeliveryState.delivered.rawValue)
        ON CONFLICT (delivery_id) DO NOTHING RETURNING \(unescaped: returning)
        """
    }

    /// Why an open was not recorded: the delivery's state, when it is the notification's (no row when it is not).
    static func deliveryState(_ id: Int64, of notificationID: String) -> SQL {
        "SELECT state FROM deliveries WHERE id = \(id) AND notification_id = \(notificationID)"
    }

    /// What an open that was not recorded meets: no such delivery, one the service did not accept, or a repeat.
    static func refusal(state: String?) -> ReceiptRecording {
        guard let state else { return .notDelivered }
        guard let s = DeliveryState(rawValue: state), s != .delivered else { return .repeated }
        return .notAccepted(s)
    }

    /// Event, action ("" for none) and count, per event and action.
    static func summary(_ notificationID: String) -> SQL {
        """
        SELECT event, COALESCE(action, ''), count(*) FROM delivery_opens WHERE notification_id = \(notificationID)
        GROUP BY event, action
        """
    }

    /// The links opens followed most (at most ``OpenSummary/maxActions``, ties by link), with their counts, and
    /// on every row how many opens named a link in all (summed over every group before the limit: one pass).
    static func links(_ notificationID: String) -> SQL {
        """
        SELECT link, count(*) AS n, CAST(sum(count(*)) OVER () AS BIGINT) FROM delivery_opens
        WHERE notification_id = \(notificationID) AND link IS NOT NULL
        GROUP BY link ORDER BY n DESC, link LIMIT \(OpenSummary.maxActions)
        """
    }

    /// Opens per 10 minutes, the newest 288; the bucket's start is computed as each database can.
    static func timeline(_ notificationID: String, postgres: Bool) -> SQL {
        let bucket =
            postgres ? "(floor(extract(epoch FROM at) / 600) * 600)::bigint" : "CAST(at / 600 AS INTEGER) * 600"
        return """
            SELECT \(unescaped: bucket) AS b, count(*) FROM delivery_opens
            WHERE notification_id = \(notificationID) AND event = 'opened' GROUP BY b ORDER BY b DESC LIMIT 288
            """
    }

    static func sweep(_ notificationID: String) -> SQL {
        "DELETE FROM delivery_opens WHERE notification_id = \(notificationID)"
    }

    /// A notification's deliveries by state, reason and whether a request was made: the funnel's first stages.
    /// Bounded however many deliveries there are (states, the services' reasons, and two).
    static func breakdown(_ notificationID: String) -> SQL {
        """
        SELECT state, COALESCE(reason, ''), CASE WHEN attempts > 0 THEN 1 ELSE 0 END, count(*) FROM deliveries
        WHERE notification_id = \(notificationID) GROUP BY 1, 2, 3
        """
    }
}
