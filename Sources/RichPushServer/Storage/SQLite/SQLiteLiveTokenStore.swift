import Foundation
import GRDB

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

    public func register(
        _ token: LiveToken,
        owner: RegistrationOwner,
        limits: RegistrationLimits,
        events: @escaping LiveTokenEvents
    ) async throws {
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
            let written = try Row.fetchAll(db, query: LiveTokenSQL.register(token, keepsKnown: owner == .keepsKnown))
            if let row = written.first, events() {
                try db.execute(query: WebhookSQL.append(token.webhookEvent("registered"), now: token.updatedAt))
                if row[0] as Int == 0 {
                    try db.execute(query: LiveTokenSQL.told(appID: token.appID, token: token.token))
                }
            }
            if let user = token.userID, owner == .asGiven, limits.liveTokensPerUser < Int.max {
                let evicted = LiveTokenSQL.evict(
                    appID: token.appID,
                    user: user,
                    keeping: limits.liveTokensPerUser,
                    all: "-1"
                )
                try Self.tell(try Row.fetchAll(db, query: evicted), "removed", events: events, in: db)
            }
        }
    }

    public func remove(appID: String, token: String) async throws -> Bool {
        try await removing(LiveTokenSQL.remove(appID: appID, token: token), as: "removed", events: { true }) > 0
    }

    public func remove(
        appID: String,
        token: String,
        heldBy user: String?,
        events: @escaping LiveTokenEvents
    ) async throws -> Bool {
        let statement = LiveTokenSQL.remove(appID: appID, token: token, heldBy: user)
        return try await removing(statement, as: "removed", events: events) > 0
    }

    /// Runs a deletion and tells each token it removed (see ``tell(_:_:events:in:)``), in its transaction.
    private func removing(_ statement: SQL, as state: String, events: @escaping LiveTokenEvents) async throws -> Int {
        try await pool.write { db in
            let rows = try Row.fetchAll(db, query: statement)
            try Self.tell(rows, state, events: events, in: db)
            return rows.count
        }
    }

    /// Records a `live.token` event for each removed row (``LiveTokenSQL/removed``) whose registration was told, as
    /// `events` allows.
    static func tell(_ rows: [Row], _ state: String, events: LiveTokenEvents, in db: Database) throws {
        let now = Date()
        for row in rows where row[6] as Int != 0 && events() {
            let token = LiveToken(
                appID: row[0],
                token: row[1],
                kind: LiveToken.Kind(rawValue: row[2]) ?? .activity,
                activityType: row[3],
                activityID: row[4],
                userID: row[5]
            )
            try db.execute(query: WebhookSQL.append(token.webhookEvent(state), now: now))
        }
    }

    public func tokens(appID: String, audience: LiveAudience, limit: Int) async throws -> [String] {
        try await pool.read { db in
            try Row.fetchAll(db, query: LiveTokenSQL.tokens(appID: appID, audience: audience, limit: limit))
                .map { $0[0] as String }
        }
    }

    public func activityTokens(appID: String, activityIDs: [String], limit: Int) async throws -> [ExactText: [String]] {
        guard !activityIDs.isEmpty else { return [:] }
        let rows = try await pool.read { db in
            try Row.fetchAll(
                db,
                query: LiveTokenSQL.activityTokens(appID: appID, activityIDs: activityIDs, limit: limit)
            )
            .map { ($0[0] as String, $0[1] as String) }
        }
        return LiveTokenSQL.grouped(rows)
    }

    public func sweep(_ kind: LiveToken.Kind, before cutoff: Date, limit: Int) async throws -> Int {
        try await removing(LiveTokenSQL.sweep(kind, before: cutoff, limit: limit), as: "expired", events: { true })
    }
}
