import Foundation
import PostgresNIO

/// The statements on the hot paths (accepting, claiming, settling), prepared once per connection: parsing and
/// planning them on every call cost the database more than running them (a profile of the accept path showed the
/// parser and planner ahead of everything else).
enum PostgresStatements {
    /// The end of an accept statement (`n`: the notification inserted, `d`: its deliveries): a notification stored
    /// when `reachedNobody` holds is watched for its app's `notification.completed` webhook (no delivery will
    /// settle to tell it), and the statement answers created (0 or 1) and queued.
    static func watchedWhenNobody(_ reachedNobody: String) -> String {
        """
        o AS (
            INSERT INTO webhook_open_notifications (notification_id, app_id, next_check)
            SELECT $1, $2, now() + interval '1 second'
            WHERE EXISTS (SELECT 1 FROM n) AND \(reachedNobody)
                AND EXISTS (SELECT 1 FROM webhook_endpoints w
                    WHERE w.app_id = $2 AND w.types LIKE '%,notification.completed,%')
            ON CONFLICT (notification_id) DO NOTHING)
        SELECT (SELECT count(*) FROM n), (SELECT count(*) FROM d)
        """
    }

    /// A notification and its deliveries in one statement (so one transaction, one round trip), unless the app used
    /// the idempotency key before: then nothing is written and `created` is 0.
    struct Accept: PostgresPreparedStatement {
        static let sql = """
            WITH n AS (
                INSERT INTO notifications \(Columns.notificationInsert)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
                ON CONFLICT (app_id, idempotency_key) DO NOTHING RETURNING id),
            d AS (
                INSERT INTO deliveries \(Columns.deliveryInsert)
                SELECT $1, $2, p, t, 'queued', to_timestamp(nb), $9, now()
                FROM unnest($12::text[], $13::text[], $14::float8[]) AS u(p, t, nb)
                WHERE EXISTS (SELECT 1 FROM n)
                RETURNING 1),
            \(watchedWhenNobody("$11::text = 'done' AND cardinality($13::text[]) = 0"))
            """
        typealias Row = (Int64, Int64)

        var notification: StoredNotification
        var idempotencyKey: String?
        var fanOut: AcceptPlan?
        var expiresAt: Date?
        var providers: [String]
        var targets: [String]
        var due: [Double]

        func makeBindings() throws -> PostgresBindings {
            var b = PostgresBindings()
            b.append(notification.id)
            b.append(notification.appID)
            b.append(idempotencyKey)
            b.append(notification.message.jsonString)
            b.append(notification.response.jsonString)
            b.append(notification.createdAt)
            b.append(fanOut?.audience.json.jsonString)
            b.append(fanOut?.notBefore)
            b.append(expiresAt)
            b.append(fanOut?.spread ?? 0)
            b.append((fanOut == nil ? FanOutState.done : .pending).rawValue)
            b.append(providers)
            b.append(targets)
            b.append(due)
            return b
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    /// A send to registered tokens in one statement: the app's devices among the tokens, the notification and a
    /// delivery for each device found (in the devices' order, spread as ``Spread`` spreads), unless the app used the
    /// idempotency key before (`created` 0). The stored answer is made before the devices are counted: where it
    /// shows the count, it holds `countMark` (its digits, once), which the statement replaces by the count.
    struct AcceptRegistered: PostgresPreparedStatement {
        static let sql = """
            WITH dv AS (
                SELECT provider AS p, token AS t, (row_number() OVER (ORDER BY id) - 1)::float8 AS i,
                    count(*) OVER () AS k
                FROM devices WHERE app_id = $2 AND token = ANY($8::text[])),
            n AS (
                INSERT INTO notifications \(Columns.notificationInsert)
                VALUES ($1, $2, $3, $4,
                    CASE WHEN $7::text IS NULL THEN $5 ELSE replace($5, $7, (SELECT count(*) FROM dv)::text) END,
                    $6, NULL, NULL, $9, 0, 'done')
                ON CONFLICT (app_id, idempotency_key) DO NOTHING RETURNING id),
            d AS (
                INSERT INTO deliveries \(Columns.deliveryInsert)
                SELECT $1, $2, p, t, 'queued',
                    to_timestamp($10 + (CASE WHEN $11 > 0 AND k > 1 THEN $11 / (k - 1) ELSE 0 END) * i), $9, now()
                FROM dv WHERE EXISTS (SELECT 1 FROM n) ORDER BY i
                RETURNING 1),
            \(watchedWhenNobody("NOT EXISTS (SELECT 1 FROM dv)"))
            """
        typealias Row = (Int64, Int64)

        /// The notification (its answer is `answer`).
        var notification: StoredNotification
        var idempotencyKey: String?
        /// The answer to store, as made with the count's stand-in.
        var answer: String
        /// The count's stand-in in `answer`, as its digits; nil when the answer does not show it.
        var countMark: String?
        var tokens: [String]
        var expiresAt: Date?
        var start: Double
        var spread: Double

        func makeBindings() throws -> PostgresBindings {
            var b = PostgresBindings()
            b.append(notification.id)
            b.append(notification.appID)
            b.append(idempotencyKey)
            b.append(notification.message.jsonString)
            b.append(answer)
            b.append(notification.createdAt)
            b.append(countMark)
            b.append(tokens)
            b.append(expiresAt)
            b.append(start)
            b.append(spread)
            return b
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    /// The registered devices among some tokens of an app.
    struct DevicesByToken: PostgresPreparedStatement {
        static let sql = "SELECT provider, token FROM devices WHERE app_id = $1 AND token = ANY($2::text[]) ORDER BY id"
        typealias Row = (String, String)
        var appID: String
        var tokens: [String]

        func makeBindings() throws -> PostgresBindings {
            var b = PostgresBindings()
            b.append(appID)
            b.append(tokens)
            return b
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    /// Takes each app's share of the due deliveries (see ``DeliveryQueue/claim(owner:limit:now:lease:rooms:)``) and
    /// then the abandoned ones, each row locked without waiting for one another node is claiming (so nodes
    /// claiming at once take disjoint rows, an app's next ones when its first are taken); of those, what is past
    /// its time to live ends as expired and the rest is leased. The apps with queued deliveries are found by a skip
    /// through the due index (`apps`: one index descent per app), each app's due ones by a range read of it: the
    /// cost grows with the apps that have queued deliveries and the rows taken, never with the rows queued. The skip
    /// and the test for a due row read each app's range from its end: the entries of rows already claimed stay at
    /// the head of the range, dead, until a vacuum, and a read from the head stepped over every one of them (at
    /// 150,000 claimed, about 1,100 index pages per descent, two thirds of the claim's time). The
    /// update finds the rows taken by their ids (an array, so the planner never joins them to a scan of the table:
    /// it did so with 10,000 queued).
    /// The read of an app's due rows starts after this node's mark for the app, when it has one: where its last
    /// claims of the app ended (``PostgresDeliveryQueue``), an index condition, so that it too skips the dead head.
    /// $1 now, $2 limit, $3 owner, $4 lease end, $5 an app's room unless listed, $6 and $7 the listed apps and
    /// their rooms, $8, $9 and $10 the marks: apps, `not_before` and ids.
    struct Claim: PostgresPreparedStatement {
        static let sql = """
            WITH RECURSIVE apps(app_id) AS (
                (SELECT app_id FROM deliveries WHERE state = 'queued' ORDER BY app_id DESC LIMIT 1)
                UNION ALL
                SELECT (SELECT d.app_id FROM deliveries d WHERE d.state = 'queued' AND d.app_id < a.app_id ORDER BY d.app_id DESC LIMIT 1)
                FROM apps a WHERE a.app_id IS NOT NULL),
            ready AS (
                SELECT a.app_id, COALESCE(r.room, $5::int8) AS room FROM apps a
                LEFT JOIN unnest($6::text[], $7::int8[]) AS r(app_id, room) ON r.app_id = a.app_id
                WHERE a.app_id IS NOT NULL AND COALESCE(r.room, $5::int8) > 0
                    AND (SELECT e.not_before FROM deliveries e WHERE e.state = 'queued' AND e.app_id = a.app_id
                        AND e.not_before <= $1 ORDER BY e.not_before DESC LIMIT 1) IS NOT NULL),
            share AS (SELECT ($2::int8 + count(*) - 1) / GREATEST(count(*), 1) AS n FROM ready),
            marks AS (SELECT * FROM unnest($8::text[], $9::timestamptz[], $10::int8[]) AS m(app_id, nb, id)),
            due AS (
                SELECT t.id FROM ready CROSS JOIN share LEFT JOIN marks m ON m.app_id = ready.app_id CROSS JOIN LATERAL (
                    SELECT d.id FROM deliveries d WHERE d.state = 'queued' AND d.app_id = ready.app_id AND d.not_before <= $1
                        AND (d.not_before, d.id) > (COALESCE(m.nb, '-infinity'::timestamptz), COALESCE(m.id, 0))
                    ORDER BY d.not_before, d.id LIMIT LEAST(share.n, ready.room) FOR UPDATE SKIP LOCKED) t),
            abandoned AS (
                SELECT id FROM deliveries WHERE state = 'leased' AND lease_until < $1 ORDER BY lease_until LIMIT $2 FOR UPDATE SKIP LOCKED),
            picked AS (SELECT id FROM due UNION ALL SELECT id FROM abandoned LIMIT $2),
            taken AS (
                UPDATE deliveries d SET
                    state = CASE WHEN d.expires_at < $1 THEN 'expired' ELSE 'leased' END,
                    reason = CASE WHEN d.expires_at < $1 THEN 'ttl' ELSE d.reason END,
                    lease_owner = CASE WHEN d.expires_at < $1 THEN NULL ELSE $3 END,
                    lease_until = CASE WHEN d.expires_at < $1 THEN NULL ELSE $4::timestamptz END,
                    attempts = CASE WHEN d.expires_at < $1 THEN d.attempts ELSE d.attempts + 1 END,
                    updated_at = $1
                WHERE d.id = ANY(ARRAY(SELECT id FROM picked))
                RETURNING d.id, d.notification_id, d.app_id, d.provider, d.target, d.state, d.attempts, d.not_before, d.expires_at,
                    d.lease_owner, d.lease_until, d.reason, d.provider_id, d.updated_at),
            told AS (
                INSERT INTO webhook_events (app_id, type, notification_id, delivery_id, provider, target, state, reason, created_at)
                SELECT t.app_id, 'delivery.failed', t.notification_id, t.id, t.provider, t.target, t.state, t.reason, $1
                FROM taken t WHERE t.state = 'expired' AND EXISTS (SELECT 1 FROM webhook_endpoints w
                    WHERE w.app_id = t.app_id AND w.types LIKE '%,delivery.failed,%')
                ORDER BY t.id)
            SELECT * FROM taken
            """
        typealias Row = DeliveryRecord
        var now: Date
        var limit: Int
        var owner: String
        var until: Date
        var rooms: ClaimRooms
        var marks: ClaimMarks.Listed = ([], [], [])

        func makeBindings() throws -> PostgresBindings {
            var b = PostgresBindings()
            b.append(now)
            b.append(limit)
            b.append(owner)
            b.append(until)
            b.append(min(rooms.perApp, Int(Int32.max)))
            let listed = rooms.listed
            b.append(listed.apps)
            b.append(listed.rooms)
            b.append(marks.apps)
            b.append(marks.times)
            b.append(marks.ids)
            return b
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try PostgresDeliveryQueue.record(row) }
    }

    /// Outcomes and new times of a batch; only rows the owner still holds change. The rows are locked in id order
    /// first (`held`), as the lease extension locks them: two statements that wait on each other's rows in
    /// different orders deadlock, and PostgreSQL ends one of them after a second (a worker's renewal and its settle
    /// run at once; a lost renewal let leases lapse and another node send them again). `held` runs first, whole (the
    /// update's condition counts it once), and finds the rows by their ids (`IS TRUE` keeps the partial index of
    /// leased rows, with the dead entries a send leaves in it, out of its plan). A missing reason or provider id
    /// is an empty string with a false beside it; `back` gives back the attempt the claim counted (a release).
    struct Settle: PostgresPreparedStatement {
        static let sql = """
            WITH held AS (
                SELECT id FROM deliveries WHERE id = ANY($3::int8[]) AND (state = 'leased') IS TRUE AND lease_owner = $2
                ORDER BY id FOR UPDATE),
            s AS (
            UPDATE deliveries d SET state = u.state, reason = CASE WHEN u.hr THEN u.reason END, provider_id = CASE WHEN u.hp THEN u.pid END,
                not_before = CASE WHEN u.at < 0 THEN d.not_before ELSE to_timestamp(u.at) END,
                attempts = CASE WHEN u.back THEN GREATEST(d.attempts - 1, 0) ELSE d.attempts END,
                lease_owner = NULL, lease_until = NULL, updated_at = $1
            FROM unnest($3::int8[], $4::text[], $5::text[], $6::bool[], $7::text[], $8::bool[], $9::float8[], $10::bool[])
                AS u(id, state, reason, hr, pid, hp, at, back)
            WHERE d.id = u.id AND d.state = 'leased' AND d.lease_owner = $2 AND (SELECT count(*) FROM held) >= 0
            RETURNING d.id, d.app_id, d.notification_id, d.provider, d.target, d.state, d.reason, d.provider_id,
                d.not_before, u.back
            ),
            told AS (
                INSERT INTO webhook_events (app_id, type, notification_id, delivery_id, provider, target, state, reason,
                    provider_id, next_at, created_at)
                SELECT s.app_id, t.type, s.notification_id, s.id, s.provider, s.target, s.state, s.reason,
                    CASE WHEN t.type = 'delivery.delivered' THEN s.provider_id END,
                    CASE WHEN s.state = 'queued' THEN s.not_before END, $1
                FROM s CROSS JOIN LATERAL (VALUES
                    (CASE WHEN s.state = 'delivered' THEN 'delivery.delivered' ELSE 'delivery.failed' END),
                    (CASE WHEN s.state = 'pruned' THEN 'token.invalid' END)) AS t(type)
                WHERE NOT s.back AND t.type IS NOT NULL AND EXISTS (SELECT 1 FROM webhook_endpoints w
                    WHERE w.app_id = s.app_id AND w.types LIKE '%,' || t.type || ',%')
                ORDER BY s.id, t.type),
            opened AS (
                INSERT INTO webhook_open_notifications (notification_id, app_id, next_check)
                SELECT DISTINCT s.notification_id, s.app_id, $1 + interval '1 second' FROM s
                WHERE NOT s.back AND EXISTS (SELECT 1 FROM webhook_endpoints w
                    WHERE w.app_id = s.app_id AND w.types LIKE '%,notification.completed,%')
                ON CONFLICT (notification_id) DO NOTHING)
            SELECT id FROM s
            """
        typealias Row = Int64
        var now: Date
        var owner: String
        var ids: [Int64] = [], states: [String] = [], reasons: [String] = [], hasReason: [Bool] = []
        var providerIDs: [String] = [], hasProviderID: [Bool] = [], times: [Double] = [], back: [Bool] = []

        func makeBindings() throws -> PostgresBindings {
            var b = PostgresBindings()
            b.append(now)
            b.append(owner)
            b.append(ids)
            b.append(states)
            b.append(reasons)
            b.append(hasReason)
            b.append(providerIDs)
            b.append(hasProviderID)
            b.append(times)
            b.append(back)
            return b
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Int64.self) }
    }

    /// Moves the end of the leases an owner still holds, locking the rows in id order as the settle does.
    struct Extend: PostgresPreparedStatement {
        static let sql = """
            WITH held AS (
                SELECT id FROM deliveries WHERE id = ANY($2::int8[]) AND (state = 'leased') IS TRUE AND lease_owner = $3
                ORDER BY id FOR UPDATE)
            UPDATE deliveries d SET lease_until = $1 FROM held WHERE d.id = held.id RETURNING d.id
            """
        typealias Row = Int64
        var until: Date
        var ids: [Int64]
        var owner: String

        func makeBindings() throws -> PostgresBindings {
            var b = PostgresBindings()
            b.append(until)
            b.append(ids)
            b.append(owner)
            return b
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Int64.self) }
    }
}
