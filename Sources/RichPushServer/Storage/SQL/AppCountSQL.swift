import Foundation

/// Each app's number of devices and of Live Activity tokens, kept by the database's triggers as rows are inserted
/// and deleted, whatever inserts or deletes them (a registration, a prune, a sweep, an import): a quota reads a
/// few rows instead of counting millions. A counter is spread over shards (PostgreSQL: one per server process
/// modulo 16), so that registrations of one app on several connections do not queue for one row.
enum AppCountSQL {
    static let devices = "devices"
    static let live = "live"

    /// The app's total of `kind`.
    static func total(_ appID: String, _ kind: String) -> SQL {
        // PostgreSQL sums bigints as numeric: cast back (SQLite reads the cast as INTEGER).
        "SELECT CAST(COALESCE(SUM(n), 0) AS BIGINT) FROM app_counts WHERE app_id = \(appID) AND kind = \(kind)"
    }

    /// SQLite: the table if missing, the rows of `table` counted once, and a trigger each way (one writer at a
    /// time: one shard).
    static func sqlite(table: String, kind: String) -> String {
        """
        CREATE TABLE IF NOT EXISTS app_counts (
            app_id TEXT NOT NULL, kind TEXT NOT NULL, shard INTEGER NOT NULL, n INTEGER NOT NULL,
            PRIMARY KEY (app_id, kind, shard)) WITHOUT ROWID;
        INSERT INTO app_counts (app_id, kind, shard, n) SELECT app_id, '\(kind)', 0, count(*) FROM \(table) GROUP BY app_id;
        CREATE TRIGGER \(table)_counted AFTER INSERT ON \(table) BEGIN
            INSERT OR IGNORE INTO app_counts (app_id, kind, shard, n) VALUES (NEW.app_id, '\(kind)', 0, 0);
            UPDATE app_counts SET n = n + 1 WHERE app_id = NEW.app_id AND kind = '\(kind)' AND shard = 0;
        END;
        CREATE TRIGGER \(table)_uncounted AFTER DELETE ON \(table) BEGIN
            UPDATE app_counts SET n = n - 1 WHERE app_id = OLD.app_id AND kind = '\(kind)' AND shard = 0;
        END;
        """
    }

    /// PostgreSQL: the table, the functions, and statement-level triggers over transition tables (one counter
    /// update per statement and app, however many rows a bulk insert or a sweep touched). A row an upsert updated
    /// is in no INSERT transition table: only new rows are counted.
    static let postgres: [String] = [
        """
        CREATE TABLE app_counts (
            app_id text NOT NULL, kind text NOT NULL, shard integer NOT NULL, n bigint NOT NULL,
            PRIMARY KEY (app_id, kind, shard))
        """,
        "INSERT INTO app_counts SELECT app_id, 'devices', 0, count(*) FROM devices GROUP BY app_id",
        "INSERT INTO app_counts SELECT app_id, 'live', 0, count(*) FROM live_tokens GROUP BY app_id",
        """
        CREATE FUNCTION richpush_count_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO app_counts (app_id, kind, shard, n)
            SELECT app_id, TG_ARGV[0], pg_backend_pid() % 16, count(*) FROM changed_rows GROUP BY app_id
            ON CONFLICT (app_id, kind, shard) DO UPDATE SET n = app_counts.n + excluded.n;
            RETURN NULL;
        END $$
        """,
        """
        CREATE FUNCTION richpush_count_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO app_counts (app_id, kind, shard, n)
            SELECT app_id, TG_ARGV[0], pg_backend_pid() % 16, -count(*) FROM changed_rows GROUP BY app_id
            ON CONFLICT (app_id, kind, shard) DO UPDATE SET n = app_counts.n + excluded.n;
            RETURN NULL;
        END $$
        """,
        """
        CREATE TRIGGER devices_counted AFTER INSERT ON devices REFERENCING NEW TABLE AS changed_rows
        FOR EACH STATEMENT EXECUTE FUNCTION richpush_count_inserted('devices')
        """,
        """
        CREATE TRIGGER devices_uncounted AFTER DELETE ON devices REFERENCING OLD TABLE AS changed_rows
        FOR EACH STATEMENT EXECUTE FUNCTION richpush_count_deleted('devices')
        """,
        """
        CREATE TRIGGER live_tokens_counted AFTER INSERT ON live_tokens REFERENCING NEW TABLE AS changed_rows
        FOR EACH STATEMENT EXECUTE FUNCTION richpush_count_inserted('live')
        """,
        """
        CREATE TRIGGER live_tokens_uncounted AFTER DELETE ON live_tokens REFERENCING OLD TABLE AS changed_rows
        FOR EACH STATEMENT EXECUTE FUNCTION richpush_count_deleted('live')
        """,
    ]
}
