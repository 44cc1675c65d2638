import Foundation

/// Updates in place, written once for both databases. A notification that was updated is the root of a family:
/// the root is version 0 and keeps the newest version's number (`latest_version`); each update is a notification
/// of its own (its message, its deliveries, its outcomes) with `root_id` and `version` set.
///
/// What keeps a device from being left on an older state than one it was sent:
/// - accepting version N supersedes what is still queued of version N − 1 (older versions were superseded when
///   the versions after them came);
/// - before a worker sends a delivery it asks ``verdicts``: a version older than the root's newest is superseded
///   (a retry of N − 1 that comes back after N was accepted is never sent), and a version with an older version
///   to the same target in flight waits until that send has ended.
enum NotificationVersions {
    /// The columns the updates add to `notifications`.
    static let sqliteColumns = """
        ALTER TABLE notifications ADD COLUMN root_id TEXT;
        ALTER TABLE notifications ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE notifications ADD COLUMN latest_version INTEGER NOT NULL DEFAULT 0;
        CREATE INDEX notifications_root ON notifications(root_id, version) WHERE root_id IS NOT NULL
        """
    static let postgresColumns = """
        ALTER TABLE notifications ADD COLUMN root_id text;
        ALTER TABLE notifications ADD COLUMN version integer NOT NULL DEFAULT 0;
        ALTER TABLE notifications ADD COLUMN latest_version integer NOT NULL DEFAULT 0;
        CREATE INDEX notifications_root ON notifications (root_id, version) WHERE root_id IS NOT NULL
        """

    /// A notification's place in its family: id, root, version, the root's newest version, the root's app and
    /// fan-out state.
    static func family(_ id: String) -> SQL {
        """
        SELECT n.id, r.id, n.version, r.latest_version, r.app_id, r.fanout_state FROM notifications n
        JOIN notifications r ON r.id = COALESCE(n.root_id, n.id) WHERE n.id = \(id)
        """
    }

    /// The same for several notifications (a claimed batch's), those that belong to a family only: a
    /// notification never updated has no `root_id` and a `latest_version` of 0.
    static func families(_ ids: [String]) -> SQL {
        """
        SELECT n.id, r.id, n.version, r.latest_version, r.app_id, r.fanout_state FROM notifications n
        JOIN notifications r ON r.id = COALESCE(n.root_id, n.id)
        WHERE n.id IN (\(list(ids))) AND (n.root_id IS NOT NULL OR n.latest_version > 0)
        """
    }

    /// Takes the next version number: only from the number read (a concurrent update that took it first makes
    /// this change nothing, and the caller tries again).
    static func bump(root: String, from previous: Int) -> SQL {
        """
        UPDATE notifications SET latest_version = \(previous + 1)
        WHERE id = \(root) AND root_id IS NULL AND latest_version = \(previous)
        """
    }

    /// Stores an update: version `version` of `root`, with its answer.
    static func insert(_ n: StoredNotification, idempotencyKey: String?, root: String, version: Int) -> SQL {
        """
        INSERT INTO notifications (id, app_id, idempotency_key, message, response, created_at, fanout_state, root_id, version)
        VALUES (\(n.id), \(n.appID), \(idempotencyKey), \(n.message.jsonString), \(n.response.jsonString), \(n.createdAt),
            \(FanOutState.done), \(root), \(version))
        """
    }

    /// The notification an app stored with an idempotency key.
    static func byIdempotencyKey(appID: String, key: String) -> SQL {
        "SELECT \(unescaped: Columns.notification) FROM notifications WHERE app_id = \(appID) AND idempotency_key = \(key)"
    }

    /// When the root and each of its versions were created, in version order (at most the versions allowed: the
    /// bound on versions bounds this read).
    static func times(root: String) -> SQL {
        "SELECT created_at FROM notifications WHERE id = \(root) OR root_id = \(root) ORDER BY version"
    }

    /// Locks a root while its next version is taken (PostgreSQL; SQLite has one writer).
    static func lockRoot(_ root: String) -> SQL {
        "SELECT id FROM notifications WHERE id = \(root) FOR UPDATE"
    }

    /// The id of a family's version (the root is version 0).
    static func versionID(root: String, version: Int) -> SQL {
        version == 0
            ? "SELECT id FROM notifications WHERE id = \(root)"
            : "SELECT id FROM notifications WHERE root_id = \(root) AND version = \(version)"
    }

    /// Ends as superseded what is still queued of one version.
    static func supersede(_ notificationID: String, by version: Int, now: Date) -> SQL {
        """
        UPDATE deliveries SET state = 'superseded', reason = \("version \(version)"), updated_at = \(now)
        WHERE notification_id = \(notificationID) AND state = 'queued'
        """
    }

    /// Queues the update for every target the root was sent to, but those whose token is gone.
    static func copyTargets(root: String, to id: String, expiresAt: Date?, now: Date) -> SQL {
        // A NULL is written as a literal: a bound NULL has no type PostgreSQL could put in a timestamp column.
        let expires: SQL = expiresAt.map { "\($0)" } ?? "NULL"
        return """
            INSERT INTO deliveries \(unescaped: Columns.deliveryInsert)
            SELECT \(id), app_id, provider, target, 'queued', \(now), \(expires), \(now) FROM deliveries
            WHERE notification_id = \(root) AND state <> 'pruned' ORDER BY id
            """
    }

    /// Sends of a family's versions older than `version` in flight now: delivery id and target. Read from the
    /// leased deliveries (what workers hold), however many the family's versions sent before.
    static func inFlight(root: String, below version: Int) -> SQL {
        """
        SELECT d.id, d.target FROM deliveries d JOIN notifications n ON n.id = d.notification_id
        WHERE d.state = 'leased' AND (n.id = \(root) OR n.root_id = \(root)) AND n.version < \(version)
        """
    }

    /// Puts deliveries that must wait back in the queue without counting the attempt (none was made).
    static func release(_ ids: [Int64], owner: String, notBefore: Date, now: Date) -> SQL {
        """
        UPDATE deliveries SET state = 'queued', not_before = \(notBefore), reason = 'older_version_in_flight',
            attempts = attempts - 1, lease_owner = NULL, lease_until = NULL, updated_at = \(now)
        WHERE id IN (\(list(ids))) AND state = 'leased' AND lease_owner = \(owner)
        RETURNING id
        """
    }

    /// Values as a comma-separated list of placeholders.
    static func list(_ values: [String]) -> SQL {
        values.enumerated().reduce(SQL(stringLiteral: "")) { out, v in
            out + (v.offset == 0 ? "\(v.element)" : ", \(v.element)" as SQL)
        }
    }
    static func list(_ values: [Int64]) -> SQL {
        values.enumerated().reduce(SQL(stringLiteral: "")) { out, v in
            out + (v.offset == 0 ? "\(v.element)" : ", \(v.element)" as SQL)
        }
    }
}
