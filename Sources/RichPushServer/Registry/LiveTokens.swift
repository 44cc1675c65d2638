import Foundation
import GRDB
import NIOConcurrencyHelpers
import PostgresNIO

/// A Live Activity token an app registered: a push-to-start token (one per device and attributes type, which
/// starts new activities of that type) or an activity's update token (one per running activity on a device).
public struct LiveToken: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        case pushToStart = "push_to_start"
        case activity
    }

    public var appID: String
    public var token: String
    public var kind: Kind
    /// The app's `ActivityAttributes` type.
    public var activityType: String
    /// The app's name for the activity (an order, a match): updates and ends are sent by it. Activity tokens only.
    public var activityID: String?
    public var userID: String?
    public var updatedAt: Date

    public init(
        appID: String,
        token: String,
        kind: Kind,
        activityType: String,
        activityID: String? = nil,
        userID: String? = nil,
        updatedAt: Date = Date()
    ) {
        self.appID = appID
        self.token = token
        self.kind = kind
        self.activityType = activityType
        self.activityID = activityID
        self.userID = userID
        self.updatedAt = updatedAt
    }
}

/// Bounds on what one app keeps and one send reads.
public enum LiveTokenLimits {
    /// Eight hours of activity, four more on the Lock Screen after its end.
    public static let activityTokenLifetime: TimeInterval = 12 * 3600
    /// A token registered again unchanged within this long is not written again (an app registers on every
    /// launch): the write, and the database's log of it, are skipped.
    public static let refreshAfter: TimeInterval = 3600
}

/// Which registered Live Activity tokens a send goes to.
public enum LiveAudience: Sendable, Hashable {
    /// The update tokens of the activity with this id.
    case activity(String)
    /// The push-to-start tokens for this attributes type, all of them or one user's.
    case pushToStart(type: String, userID: String?)
}

/// The app's Live Activity tokens. One statement text serves SQLite and PostgreSQL (``LiveTokenSQL``).
public protocol LiveTokenStore: Sendable {
    /// Adds or replaces the token (a token is the app's once: registering it again moves it).
    func register(_ token: LiveToken) async throws
    /// Removes a token; false when the app had none such.
    func remove(appID: String, token: String) async throws -> Bool
    /// The audience's tokens in token order, at most `limit`.
    func tokens(appID: String, audience: LiveAudience, limit: Int) async throws -> [String]
    /// Removes activity tokens not registered again since `cutoff` (an activity lasts at most 8 hours, and shows
    /// for up to 4 more after it ends); returns how many went.
    func sweepActivityTokens(before cutoff: Date, limit: Int) async throws -> Int
}

/// The statements of ``LiveTokenStore``, written once.
enum LiveTokenSQL {
    static func register(_ t: LiveToken) -> SQL {
        """
        INSERT INTO live_tokens (app_id, token, kind, activity_type, activity_id, user_id, updated_at)
        VALUES (\(t.appID), \(t.token), \(t.kind.rawValue), \(t.activityType), \(t.activityID), \(t.userID), \(t.updatedAt))
        ON CONFLICT (app_id, token) DO UPDATE SET kind = excluded.kind, activity_type = excluded.activity_type,
            activity_id = excluded.activity_id, user_id = excluded.user_id, updated_at = excluded.updated_at
        WHERE live_tokens.kind <> excluded.kind OR live_tokens.activity_type <> excluded.activity_type
            OR live_tokens.activity_id IS DISTINCT FROM excluded.activity_id
            OR live_tokens.user_id IS DISTINCT FROM excluded.user_id
            OR live_tokens.updated_at < \(t.updatedAt.addingTimeInterval(-LiveTokenLimits.refreshAfter))
        """
    }

    static func remove(appID: String, token: String) -> SQL {
        "DELETE FROM live_tokens WHERE app_id = \(appID) AND token = \(token) RETURNING 1"
    }

    static func tokens(appID: String, audience: LiveAudience, limit: Int) -> SQL {
        let condition: SQL
        switch audience {
        case .activity(let id):
            condition = "kind = \(LiveToken.Kind.activity.rawValue) AND activity_id = \(id)"
        case .pushToStart(let type, nil):
            condition = "kind = \(LiveToken.Kind.pushToStart.rawValue) AND activity_type = \(type)"
        case .pushToStart(let type, let user?):
            condition =
                "kind = \(LiveToken.Kind.pushToStart.rawValue) AND activity_type = \(type) AND user_id = \(user)"
        }
        return "SELECT token FROM live_tokens WHERE app_id = \(appID) AND \(condition) ORDER BY token LIMIT \(limit)"
    }

    static func sweep(before cutoff: Date, limit: Int) -> SQL {
        """
        DELETE FROM live_tokens WHERE token IN (
            SELECT token FROM live_tokens WHERE kind = \(LiveToken.Kind.activity.rawValue) AND updated_at < \(cutoff)
            LIMIT \(limit)) AND kind = \(LiveToken.Kind.activity.rawValue) AND updated_at < \(cutoff)
        RETURNING 1
        """
    }

    /// The table, for SQLite (`REAL` times) and PostgreSQL (`timestamptz`).
    static func create(time: String) -> String {
        """
        CREATE TABLE live_tokens (
            app_id TEXT NOT NULL, token TEXT NOT NULL, kind TEXT NOT NULL, activity_type TEXT NOT NULL,
            activity_id TEXT, user_id TEXT, updated_at \(time) NOT NULL, PRIMARY KEY (app_id, token));
        CREATE INDEX live_tokens_activity ON live_tokens (app_id, activity_id, token);
        CREATE INDEX live_tokens_start ON live_tokens (app_id, activity_type, kind, token);
        CREATE INDEX live_tokens_age ON live_tokens (updated_at)
        """
    }
}

/// Live Activity tokens in the server's SQLite file. Registrations go through the group commit the other stores
/// use: an app's devices registering at once share transactions instead of writing one each.
public final class SQLiteLiveTokenStore: LiveTokenStore {
    let pool: DatabasePool
    let commits: GroupCommit

    /// Expects the server store's migrations (``SQLiteServerStore``), which create the table.
    init(pool: DatabasePool) {
        self.pool = pool
        commits = GroupCommit(pool: pool)
    }

    public func register(_ token: LiveToken) async throws {
        try await commits.write { db in try db.execute(query: LiveTokenSQL.register(token)) }
    }

    public func remove(appID: String, token: String) async throws -> Bool {
        try await pool.write { db in
            try !Row.fetchAll(db, query: LiveTokenSQL.remove(appID: appID, token: token)).isEmpty
        }
    }

    public func tokens(appID: String, audience: LiveAudience, limit: Int) async throws -> [String] {
        try await pool.read { db in
            try Row.fetchAll(db, query: LiveTokenSQL.tokens(appID: appID, audience: audience, limit: limit))
                .map { $0[0] as String }
        }
    }

    public func sweepActivityTokens(before cutoff: Date, limit: Int) async throws -> Int {
        try await pool.write { db in try Row.fetchAll(db, query: LiveTokenSQL.sweep(before: cutoff, limit: limit)).count
        }
    }
}

/// Live Activity tokens in the shared PostgreSQL database.
public final class PostgresLiveTokenStore: LiveTokenStore {
    let db: PostgresDatabase

    init(db: PostgresDatabase) { self.db = db }

    public func register(_ token: LiveToken) async throws {
        _ = try await db.rows(LiveTokenSQL.register(token).postgres)
    }

    public func remove(appID: String, token: String) async throws -> Bool {
        try await !db.rows(LiveTokenSQL.remove(appID: appID, token: token).postgres).isEmpty
    }

    public func tokens(appID: String, audience: LiveAudience, limit: Int) async throws -> [String] {
        try await db.rows(LiveTokenSQL.tokens(appID: appID, audience: audience, limit: limit).postgres)
            .map { try $0.decode(String.self) }
    }

    public func sweepActivityTokens(before cutoff: Date, limit: Int) async throws -> Int {
        try await db.rows(LiveTokenSQL.sweep(before: cutoff, limit: limit).postgres).count
    }
}

/// The in-memory twin, answering as the databases do (token order, one row per app and token).
public final class MemoryLiveTokenStore: LiveTokenStore {
    private let rows = NIOLockedValueBox<[String: LiveToken]>([:])

    public init() {}

    private static func key(_ app: String, _ token: String) -> String { app + "\u{0}" + token }

    public func register(_ token: LiveToken) async throws {
        rows.withLockedValue { rows in
            let key = Self.key(token.appID, token.token)
            if var kept = rows[key], kept.updatedAt >= token.updatedAt.addingTimeInterval(-LiveTokenLimits.refreshAfter)
            {
                kept.updatedAt = token.updatedAt
                // Unchanged and fresh: kept as it is, as the databases keep it.
                if kept == token { return }
            }
            rows[key] = token
        }
    }

    public func remove(appID: String, token: String) async throws -> Bool {
        rows.withLockedValue { $0.removeValue(forKey: Self.key(appID, token)) != nil }
    }

    public func tokens(appID: String, audience: LiveAudience, limit: Int) async throws -> [String] {
        let all = rows.withLockedValue { Array($0.values) }
        return all.filter { t in
            guard t.appID == appID else { return false }
            switch audience {
            case .activity(let id): return t.kind == .activity && t.activityID == id
            case .pushToStart(let type, let user):
                return t.kind == .pushToStart && t.activityType == type && (user == nil || t.userID == user)
            }
        }.map(\.token).sorted().prefix(max(0, limit)).map { $0 }
    }

    public func sweepActivityTokens(before cutoff: Date, limit: Int) async throws -> Int {
        rows.withLockedValue { rows in
            let old = rows.filter { $0.value.kind == .activity && $0.value.updatedAt < cutoff }.keys.prefix(limit)
            for k in old { rows[k] = nil }
            return old.count
        }
    }
}
