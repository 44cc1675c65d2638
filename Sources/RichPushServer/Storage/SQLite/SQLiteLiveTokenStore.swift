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
        writesEvent: Bool
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
            try db.execute(query: LiveTokenSQL.register(token, keepsKnown: owner == .keepsKnown))
            if db.changesCount > 0 && writesEvent {
                try db.execute(query: WebhookSQL.append(token.webhookEvent("registered"), now: token.updatedAt))
            }
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
        try await removing(LiveTokenSQL.remove(appID: appID, token: token), as: "removed") > 0
    }

    public func remove(appID: String, token: String, heldBy user: String?, writesEvent: Bool) async throws -> Bool {
        let statement = LiveTokenSQL.remove(appID: appID, token: token, heldBy: user)
        return try await removing(statement, as: writesEvent ? "removed" : nil) > 0
    }

    /// Runs a deletion and records a `live.token` event of each token it removed, in its transaction (none when
    /// `state` is nil).
    private func removing(_ statement: SQL, as state: String?) async throws -> Int {
        try await pool.write { db in
            let rows = try Row.fetchAll(db, query: statement)
            guard let state else { return rows.count }
            let now = Date()
            for row in rows {
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
            return rows.count
        }
    }

    public func tokens(appID: String, audience: LiveAudience, limit: Int) async throws -> [String] {
        try await pool.read { db in
            try Row.fetchAll(db, query: LiveTokenSQL.tokens(appID: appID, audience: audience, limit: limit))
                .map { $0[0] as String }
        }
    }

    public func sweep(_ kind: LiveToken.Kind, before cutoff: Date, limit: Int) async throws -> Int {
        try await removing(LiveTokenSQL.sweep(kind, before: cutoff, limit: limit), as: "expired")
    }
}
