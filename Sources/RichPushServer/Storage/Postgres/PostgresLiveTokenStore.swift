import Foundation
import Logging
import PostgresNIO

/// Live Activity tokens in the shared PostgreSQL database.
public final class PostgresLiveTokenStore: LiveTokenStore {
    let db: PostgresDatabase

    init(db: PostgresDatabase) { self.db = db }

    public func register(
        _ token: LiveToken,
        owner: RegistrationOwner,
        limits: RegistrationLimits,
        events: @escaping LiveTokenEvents
    ) async throws {
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
            let written = try await c.query(
                LiveTokenSQL.register(token, keepsKnown: owner == .keepsKnown).postgres,
                logger: logger
            ).collect()
            if let row = written.first, events() {
                _ = try await c.query(
                    WebhookSQL.append(token.webhookEvent("registered"), now: token.updatedAt).postgres,
                    logger: logger
                ).collect()
                if try row.decode(Int.self) == 0 {
                    _ = try await c.query(
                        LiveTokenSQL.told(appID: token.appID, token: token.token).postgres,
                        logger: logger
                    )
                    .collect()
                }
            }
            if let user = token.userID, owner == .asGiven, limits.liveTokensPerUser < Int.max {
                let evicted = try await c.query(
                    LiveTokenSQL.evict(appID: token.appID, user: user, keeping: limits.liveTokensPerUser, all: "ALL")
                        .postgres,
                    logger: logger
                ).collect()
                try await Self.tell(evicted, "removed", events: events, on: c, logger: logger)
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

    /// Runs a deletion and tells each token it removed (see ``tell(_:_:events:on:logger:)``), in its transaction.
    private func removing(_ statement: SQL, as state: String, events: @escaping LiveTokenEvents) async throws -> Int {
        let logger = db.logger
        return try await db.transaction { c in
            let rows = try await c.query(statement.postgres, logger: logger).collect()
            try await Self.tell(rows, state, events: events, on: c, logger: logger)
            return rows.count
        }
    }

    /// Records a `live.token` event for each removed row (``LiveTokenSQL/removed``) whose registration was told, as
    /// `events` allows.
    static func tell(
        _ rows: [PostgresRow],
        _ state: String,
        events: LiveTokenEvents,
        on c: PostgresConnection,
        logger: Logger
    ) async throws {
        let now = Date()
        for row in rows {
            let (app, token, kind, type, activity, user, told) = try row.decode(
                (String, String, String, String, String?, String?, Int).self
            )
            guard told != 0, events() else { continue }
            let t = LiveToken(
                appID: app,
                token: token,
                kind: LiveToken.Kind(rawValue: kind) ?? .activity,
                activityType: type,
                activityID: activity,
                userID: user
            )
            _ = try await c.query(WebhookSQL.append(t.webhookEvent(state), now: now).postgres, logger: logger).collect()
        }
    }

    public func tokens(appID: String, audience: LiveAudience, limit: Int) async throws -> [String] {
        try await db.rows(LiveTokenSQL.tokens(appID: appID, audience: audience, limit: limit).postgres)
            .map { try $0.decode(String.self) }
    }

    public func activityTokens(appID: String, activityIDs: [String], limit: Int) async throws -> [ExactText: [String]] {
        guard !activityIDs.isEmpty else { return [:] }
        let rows = try await db.rows(
            LiveTokenSQL.activityTokens(appID: appID, activityIDs: activityIDs, limit: limit).postgres
        )
        return LiveTokenSQL.grouped(try rows.map { try $0.decode((String, String).self) })
    }

    public func sweep(_ kind: LiveToken.Kind, before cutoff: Date, limit: Int) async throws -> Int {
        try await removing(LiveTokenSQL.sweep(kind, before: cutoff, limit: limit), as: "expired", events: { true })
    }
}
