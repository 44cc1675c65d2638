import Foundation

/// The statements the minute counts take, written once for both databases.
enum MinuteSQL {
    static let sqliteTable = """
        CREATE TABLE notification_minutes (
            notification_id TEXT NOT NULL, minute INTEGER NOT NULL, kind TEXT NOT NULL, reason TEXT NOT NULL,
            count INTEGER NOT NULL, PRIMARY KEY (notification_id, minute, kind, reason))
        """
    static let postgresTable = """
        CREATE TABLE notification_minutes (
            notification_id text NOT NULL, minute bigint NOT NULL, kind text NOT NULL, reason text NOT NULL,
            count bigint NOT NULL, PRIMARY KEY (notification_id, minute, kind, reason))
        """

    static func add(_ c: MinuteCount) -> SQL {
        """
        INSERT INTO notification_minutes (notification_id, minute, kind, reason, count)
        VALUES (\(c.notificationID), \(c.minute), \(c.kind.rawValue), \(c.reason), \(c.count))
        ON CONFLICT (notification_id, minute, kind, reason) DO UPDATE SET count = notification_minutes.count + excluded.count
        """
    }

    /// An app's counts per hour and kind since `minute` (the app's notifications joined to their minutes).
    static func hours(appID: String, sinceMinute: Int64) -> SQL {
        """
        SELECT m.minute / 60 * 3600 AS hour, m.kind, CAST(sum(m.count) AS BIGINT) FROM notification_minutes m
        JOIN notifications n ON n.id = m.notification_id
        WHERE n.app_id = \(appID) AND m.minute >= \(sinceMinute) GROUP BY 1, 2 ORDER BY 1
        """
    }

    /// An app's most common failure reasons since `minute`.
    static func failures(appID: String, sinceMinute: Int64) -> SQL {
        """
        SELECT m.reason, CAST(sum(m.count) AS BIGINT) AS n FROM notification_minutes m
        JOIN notifications n ON n.id = m.notification_id
        WHERE n.app_id = \(appID) AND m.minute >= \(sinceMinute) AND m.kind = 'failed'
        GROUP BY m.reason ORDER BY n DESC, m.reason LIMIT 10
        """
    }

    static func sweep(_ notificationID: String) -> SQL {
        "DELETE FROM notification_minutes WHERE notification_id = \(notificationID)"
    }
}
