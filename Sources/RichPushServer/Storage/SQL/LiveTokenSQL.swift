import Foundation

/// The statements of ``LiveTokenStore``, written once.
enum LiveTokenSQL {
    /// The upsert, returning whether the token was told (a row only when it wrote one). A new token is not told
    /// until its event is written (``told(appID:token:)``). With `keepsKnown`, a row a user or an activity holds is
    /// left as it is.
    static func register(_ t: LiveToken, keepsKnown: Bool = false) -> SQL {
        let held: SQL = keepsKnown ? "(live_tokens.user_id IS NULL AND live_tokens.activity_id IS NULL) AND " : ""
        return """
            INSERT INTO live_tokens (app_id, token, kind, activity_type, activity_id, user_id, updated_at, told)
            VALUES (\(t.appID), \(t.token), \(t.kind.rawValue), \(t.activityType), \(t.activityID), \(t.userID), \(t.updatedAt), 0)
            ON CONFLICT (app_id, token) DO UPDATE SET kind = excluded.kind, activity_type = excluded.activity_type,
                activity_id = excluded.activity_id, user_id = excluded.user_id, updated_at = excluded.updated_at
            WHERE \(held)(live_tokens.kind <> excluded.kind OR live_tokens.activity_type <> excluded.activity_type
                OR live_tokens.activity_id IS DISTINCT FROM excluded.activity_id
                OR live_tokens.user_id IS DISTINCT FROM excluded.user_id
                OR live_tokens.updated_at < \(t.updatedAt.addingTimeInterval(-LiveTokenLimits.refreshAfter)))
            RETURNING told
            """
    }

    /// The token's `registered` event was written: from now on its removal and its expiry are told too.
    static func told(appID: String, token: String) -> SQL {
        "UPDATE live_tokens SET told = 1 WHERE app_id = \(appID) AND token = \(token) AND told = 0"
    }

    /// Whether a token's events are told: only once its registration was (an event the app's budget left unwritten
    /// is never followed by its removal's or its expiry's, so public callers cause at most the budget's events).
    static let toldColumn = "ALTER TABLE live_tokens ADD COLUMN told integer NOT NULL DEFAULT 1"

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
        RETURNING \(unescaped: removed)
        """
    }

    /// What a removal returns: the token as it was (its `live.token` event says so), and whether it was told.
    static let removed = "app_id, token, kind, activity_type, activity_id, user_id, told"

    static func remove(appID: String, token: String) -> SQL {
        "DELETE FROM live_tokens WHERE app_id = \(appID) AND token = \(token) RETURNING \(unescaped: removed)"
    }

    static func remove(appID: String, token: String, heldBy user: String?) -> SQL {
        """
        DELETE FROM live_tokens WHERE app_id = \(appID) AND token = \(token)
            AND ((user_id IS NULL AND activity_id IS NULL) OR user_id = \(user)) RETURNING \(unescaped: removed)
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

    /// The update tokens of several activities (`activity_id`, `token`), each activity's in token order.
    static func activityTokens(appID: String, activityIDs: [String], limit: Int, now: Date = Date()) -> SQL {
        let since = now.addingTimeInterval(-LiveTokenLimits.lifetime(.activity))
        let ids = activityIDs.enumerated().reduce(SQL(stringLiteral: "")) { out, v in
            out + (v.offset == 0 ? "\(v.element)" : ", \(v.element)" as SQL)
        }
        return """
            SELECT activity_id, token FROM live_tokens WHERE app_id = \(appID) AND activity_id IN (\(ids))
                AND kind = \(LiveToken.Kind.activity.rawValue) AND updated_at >= \(since)
            ORDER BY activity_id, token LIMIT \(limit + 1)
            """
    }

    /// Rows of (activity id, token) grouped by activity.
    static func grouped(_ rows: [(String, String)]) -> [ExactText: [String]] {
        var out: [ExactText: [String]] = [:]
        for (activity, token) in rows { out[ExactText(activity), default: []].append(token) }
        return out
    }

    static func sweep(_ kind: LiveToken.Kind, before cutoff: Date, limit: Int) -> SQL {
        """
        DELETE FROM live_tokens WHERE token IN (
            SELECT token FROM live_tokens WHERE kind = \(kind.rawValue) AND updated_at < \(cutoff)
            LIMIT \(limit)) AND kind = \(kind.rawValue) AND updated_at < \(cutoff)
        RETURNING \(unescaped: removed)
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
