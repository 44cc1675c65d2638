import PostgresNIO

/// The devices of a registry audience as SQL over `d` (devices), the same text for SQLite and PostgreSQL: the
/// tables to read and the condition on them. Token lists and the audiences that are not the registry's (tokens
/// given with their provider, FCM topics and conditions) have none.
public struct AudienceFilter: Sendable {
    public var from: SQL
    public var condition: SQL

    public init?(_ audience: Audience, appID: String) {
        switch audience {
        case .all:
            (from, condition) = ("devices d", "d.app_id = \(appID)")
        case .user(let u):
            (from, condition) = ("devices d", "d.app_id = \(appID) AND d.user_id = \(u)")
        case .tag(let t):
            (from, condition) = (
                "device_tags g JOIN devices d ON d.id = g.device_id", "g.tag = \(t) AND d.app_id = \(appID)"
            )
        case .topic(let t):
            (from, condition) = (
                "device_topics g JOIN devices d ON d.id = g.device_id", "g.topic = \(t) AND d.app_id = \(appID)"
            )
        case .tokens, .providerTokens, .fcmTopic, .fcmCondition, .apnsChannel:
            return nil
        }
    }

    /// Devices after a row id, in row order, at most `limit`: a page, or a fan-out's next chunk.
    func ids(after cursor: Int64, limit: Int) -> SQL {
        "SELECT d.id AS id FROM \(from) WHERE \(condition) AND d.id > \(cursor) ORDER BY d.id LIMIT \(limit)"
    }

    /// How many devices each provider reaches.
    var countByProvider: SQL { "SELECT d.provider, count(*) FROM \(from) WHERE \(condition) GROUP BY d.provider" }

    /// How many devices there are after a row id.
    func count(after cursor: Int64) -> SQL { "SELECT count(*) FROM \(from) WHERE \(condition) AND d.id > \(cursor)" }
}

/// Where a notification's registry fan-out stands, as stored in `notifications.fanout_state`.
public enum FanOutState: String, Sendable {
    /// Its deliveries are still being added (a crash leaves it for the resume to finish).
    case pending
    /// All its deliveries are queued (or it had no fan-out).
    case done
}

extension SQL.StringInterpolation {
    /// A fan-out state, bound as its stored text.
    public mutating func appendInterpolation(_ state: FanOutState) { appendInterpolation(state.rawValue) }
}

extension PostgresQuery.StringInterpolation {
    /// A fan-out state, bound as its stored text.
    public mutating func appendInterpolation(_ state: FanOutState) { appendInterpolation(state.rawValue) }
}
