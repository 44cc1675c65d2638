import Foundation
import PostgresNIO

/// The schema, as numbered migrations. Each runs once, in its own transaction, recorded in `richpush_migrations`;
/// nodes starting together take turns behind an advisory lock, so exactly one applies each. A migration is never
/// edited once released: a change is a new one.
enum PostgresMigrations {
    struct Migration {
        var version: Int
        var name: String
        /// One statement per query (the extended protocol takes no more).
        var statements: [String]

        /// Statements separated by semicolons; none of them holds a semicolon of its own.
        init(version: Int, name: String, sql: String) {
            self.version = version
            self.name = name
            statements = sql.split(separator: ";").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
                .filter { !$0.isEmpty }
        }

        /// Statements given one by one (a function's body holds semicolons).
        init(version: Int, name: String, statements: [String]) {
            self.version = version
            self.name = name
            self.statements = statements
        }
    }

    /// The advisory lock migrations run under (any 64-bit number no other program on the database uses).
    static let lockKey: Int64 = 0x7269_6368_7075_7301

    static let all: [Migration] = [
        Migration(
            version: 1,
            name: "apps, keys, notifications, receipts, secrets",
            sql: """
                CREATE TABLE apps (
                    id text PRIMARY KEY, name text NOT NULL, bundle_id text NOT NULL, fcm_project_id text,
                    apns text, fcm text, revision integer NOT NULL DEFAULT 1, created_at timestamptz NOT NULL DEFAULT now());
                CREATE TABLE api_keys (
                    key_hash text PRIMARY KEY, key_id text NOT NULL, app_id text NOT NULL REFERENCES apps(id),
                    scopes text NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
                CREATE INDEX api_keys_app ON api_keys (app_id, key_id);
                CREATE TABLE notifications (
                    id text PRIMARY KEY, app_id text NOT NULL, idempotency_key text, message text NOT NULL, response text NOT NULL,
                    created_at timestamptz NOT NULL, audience text, not_before timestamptz, expires_at timestamptz,
                    spread double precision NOT NULL DEFAULT 0, fanout_state text NOT NULL DEFAULT 'done',
                    fanout_cursor bigint NOT NULL DEFAULT 0, fanout_inserted bigint NOT NULL DEFAULT 0, fanout_total bigint NOT NULL DEFAULT 0,
                    fanout_owner text, fanout_lease_until timestamptz,
                    UNIQUE (app_id, idempotency_key));
                CREATE INDEX notifications_fanout ON notifications (created_at) WHERE fanout_state = 'pending';
                CREATE TABLE receipts (
                    notification_id text NOT NULL, token text NOT NULL, report text NOT NULL, received_at timestamptz NOT NULL,
                    PRIMARY KEY (notification_id, token));
                CREATE TABLE secrets (name text PRIMARY KEY, value bytea NOT NULL);
                """
        ),
        Migration(
            version: 2,
            name: "devices, tags, topics",
            sql: """
                CREATE TABLE devices (
                    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, app_id text NOT NULL, token text NOT NULL,
                    platform text NOT NULL, provider text NOT NULL, user_id text, locale text, time_zone text, app_version text,
                    updated_at timestamptz NOT NULL, UNIQUE (app_id, token));
                CREATE INDEX devices_app ON devices (app_id, id);
                CREATE INDEX devices_user ON devices (app_id, user_id, id);
                CREATE TABLE device_tags (device_id bigint NOT NULL REFERENCES devices(id) ON DELETE CASCADE, tag text NOT NULL, PRIMARY KEY (tag, device_id));
                CREATE TABLE device_topics (device_id bigint NOT NULL REFERENCES devices(id) ON DELETE CASCADE, topic text NOT NULL, PRIMARY KEY (topic, device_id));
                CREATE INDEX device_tags_device ON device_tags (device_id);
                CREATE INDEX device_topics_device ON device_topics (device_id);
                """
        ),
        // The queue is the table that changes most: its due and lease indexes are partial, so that finished rows
        // (most of the table) are in neither, and autovacuum visits it long before the default 20 % of dead rows.
        Migration(
            version: 3,
            name: "deliveries",
            sql: """
                CREATE TABLE deliveries (
                    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, notification_id text NOT NULL, app_id text NOT NULL,
                    provider text NOT NULL, target text NOT NULL, state text NOT NULL, attempts integer NOT NULL DEFAULT 0,
                    not_before timestamptz NOT NULL, expires_at timestamptz, lease_owner text, lease_until timestamptz,
                    reason text, provider_id text, updated_at timestamptz NOT NULL)
                    WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02, fillfactor = 90);
                CREATE INDEX deliveries_due ON deliveries (not_before, id) WHERE state = 'queued';
                CREATE INDEX deliveries_lease ON deliveries (lease_until) WHERE state = 'leased';
                CREATE INDEX deliveries_notification ON deliveries (notification_id, id);
                """
        ),
        Migration(
            version: 4,
            name: "nodes and shared media",
            sql: """
                CREATE TABLE nodes (id text PRIMARY KEY, started_at timestamptz NOT NULL, seen_at timestamptz NOT NULL, address text);
                CREATE TABLE media_files (
                    name text PRIMARY KEY, size bigint NOT NULL, chunks integer NOT NULL, keep_until timestamptz NOT NULL,
                    created_at timestamptz NOT NULL DEFAULT now());
                CREATE TABLE media_chunks (
                    name text NOT NULL REFERENCES media_files(name) ON DELETE CASCADE, seq integer NOT NULL, bytes bytea NOT NULL,
                    PRIMARY KEY (name, seq));
                CREATE INDEX media_files_keep ON media_files (keep_until);
                """
        ),
        // An app's notifications listed newest first (the console's list).
        Migration(
            version: 5,
            name: "notifications by app",
            sql: """
                CREATE INDEX notifications_app ON notifications (app_id, created_at)
                """
        ),
        // One receipt per delivery, a few numbers each; the whole reports kept before (one per device id any poster
        // named) cannot be tied to a delivery and are not kept.
        Migration(
            version: 6,
            name: "receipts by delivery",
            sql: """
                DROP TABLE receipts;
                CREATE TABLE delivery_receipts (
                    delivery_id bigint PRIMARY KEY, notification_id text NOT NULL, attachments integer NOT NULL,
                    skipped bigint NOT NULL, deadline_hit integer NOT NULL, elapsed_ms integer NOT NULL,
                    received_at timestamptz NOT NULL);
                CREATE INDEX delivery_receipts_notification ON delivery_receipts (notification_id)
                """
        ),
        // A token prefix is a range in byte order whatever the database's collation: the search's token branch
        // reads this index (the unique (app_id, token) one serves it only when the collation is C).
        Migration(
            version: 7,
            name: "device tokens in byte order",
            sql: """
                CREATE INDEX devices_token_c ON devices (app_id, token COLLATE "C")
                """
        ),
        // An app's VAPID key for Web Push, sealed like the other credentials.
        Migration(version: 8, name: "web push keys", sql: "ALTER TABLE apps ADD COLUMN webpush text"),
        // Live Activity push-to-start and update tokens.
        Migration(version: 9, name: "live activity tokens", sql: LiveTokenSQL.create(time: "timestamptz")),
        // Updates in place: each update is a version of its root.
        Migration(version: 10, name: "notification versions", sql: NotificationVersions.postgresColumns),
        // What people did with each delivery, as their app reports it.
        Migration(version: 11, name: "delivery opens", sql: OpenSQL.postgresTable),
        // Counts per notification and minute, for an app's time series.
        Migration(version: 12, name: "notification minutes", sql: MinuteSQL.postgresTable),
        // A device's delivery of a notification found by its token in one index read (see SQLite's migration).
        Migration(
            version: 13,
            name: "deliveries by target",
            sql: "CREATE INDEX deliveries_notification_target ON deliveries (notification_id, target)"
        ),
        // The deep link an open led to, and where a device's notification permission stands.
        Migration(
            version: 14,
            name: "open links and device permission",
            sql: OpenSQL.linkColumn + ";\n" + DeviceSQL.permissionColumn
        ),
        // Identity keys (the public keys an app's backend signs proofs with), each app's counts of devices and Live
        // Activity tokens kept by triggers (the registration quotas read them), and a user's Live Activity tokens
        // found by index (the per-user bound).
        Migration(
            version: 15,
            name: "identity keys and registration counts",
            statements: [IdentityKeySQL.create(time: "timestamptz")] + AppCountSQL.postgres + [
                "CREATE INDEX live_tokens_user ON live_tokens (app_id, user_id, updated_at)"
            ]
        ),
        Migration(version: 16, name: "media upload bytes per app and day", sql: UploadSQL.table),
        // A claim takes each app's share in due order (see PostgresStatements.Claim): the apps with queued
        // deliveries are found by skipping through this index, each app's earliest by a range read of it. The due
        // index it replaces is dropped, the one exception to migrations only adding: kept, the planner chose it
        // now and then for one app's due deliveries and read past every other app's to find them (the claim's
        // EXPLAIN test caught it). A node of the release before claims through a sort until it is replaced.
        Migration(
            version: 17,
            name: "deliveries claimed fairly by app",
            sql: """
                CREATE INDEX deliveries_due_by_app ON deliveries (app_id, not_before, id) WHERE state = 'queued';
                DROP INDEX deliveries_due
                """
        ),
        // Apps deleted in the last day, whose tables the leader empties again (AppDeletion).
        Migration(version: 18, name: "deleted apps", sql: AppDeletion.table(time: "timestamptz")),
        // Webhook endpoints and the outbox of their events (WebhookSQL): the settle and the claim write events in
        // their own statements.
        Migration(version: 19, name: "webhooks", statements: WebhookSQL.create(postgres: true)),
        // Whether a Live Activity token's registration was told (its removal and expiry are told only then).
        Migration(version: 20, name: "live tokens told", sql: LiveTokenSQL.toldColumn),
        // Where a whole app's fan-out stands in token order (FanOutCursor).
        Migration(
            version: 21,
            name: "fan-out token cursor",
            sql: "ALTER TABLE notifications ADD COLUMN fanout_token text NOT NULL DEFAULT ''"
        ),
    ]

    /// Applies what is missing; returns the versions applied now. Safe to run from every node at once.
    @discardableResult
    static func migrate(_ db: PostgresDatabase) async throws -> [Int] {
        try await db.run { [client = db.client, logger = db.logger] in
            try await client.withConnection { c in
                _ = try await c.query("SELECT pg_advisory_lock(\(lockKey))", logger: logger)
                do {
                    _ = try await c.query(
                        """
                        CREATE TABLE IF NOT EXISTS richpush_migrations (
                            version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())
                        """,
                        logger: logger
                    )
                    var done = Set<Int>()
                    for try await v in try await c.query("SELECT version FROM richpush_migrations", logger: logger)
                        .decode(Int.self)
                    { done.insert(v) }
                    if let newest = done.max(), newest > (all.last?.version ?? 0) {
                        throw DatabaseTooNew(version: newest)
                    }
                    var applied: [Int] = []
                    for m in all where !done.contains(m.version) {
                        try await c.withTransaction(logger: logger) { t in
                            for statement in m.statements {
                                _ = try await t.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                            }
                            _ = try await t.query(
                                "INSERT INTO richpush_migrations (version, name) VALUES (\(m.version), \(m.name))",
                                logger: logger
                            )
                        }
                        applied.append(m.version)
                    }
                    _ = try await c.query("SELECT pg_advisory_unlock(\(lockKey))", logger: logger)
                    return applied
                } catch {
                    // The lock also ends with the session; the migration's own error (if any) is the one thrown.
                    _ = try? await c.query("SELECT pg_advisory_unlock(\(lockKey))", logger: logger)
                    throw error
                }
            }
        }
    }

    /// The database was migrated by a newer RichPush than this one.
    struct DatabaseTooNew: Error, CustomStringConvertible {
        var version: Int
        var description: String {
            "the database is at schema version \(version), newer than this RichPush knows (\(PostgresMigrations.all.last?.version ?? 0)): upgrade this node"
        }
    }
}
