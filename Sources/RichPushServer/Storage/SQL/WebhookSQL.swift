import Foundation
import RichPushCore

/// The statements of webhooks, written once for both databases. A dialect differs in three places, each a
/// ``Dialect`` member: the event table's sequence and transaction id, which events a reader may see yet, and how an
/// endpoint is locked while it is claimed.
///
/// Events are an outbox: each is written in the transaction that records what it tells (a delivery's outcome, a
/// receipt, an open, a token), and only for an app with an endpoint subscribed to its type. Each endpoint keeps a
/// cursor into its app's events and moves it when its receiver acknowledged a request.
enum WebhookSQL {
    struct Dialect: Sendable {
        /// Events a reader may see: on PostgreSQL those of transactions older than every one still running (a
        /// sequence number taken by a transaction that commits later is never skipped); on SQLite all.
        var visible: SQL
        /// After an endpoint claim's choice: `FOR UPDATE SKIP LOCKED` on PostgreSQL.
        var lock: SQL
        var postgres: Bool

        /// Events after a place: PostgreSQL compares the row (an index range from the place on); SQLite, whose
        /// `xid` is always 0, compares the sequence alone (its row comparison reads the app's events from the start:
        /// 250 ms per read at a million, measured).
        func after(_ xid: SQL, _ seq: SQL) -> SQL {
            postgres ? "(v.xid, v.seq) > (\(xid), \(seq))" : "v.xid = \(xid) AND v.seq > \(seq)"
        }

        func through(_ c: WebhookCursor) -> SQL {
            postgres ? "(v.xid, v.seq) <= (\(c.xid), \(c.seq))" : "v.seq <= \(c.seq)"
        }

        static let sqlite = Dialect(visible: "", lock: "", postgres: false)
        static let postgresql = Dialect(
            visible: "AND v.xid < pg_snapshot_xmin(pg_current_snapshot())::text::bigint",
            lock: "FOR UPDATE SKIP LOCKED",
            postgres: true
        )
    }

    static let endpointColumns = """
        id, app_id, url, types, description, batch_size, secret, previous_secret, previous_until, created_at,
        disabled_at, disabled_reason, failures, failing_since, last_error, last_attempt_at, last_success_at,
        next_attempt_at, cursor_xid, cursor_seq, batch_xid, batch_seq, replay_from, replay_to, replay_xid, replay_seq
        """

    static let eventColumns = """
        v.seq, v.xid, v.app_id, v.endpoint_id, v.type, v.notification_id, v.delivery_id, v.provider, v.target, v.state,
        v.reason, v.provider_id, v.next_at, v.detail, v.created_at
        """

    /// The tables: `time` is REAL (SQLite) or timestamptz; `serial` the sequence column; `xid` its default.
    static func create(postgres: Bool) -> [String] {
        let time = postgres ? "timestamptz" : "REAL"
        let seq = postgres ? "seq bigserial PRIMARY KEY" : "seq INTEGER PRIMARY KEY AUTOINCREMENT"
        let xid =
            postgres
            ? "xid bigint NOT NULL DEFAULT (pg_current_xact_id()::text::bigint)" : "xid INTEGER NOT NULL DEFAULT 0"
        let int = postgres ? "bigint" : "INTEGER"
        return [
            """
            CREATE TABLE webhook_endpoints (
                id TEXT PRIMARY KEY, app_id TEXT NOT NULL, url TEXT NOT NULL, types TEXT NOT NULL,
                description TEXT NOT NULL, batch_size \(int) NOT NULL, secret TEXT NOT NULL, previous_secret TEXT,
                previous_until \(time), created_at \(time) NOT NULL, disabled_at \(time), disabled_reason TEXT,
                failures \(int) NOT NULL DEFAULT 0, failing_since \(time), last_error TEXT, last_attempt_at \(time),
                last_success_at \(time), next_attempt_at \(time) NOT NULL,
                cursor_xid \(int) NOT NULL, cursor_seq \(int) NOT NULL, batch_xid \(int), batch_seq \(int),
                replay_from \(time), replay_to \(time), replay_xid \(int), replay_seq \(int),
                lease_owner TEXT, lease_until \(time))
            """,
            "CREATE INDEX webhook_endpoints_app ON webhook_endpoints (app_id)",
            """
            CREATE TABLE webhook_events (
                \(seq), \(xid), app_id TEXT NOT NULL, endpoint_id TEXT, type TEXT NOT NULL,
                notification_id TEXT, delivery_id \(int), provider TEXT, target TEXT, state TEXT, reason TEXT,
                provider_id TEXT, next_at \(time), detail TEXT, created_at \(time) NOT NULL)
            """,
            "CREATE INDEX webhook_events_app ON webhook_events (app_id, xid, seq)",
            // Notifications of apps that hear `notification.completed`, not yet complete (the leader looks at each).
            """
            CREATE TABLE webhook_open_notifications (
                notification_id TEXT PRIMARY KEY, app_id TEXT NOT NULL, next_check \(time) NOT NULL, checks \(int) NOT NULL DEFAULT 0)
            """,
            "CREATE INDEX webhook_open_notifications_due ON webhook_open_notifications (next_check)",
        ]
    }

    // MARK: Endpoints

    static func insert(_ e: WebhookEndpoint, secret: String) -> SQL {
        """
        INSERT INTO webhook_endpoints (id, app_id, url, types, description, batch_size, secret, created_at,
            next_attempt_at, cursor_xid, cursor_seq)
        VALUES (\(e.id), \(e.appID), \(e.url), \(WebhookEndpoint.column(e.types)), \(e.description), \(e.batchSize),
            \(secret), \(e.createdAt), \(e.nextAttemptAt), \(e.cursor.xid), \(e.cursor.seq))
        """
    }

    /// Where a new endpoint starts: after every event its app has (it hears what happens from now on).
    static func head(appID: String, _ d: Dialect) -> SQL {
        "SELECT v.xid, v.seq FROM webhook_events v WHERE v.app_id = \(appID) ORDER BY v.xid DESC, v.seq DESC LIMIT 1"
    }

    static func count(appID: String) -> SQL { "SELECT count(*) FROM webhook_endpoints WHERE app_id = \(appID)" }

    static func endpoints(appID: String) -> SQL {
        "SELECT \(unescaped: endpointColumns) FROM webhook_endpoints WHERE app_id = \(appID) ORDER BY created_at, id"
    }

    static func endpoint(appID: String, id: String) -> SQL {
        "SELECT \(unescaped: endpointColumns) FROM webhook_endpoints WHERE app_id = \(appID) AND id = \(id)"
    }

    static func update(_ e: WebhookEndpoint) -> SQL {
        """
        UPDATE webhook_endpoints SET url = \(e.url), types = \(WebhookEndpoint.column(e.types)),
            description = \(e.description), batch_size = \(e.batchSize), batch_xid = NULL, batch_seq = NULL
        WHERE app_id = \(e.appID) AND id = \(e.id)
        """
    }

    /// Enabled again: its failures forgotten, tried at once from where its cursor stands.
    static func enable(appID: String, id: String, now: Date) -> SQL {
        """
        UPDATE webhook_endpoints SET disabled_at = NULL, disabled_reason = NULL, failures = 0, failing_since = NULL,
            last_error = NULL, next_attempt_at = \(now)
        WHERE app_id = \(appID) AND id = \(id) AND disabled_at IS NOT NULL
        """
    }

    static func disable(appID: String, id: String, reason: String, now: Date) -> SQL {
        """
        UPDATE webhook_endpoints SET disabled_at = \(now), disabled_reason = \(reason)
        WHERE app_id = \(appID) AND id = \(id) AND disabled_at IS NULL
        """
    }

    static func remove(appID: String, id: String) -> SQL {
        "DELETE FROM webhook_endpoints WHERE app_id = \(appID) AND id = \(id)"
    }

    /// The secret becomes the previous one and `sealed` the secret, in one statement: rotations at once each move
    /// the one before them aside (none is lost to a race; the last two sign).
    static func rotate(appID: String, id: String, sealed: String, until: Date) -> SQL {
        """
        UPDATE webhook_endpoints SET previous_secret = secret, secret = \(sealed), previous_until = \(until)
        WHERE app_id = \(appID) AND id = \(id)
        """
    }

    /// Starts a replay unless one is under way or the endpoint is disabled (checked on the row, so that of
    /// replays asked at once one starts).
    static func replay(appID: String, id: String, from: Date, to: Date) -> SQL {
        """
        UPDATE webhook_endpoints SET replay_from = \(from), replay_to = \(to), replay_xid = 0, replay_seq = 0
        WHERE app_id = \(appID) AND id = \(id) AND replay_from IS NULL AND disabled_at IS NULL
        """
    }

    // MARK: The sender

    /// Leases up to `limit` endpoints that are due, not disabled and not leased, with something to send (events
    /// past their cursor, a retry, a replay). The choice is checked again on the rows it locks, so that two nodes
    /// claiming at once never both get one.
    static func claim(owner: String, now: Date, until: Date, limit: Int, _ d: Dialect) -> SQL {
        let free: SQL =
            "disabled_at IS NULL AND next_attempt_at <= \(now) AND (lease_until IS NULL OR lease_until < \(now))"
        return """
            UPDATE webhook_endpoints SET lease_owner = \(owner), lease_until = \(until)
            WHERE id IN (
                SELECT e.id FROM webhook_endpoints e WHERE \(free) AND (e.batch_xid IS NOT NULL OR e.replay_from IS NOT NULL
                    OR EXISTS (SELECT 1 FROM webhook_events v WHERE v.app_id = e.app_id
                        AND \(d.after("e.cursor_xid", "e.cursor_seq")) \(d.visible)))
                ORDER BY e.failures > 0, e.next_attempt_at LIMIT \(limit) \(d.lock))
            AND \(free)
            RETURNING \(unescaped: endpointColumns)
            """
    }

    /// The events after `after` (to `through` when given) of the app, at most `limit`, in order; with `hearing`,
    /// only those the endpoint hears (its types, and tests sent to it).
    static func events(
        appID: String,
        after: WebhookCursor,
        through: WebhookCursor?,
        limit: Int,
        hearing: WebhookEndpoint?,
        _ d: Dialect
    ) -> SQL {
        let end: SQL = through.map { "AND \(d.through($0))" } ?? ""
        return """
            SELECT \(unescaped: eventColumns) FROM webhook_events v
            WHERE v.app_id = \(appID) AND \(d.after("\(after.xid)", "\(after.seq)")) \(end) \(heard(by: hearing)) \(d.visible)
            ORDER BY v.xid, v.seq LIMIT \(limit)
            """
    }

    /// `AND` the events the endpoint hears: of its types and for every endpoint, or sent to it alone.
    static func heard(by e: WebhookEndpoint?) -> SQL {
        guard let e else { return "" }
        var types: SQL = ""
        for (i, t) in WebhookEventType.allCases.filter(e.types.contains).enumerated() {
            types = i == 0 ? "\(t.rawValue)" : types + ", \(t.rawValue)"
        }
        if e.types.isEmpty { types = "NULL" }
        return "AND (v.endpoint_id = \(e.id) OR (v.endpoint_id IS NULL AND v.type IN (\(types))))"
    }

    /// The newest event of the app a reader may see (where an endpoint that hears nothing after its cursor moves).
    static func visibleHead(appID: String, _ d: Dialect) -> SQL {
        """
        SELECT v.xid, v.seq FROM webhook_events v WHERE v.app_id = \(appID) \(d.visible)
        ORDER BY v.xid DESC, v.seq DESC LIMIT 1
        """
    }

    /// A replay's next events: recorded between its times, after its cursor.
    static func replayEvents(
        appID: String,
        replay r: WebhookReplay,
        limit: Int,
        hearing: WebhookEndpoint?,
        _ d: Dialect
    ) -> SQL {
        """
        SELECT \(unescaped: eventColumns) FROM webhook_events v
        WHERE v.app_id = \(appID) AND \(d.after("\(r.cursor.xid)", "\(r.cursor.seq)"))
            AND v.created_at >= \(r.from) AND v.created_at <= \(r.to) \(heard(by: hearing)) \(d.visible)
        ORDER BY v.xid, v.seq LIMIT \(limit)
        """
    }

    /// A request acknowledged: the cursor moves, the failures are forgotten, the lease stays.
    static func acknowledge(id: String, owner: String, cursor: WebhookCursor, now: Date) -> SQL {
        """
        UPDATE webhook_endpoints SET cursor_xid = \(cursor.xid), cursor_seq = \(cursor.seq), batch_xid = NULL,
            batch_seq = NULL, failures = 0, failing_since = NULL, last_error = NULL, last_attempt_at = \(now),
            last_success_at = \(now), next_attempt_at = \(now)
        WHERE id = \(id) AND lease_owner = \(owner)
        """
    }

    /// ``acknowledge(id:owner:cursor:now:)`` that also extends the lease and returns the endpoint (as ``extend``).
    static func acknowledgeAndExtend(id: String, owner: String, cursor: WebhookCursor, now: Date, until: Date) -> SQL {
        """
        UPDATE webhook_endpoints SET cursor_xid = \(cursor.xid), cursor_seq = \(cursor.seq), batch_xid = NULL,
            batch_seq = NULL, failures = 0, failing_since = NULL, last_error = NULL, last_attempt_at = \(now),
            last_success_at = \(now), next_attempt_at = \(now), lease_until = \(until)
        WHERE id = \(id) AND lease_owner = \(owner)
        RETURNING \(unescaped: endpointColumns)
        """
    }

    /// A replay's request acknowledged (`cursor` nil: the replay is done).
    static func acknowledgeReplay(id: String, owner: String, cursor: WebhookCursor?, now: Date) -> SQL {
        if let c = cursor {
            return """
                UPDATE webhook_endpoints SET replay_xid = \(c.xid), replay_seq = \(c.seq), failures = 0,
                    failing_since = NULL, last_error = NULL, last_attempt_at = \(now), last_success_at = \(now)
                WHERE id = \(id) AND lease_owner = \(owner)
                """
        }
        return """
            UPDATE webhook_endpoints SET replay_from = NULL, replay_to = NULL, replay_xid = NULL, replay_seq = NULL
            WHERE id = \(id) AND lease_owner = \(owner)
            """
    }

    /// A request failed: tried again at `next` with the same events (`batchEnd`), or disabled with `disable`.
    static func fail(
        id: String,
        owner: String,
        batchEnd: WebhookCursor?,
        error: String,
        next: Date,
        disable: String?,
        now: Date
    ) -> SQL {
        """
        UPDATE webhook_endpoints SET failures = failures + 1, failing_since = COALESCE(failing_since, \(now)),
            last_error = \(error), last_attempt_at = \(now), next_attempt_at = \(next),
            batch_xid = \(batchEnd?.xid), batch_seq = \(batchEnd?.seq),
            disabled_at = CASE WHEN CAST(\(disable) AS TEXT) IS NULL THEN disabled_at ELSE \(now) END,
            disabled_reason = COALESCE(CAST(\(disable) AS TEXT), disabled_reason)
        WHERE id = \(id) AND lease_owner = \(owner)
        """
    }

    static func release(id: String, owner: String) -> SQL {
        "UPDATE webhook_endpoints SET lease_owner = NULL, lease_until = NULL WHERE id = \(id) AND lease_owner = \(owner)"
    }

    static func extend(id: String, owner: String, until: Date) -> SQL {
        """
        UPDATE webhook_endpoints SET lease_until = \(until) WHERE id = \(id) AND lease_owner = \(owner)
        RETURNING \(unescaped: endpointColumns)
        """
    }

    // MARK: Events

    /// Whether an endpoint of the delivery's app hears `type` (the type a column or a literal).
    static func heard(app: String, type: String) -> String {
        "EXISTS (SELECT 1 FROM webhook_endpoints w WHERE w.app_id = \(app) AND w.types LIKE '%,' || \(type) || ',%')"
    }

    /// The apps of settled deliveries (`?1`: their ids as a JSON array) with their endpoints' event types: what
    /// ``settled`` needs to know who hears what, read once per settle by the endpoints' app index.
    static let settledHearing = """
        SELECT w.app_id, w.types FROM webhook_endpoints w
        WHERE w.app_id IN (SELECT DISTINCT d.app_id FROM deliveries d WHERE d.id IN (SELECT value FROM json_each(?1)))
        """

    /// Every endpoint's app and types, one more than ``everyHearingLimit`` at most: while there are no more, a
    /// settle reads them all rather than its deliveries' apps (``settledHearing``).
    static let everyHearing = "SELECT app_id, types FROM webhook_endpoints LIMIT \(everyHearingLimit + 1)"
    static let everyHearingLimit = 64

    /// The events of settled deliveries, read from their rows: delivered or failed (a retried one is `queued`),
    /// and `token.invalid` for each pruned; and their notifications opened for `notification.completed`. SQLite's:
    /// `?1` the time, `?2` the deliveries the settle changed (releases left out) as a JSON array, then the apps that
    /// hear what each writes, each a JSON array (``settledHearing``): `delivery.delivered` and `delivery.failed`
    /// (`?3`, `?4`), `token.invalid` (`?3`), `notification.completed` (`?3`). One text whatever the ids, so each connection compiles it once (a text per settle was
    /// compiled each time: 2.5 % of a delivering node's CPU with webhooks on), and no probe of the endpoints per
    /// delivery (most of these statements' cost when each delivery's app was looked up in them).
    static let settled: [String] = {
        func hearing(_ n: Int) -> String { "d.app_id IN (SELECT value FROM json_each(?\(n)))" }
        let mine = "d.id IN (SELECT value FROM json_each(?2))"
        return [
            """
            INSERT INTO webhook_events (app_id, type, notification_id, delivery_id, provider, target, state, reason,
                provider_id, next_at, created_at)
            SELECT d.app_id, CASE WHEN d.state = 'delivered' THEN 'delivery.delivered' ELSE 'delivery.failed' END,
                d.notification_id, d.id, d.provider, d.target, d.state, d.reason, d.provider_id,
                CASE WHEN d.state = 'queued' THEN d.not_before END, ?1
            FROM deliveries d
            WHERE \(mine) AND ((d.state = 'delivered' AND \(hearing(3))) OR (d.state <> 'delivered' AND \(hearing(4))))
            ORDER BY d.id
            """,
            """
            INSERT INTO webhook_events (app_id, type, notification_id, delivery_id, provider, target, state, reason, created_at)
            SELECT d.app_id, 'token.invalid', d.notification_id, d.id, d.provider, d.target, d.state, d.reason, ?1
            FROM deliveries d WHERE \(mine) AND d.state = 'pruned' AND \(hearing(3))
            ORDER BY d.id
            """,
            """
            INSERT INTO webhook_open_notifications (notification_id, app_id, next_check)
            SELECT DISTINCT d.notification_id, d.app_id, ?1 + 1 FROM deliveries d WHERE \(mine) AND \(hearing(3))
            ON CONFLICT (notification_id) DO NOTHING
            """,
        ]
    }()

    /// Whether any app has an endpoint (one index read).
    static let anyEndpoint = "SELECT EXISTS (SELECT 1 FROM webhook_endpoints)"

    /// Deliveries that ended `expired` at a claim (their time to live passed): `delivery.failed`.
    static func expired(ids: [Int64], now: Date) -> SQL {
        """
        INSERT INTO webhook_events (app_id, type, notification_id, delivery_id, provider, target, state, reason, created_at)
        SELECT d.app_id, 'delivery.failed', d.notification_id, d.id, d.provider, d.target, d.state, d.reason, \(now)
        FROM deliveries d WHERE d.id IN (\(idList(ids))) AND d.state = 'expired'
            AND \(unescaped: heard(app: "d.app_id", type: "'delivery.failed'"))
        ORDER BY d.id
        """
    }

    /// An event of one delivery (a receipt, an open), read from its row; `delivery` is its id or, in a PostgreSQL
    /// statement, a subquery of the row written before it.
    static func ofDelivery(_ type: WebhookEventType, delivery: SQL, detail: JSONValue, now: Date) -> SQL {
        """
        INSERT INTO webhook_events (app_id, type, notification_id, delivery_id, provider, target, detail, created_at)
        SELECT d.app_id, \(type.rawValue), d.notification_id, d.id, d.provider, d.target, \(detail.jsonString), \(now)
        FROM deliveries d WHERE d.id = \(delivery) AND \(unescaped: heard(app: "d.app_id", type: "'\(type.rawValue)'"))
        """
    }

    /// One event, recorded only when an endpoint of its app hears its type (a test event: when its endpoint is
    /// there).
    static func append(_ e: NewWebhookEvent, deliveryID: Int64? = nil, target: String? = nil, now: Date) -> SQL {
        let heard: SQL =
            if let endpoint = e.endpointID {
                "EXISTS (SELECT 1 FROM webhook_endpoints w WHERE w.app_id = \(e.appID) AND w.id = \(endpoint))"
            } else {
                "EXISTS (SELECT 1 FROM webhook_endpoints w WHERE w.app_id = \(e.appID) AND w.types LIKE \("%,\(e.type.rawValue),%"))"
            }
        return """
            INSERT INTO webhook_events (app_id, endpoint_id, type, notification_id, delivery_id, target, detail, created_at)
            SELECT CAST(\(e.appID) AS TEXT), CAST(\(e.endpointID) AS TEXT), CAST(\(e.type.rawValue) AS TEXT),
                CAST(\(e.notificationID) AS TEXT), CAST(\(deliveryID) AS BIGINT), CAST(\(target) AS TEXT),
                CAST(\(e.detailText) AS TEXT), \(now)
            WHERE \(heard)
            """
    }

    /// Of the oldest `limit` events (by sequence, which follows time), those older than `cutoff`: no index on the
    /// time is kept for this (each event would pay for it), and the oldest are found by the table's own key.
    static func sweep(before cutoff: Date, limit: Int) -> SQL {
        """
        DELETE FROM webhook_events WHERE seq IN (SELECT seq FROM webhook_events ORDER BY seq LIMIT \(limit))
            AND created_at < \(cutoff)
        """
    }

    static let stateCounts: SQL = """
        SELECT CASE WHEN disabled_at IS NOT NULL THEN 'disabled' WHEN failures > 0 THEN 'failing' ELSE 'active' END AS s,
            count(*) FROM webhook_endpoints GROUP BY s
        """

    // MARK: Completions

    static func dueOpen(now: Date, limit: Int) -> SQL {
        """
        SELECT notification_id, app_id, checks FROM webhook_open_notifications WHERE next_check <= \(now)
        ORDER BY next_check LIMIT \(limit)
        """
    }

    /// 1 when the notification is there with its fan-out done and no delivery queued or leased; 0 while it is still
    /// delivering; nothing when it is gone. The newest deliveries are read first: while a send runs, one of those is
    /// still queued.
    static func isComplete(_ notificationID: String) -> SQL {
        """
        SELECT CASE WHEN n.fanout_state = 'pending' OR (SELECT id FROM deliveries WHERE notification_id = \(notificationID)
            AND state IN ('queued', 'leased') ORDER BY id DESC LIMIT 1) IS NOT NULL THEN 0 ELSE 1 END
        FROM notifications n WHERE n.id = \(notificationID)
        """
    }

    static func stateCounts(_ notificationID: String) -> SQL {
        "SELECT state, count(*) FROM deliveries WHERE notification_id = \(notificationID) GROUP BY state"
    }

    /// Opens a notification that queued no delivery for `notification.completed`, when its app hears that: no settle
    /// will open it. Run by the intakes in the transaction that accepts it or ends its fan-out, so that a crash
    /// between the two cannot lose the event.
    static func openWithoutDeliveries(_ notificationID: String, appID: String, now: Date) -> SQL {
        """
        INSERT INTO webhook_open_notifications (notification_id, app_id, next_check)
        SELECT n.id, n.app_id, \(now.addingTimeInterval(1)) FROM notifications n
        WHERE n.id = \(notificationID) AND n.app_id = \(appID)
            AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.notification_id = n.id)
            AND \(unescaped: heard(app: "n.app_id", type: "'notification.completed'"))
        ON CONFLICT (notification_id) DO NOTHING
        """
    }

    static func later(_ notificationID: String, next: Date) -> SQL {
        """
        UPDATE webhook_open_notifications SET next_check = \(next), checks = checks + 1
        WHERE notification_id = \(notificationID)
        """
    }

    static func closed(_ notificationID: String) -> SQL {
        "DELETE FROM webhook_open_notifications WHERE notification_id = \(notificationID)"
    }

    /// The app's webhook rows, for its deletion.
    static func appTables(_ app: String) -> [SQL] {
        [
            "DELETE FROM webhook_open_notifications WHERE app_id = \(app)",
            "DELETE FROM webhook_endpoints WHERE app_id = \(app)",
        ]
    }

    /// Some of the app's events (its deletion runs it until it deletes none).
    static func appEvents(_ app: String, chunk: Int) -> SQL {
        "DELETE FROM webhook_events WHERE seq IN (SELECT seq FROM webhook_events WHERE app_id = \(app) LIMIT \(chunk))"
    }

    static func idList(_ ids: [Int64]) -> SQL {
        var out: SQL = ""
        for (i, id) in ids.enumerated() { out = i == 0 ? "\(id)" : out + ", \(id)" }
        return ids.isEmpty ? "NULL" : out
    }
}
