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
    /// A push-to-start token not registered again for 30 days is dropped. Apple publishes no lifetime for these
    /// tokens, only that they may change (the app sends the new one and the server forgets the old); the app
    /// registers its token at every launch, so a month without one is a device gone (FCM calls a token stale after
    /// a month without a connection). Sends count only tokens within their lifetime.
    public static let pushToStartTokenLifetime: TimeInterval = 30 * 86_400
    /// A token registered again unchanged within this long is not written again (an app registers on every
    /// launch): the write, and the database's log of it, are skipped.
    public static let refreshAfter: TimeInterval = 3600

    /// How long a token of this kind lives after its last registration.
    public static func lifetime(_ kind: LiveToken.Kind) -> TimeInterval {
        kind == .activity ? activityTokenLifetime : pushToStartTokenLifetime
    }
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
    /// Adds or replaces the token within `limits` (a token is the app's once: registering it again moves it, unless
    /// `owner` is ``RegistrationOwner/keepsKnown`` and a user or an activity holds it). A new token past the app's
    /// bound, or an update token past its activity's, is refused with ``QuotaReached``; past the user's bound the
    /// user's least recently registered tokens go.
    func register(_ token: LiveToken, owner: RegistrationOwner, limits: RegistrationLimits) async throws
    /// Removes a token; false when the app had none such.
    func remove(appID: String, token: String) async throws -> Bool
    /// Removes a token only when no one holds it (no user, no activity) or `user` does (a device's own request
    /// with the public key, and its proof's user when it gave one); whether one went.
    func remove(appID: String, token: String, heldBy user: String?) async throws -> Bool
    /// The audience's live tokens (within their lifetime) in token order, at most `limit`.
    func tokens(appID: String, audience: LiveAudience, limit: Int) async throws -> [String]
    /// Removes tokens of a kind not registered again since `cutoff`; returns how many went.
    func sweep(_ kind: LiveToken.Kind, before cutoff: Date, limit: Int) async throws -> Int
}

extension LiveTokenStore {
    /// Adds or replaces a token as a server-side key does, without bounds.
    public func register(_ token: LiveToken) async throws {
        try await register(token, owner: .asGiven, limits: .none)
    }

    /// Removes activity tokens not registered again since `cutoff` (an activity lasts at most 8 hours, and shows
    /// for up to 4 more after it ends); returns how many went.
    public func sweepActivityTokens(before cutoff: Date, limit: Int) async throws -> Int {
        try await sweep(.activity, before: cutoff, limit: limit)
    }
}

/// The statements of ``LiveTokenStore``, written once.
enum LiveTokenSQL {
    /// The upsert. With `keepsKnown`, a row a user or an activity holds is left as it is.
    static func register(_ t: LiveToken, keepsKnown: Bool = false) -> SQL {
        let held: SQL = keepsKnown ? "(live_tokens.user_id IS NULL AND live_tokens.activity_id IS NULL) AND " : ""
        return """
            INSERT INTO live_tokens (app_id, token, kind, activity_type, activity_id, user_id, updated_at)
            VALUES (\(t.appID), \(t.token), \(t.kind.rawValue), \(t.activityType), \(t.activityID), \(t.userID), \(t.updatedAt))
            ON CONFLICT (app_id, token) DO UPDATE SET kind = excluded.kind, activity_type = excluded.activity_type,
                activity_id = excluded.activity_id, user_id = excluded.user_id, updated_at = excluded.updated_at
            WHERE \(held)(live_tokens.kind <> excluded.kind OR live_tokens.activity_type <> excluded.activity_type
                OR live_tokens.activity_id IS DISTINCT FROM excluded.activity_id
                OR live_tokens.user_id IS DISTINCT FROM excluded.user_id
                OR live_tokens.updated_at < \(t.updatedAt.addingTimeInterval(-LiveTokenLimits.refreshAfter)))
            """
    }

    /// The activity id a registered token holds (one row of one column; none when the token is new).
    static func activity(appID: String, token: String) -> SQL {
        "SELECT activity_id FROM live_tokens WHERE app_id = \(appID) AND token = \(token)"
    }

    /// An activity's live update tokens other than `token`, counted on the (app_id, activity_id, token) index.
    static func activityCount(appID: String, activityID: String, excluding token: String, since: Date) -> SQL {
        """
        SELECT count(*) FROM live_tokens WHERE app_id = \(appID) AND activity_id = \(activityID)
            AND kind = \(LiveToken.Kind.activity.rawValue) AND token <> \(token) AND updated_at >= \(since)
        """
    }

    /// The live update tokens of a token's activity other than itself.
    static func activityCount(of t: LiveToken) -> SQL {
        activityCount(
            appID: t.appID,
            activityID: t.activityID ?? "",
            excluding: t.token,
            since: t.updatedAt.addingTimeInterval(-LiveTokenLimits.activityTokenLifetime)
        )
    }

    /// The user's tokens past the newest `keeping`, by the (app_id, user_id, updated_at) index. `all` is how the
    /// dialect says "no limit" before an OFFSET (SQLite -1, PostgreSQL ALL).
    static func evict(appID: String, user: String, keeping: Int, all: String) -> SQL {
        """
        DELETE FROM live_tokens WHERE app_id = \(appID) AND token IN (
            SELECT token FROM live_tokens WHERE app_id = \(appID) AND user_id = \(user)
            ORDER BY updated_at DESC, token DESC LIMIT \(unescaped: all) OFFSET \(keeping))
        """
    }

    static func remove(appID: String, token: String) -> SQL {
        "DELETE FROM live_tokens WHERE app_id = \(appID) AND token = \(token) RETURNING 1"
    }

    static func remove(appID: String, token: String, heldBy user: String?) -> SQL {
        """
        DELETE FROM live_tokens WHERE app_id = \(appID) AND token = \(token)
            AND ((user_id IS NULL AND activity_id IS NULL) OR user_id = \(user)) RETURNING 1
        """
    }

    static func tokens(appID: String, audience: LiveAudience, limit: Int, now: Date = Date()) -> SQL {
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
        let kind: LiveToken.Kind = if case .activity = audience { .activity } else { .pushToStart }
        let since = now.addingTimeInterval(-LiveTokenLimits.lifetime(kind))
        return """
            SELECT token FROM live_tokens WHERE app_id = \(appID) AND \(condition) AND updated_at >= \(since)
            ORDER BY token LIMIT \(limit)
            """
    }

    static func sweep(_ kind: LiveToken.Kind, before cutoff: Date, limit: Int) -> SQL {
        """
        DELETE FROM live_tokens WHERE token IN (
            SELECT token FROM live_tokens WHERE kind = \(kind.rawValue) AND updated_at < \(cutoff)
            LIMIT \(limit)) AND kind = \(kind.rawValue) AND updated_at < \(cutoff)
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

    public func register(_ token: LiveToken, owner: RegistrationOwner, limits: RegistrationLimits) async throws {
        try await commits.write { db in
            // One writer at a time: what is counted here is what the insert meets.
            let held = try Row.fetchAll(db, query: LiveTokenSQL.activity(appID: token.appID, token: token.token))
            if held.isEmpty,
                try Int.fetchOne(db, query: AppCountSQL.total(token.appID, AppCountSQL.live)) ?? 0
                    >= limits.liveTokensPerApp
            {
                throw QuotaReached.liveTokens(limits.liveTokensPerApp)
            }
            let heldActivity: String? = held.first.flatMap { $0[0] }
            if let activity = token.activityID, token.kind == .activity, held.isEmpty || heldActivity != activity,
                try Int.fetchOne(db, query: LiveTokenSQL.activityCount(of: token)) ?? 0 >= limits.liveTokensPerActivity
            {
                throw QuotaReached.activity(limits.liveTokensPerActivity)
            }
            try db.execute(query: LiveTokenSQL.register(token, keepsKnown: owner == .keepsKnown))
            if let user = token.userID, owner == .asGiven, limits.liveTokensPerUser < Int.max {
                try db.execute(
                    query: LiveTokenSQL.evict(
                        appID: token.appID,
                        user: user,
                        keeping: limits.liveTokensPerUser,
                        all: "-1"
                    )
                )
            }
        }
    }

    public func remove(appID: String, token: String) async throws -> Bool {
        try await pool.write { db in
            try !Row.fetchAll(db, query: LiveTokenSQL.remove(appID: appID, token: token)).isEmpty
        }
    }

    public func remove(appID: String, token: String, heldBy user: String?) async throws -> Bool {
        try await pool.write { db in
            try !Row.fetchAll(db, query: LiveTokenSQL.remove(appID: appID, token: token, heldBy: user)).isEmpty
        }
    }

    public func tokens(appID: String, audience: LiveAudience, limit: Int) async throws -> [String] {
        try await pool.read { db in
            try Row.fetchAll(db, query: LiveTokenSQL.tokens(appID: appID, audience: audience, limit: limit))
                .map { $0[0] as String }
        }
    }

    public func sweep(_ kind: LiveToken.Kind, before cutoff: Date, limit: Int) async throws -> Int {
        try await pool.write { db in
            try Row.fetchAll(db, query: LiveTokenSQL.sweep(kind, before: cutoff, limit: limit)).count
        }
    }
}

/// Live Activity tokens in the shared PostgreSQL database.
public final class PostgresLiveTokenStore: LiveTokenStore {
    let db: PostgresDatabase

    init(db: PostgresDatabase) { self.db = db }

    public func register(_ token: LiveToken, owner: RegistrationOwner, limits: RegistrationLimits) async throws {
        let logger = db.logger
        try await db.transaction { c in
            // Counted before the insert, in its transaction: registrations through several nodes at once may each
            // pass a bound by one (the next registration meets it).
            let held = try await c.query(
                LiveTokenSQL.activity(appID: token.appID, token: token.token).postgres,
                logger: logger
            ).collect()
            if held.isEmpty {
                let total =
                    try await c.query(AppCountSQL.total(token.appID, AppCountSQL.live).postgres, logger: logger)
                    .collect().first?.decode(Int.self) ?? 0
                if total >= limits.liveTokensPerApp { throw QuotaReached.liveTokens(limits.liveTokensPerApp) }
            }
            if let activity = token.activityID, token.kind == .activity,
                try held.isEmpty || held.first?.decode(String?.self) != activity
            {
                let n =
                    try await c.query(LiveTokenSQL.activityCount(of: token).postgres, logger: logger).collect().first?
                    .decode(Int.self) ?? 0
                if n >= limits.liveTokensPerActivity { throw QuotaReached.activity(limits.liveTokensPerActivity) }
            }
            _ = try await c.query(
                LiveTokenSQL.register(token, keepsKnown: owner == .keepsKnown).postgres,
                logger: logger
            ).collect()
            if let user = token.userID, owner == .asGiven, limits.liveTokensPerUser < Int.max {
                _ = try await c.query(
                    LiveTokenSQL.evict(appID: token.appID, user: user, keeping: limits.liveTokensPerUser, all: "ALL")
                        .postgres,
                    logger: logger
                ).collect()
            }
        }
    }

    public func remove(appID: String, token: String) async throws -> Bool {
        try await !db.rows(LiveTokenSQL.remove(appID: appID, token: token).postgres).isEmpty
    }

    public func remove(appID: String, token: String, heldBy user: String?) async throws -> Bool {
        try await !db.rows(LiveTokenSQL.remove(appID: appID, token: token, heldBy: user).postgres).isEmpty
    }

    public func tokens(appID: String, audience: LiveAudience, limit: Int) async throws -> [String] {
        try await db.rows(LiveTokenSQL.tokens(appID: appID, audience: audience, limit: limit).postgres)
            .map { try $0.decode(String.self) }
    }

    public func sweep(_ kind: LiveToken.Kind, before cutoff: Date, limit: Int) async throws -> Int {
        try await db.rows(LiveTokenSQL.sweep(kind, before: cutoff, limit: limit).postgres).count
    }
}

/// The in-memory twin, answering as the databases do (token order, one row per app and token).
public final class MemoryLiveTokenStore: LiveTokenStore {
    private let rows = NIOLockedValueBox<[String: LiveToken]>([:])

    public init() {}

    private static func key(_ app: String, _ token: String) -> String { app + "\u{0}" + token }

    public func register(_ token: LiveToken, owner: RegistrationOwner, limits: RegistrationLimits) async throws {
        try rows.withLockedValue { rows in
            let key = Self.key(token.appID, token.token)
            let held = rows[key]
            if held == nil, rows.values.count(where: { $0.appID == token.appID }) >= limits.liveTokensPerApp {
                throw QuotaReached.liveTokens(limits.liveTokensPerApp)
            }
            if let activity = token.activityID, token.kind == .activity, held?.activityID != activity {
                let since = token.updatedAt.addingTimeInterval(-LiveTokenLimits.activityTokenLifetime)
                let n = rows.values.count {
                    $0.appID == token.appID && $0.kind == .activity && $0.activityID == activity
                        && $0.token != token.token && $0.updatedAt >= since
                }
                if n >= limits.liveTokensPerActivity { throw QuotaReached.activity(limits.liveTokensPerActivity) }
            }
            // A token a user or an activity holds is not the public key's to change.
            if owner == .keepsKnown, let held, held.userID != nil || held.activityID != nil { return }
            if var kept = held, kept.updatedAt >= token.updatedAt.addingTimeInterval(-LiveTokenLimits.refreshAfter) {
                kept.updatedAt = token.updatedAt
                // Unchanged and fresh: kept as it is, as the databases keep it.
                if kept == token { return }
            }
            rows[key] = token
            if let user = token.userID, owner == .asGiven {
                let mine = rows.values.filter { $0.appID == token.appID && $0.userID == user }
                    .sorted { ($0.updatedAt, $0.token) > ($1.updatedAt, $1.token) }
                for t in mine.dropFirst(max(0, limits.liveTokensPerUser)) { rows[Self.key(t.appID, t.token)] = nil }
            }
        }
    }

    public func remove(appID: String, token: String) async throws -> Bool {
        rows.withLockedValue { $0.removeValue(forKey: Self.key(appID, token)) != nil }
    }

    public func remove(appID: String, token: String, heldBy user: String?) async throws -> Bool {
        rows.withLockedValue { rows in
            let key = Self.key(appID, token)
            guard let held = rows[key], (held.userID == nil && held.activityID == nil) || held.userID == user
            else { return false }
            rows[key] = nil
            return true
        }
    }

    public func tokens(appID: String, audience: LiveAudience, limit: Int) async throws -> [String] {
        let all = rows.withLockedValue { Array($0.values) }
        let now = Date()
        return all.filter { t in
            guard t.appID == appID, t.updatedAt >= now.addingTimeInterval(-LiveTokenLimits.lifetime(t.kind)) else {
                return false
            }
            switch audience {
            case .activity(let id): return t.kind == .activity && t.activityID == id
            case .pushToStart(let type, let user):
                return t.kind == .pushToStart && t.activityType == type && (user == nil || t.userID == user)
            }
        }.map(\.token).sorted().prefix(max(0, limit)).map { $0 }
    }

    public func sweep(_ kind: LiveToken.Kind, before cutoff: Date, limit: Int) async throws -> Int {
        rows.withLockedValue { rows in
            let old = rows.filter { $0.value.kind == kind && $0.value.updatedAt < cutoff }.keys.prefix(limit)
            for k in old { rows[k] = nil }
            return old.count
        }
    }
}
