import PostgresNIO
import RichPushCore

/// The devices of a registry audience as SQL over `d` (devices), one text for SQLite and PostgreSQL but for a join
/// hint and the token's collation: the tables to read and the condition on them. Token lists and the audiences that are not the registry's (tokens
/// given with their provider, FCM topics and conditions) have none.
public struct AudienceFilter: Sendable {
    public var from: SQL
    public var condition: SQL
    /// The device's row id as the audience's index holds it: `g.device_id` for a tag or topic (ordered and
    /// ranged along their `(tag, device_id)` key, where `d.id` had every tagged device read and sorted per chunk).
    var rowID: SQL = "d.id"
    /// Whether the audience is a whole app, which a fan-out walks in token order (see ``FanOutCursor``).
    public var wholeApp = false
    /// The token as the fan-out orders it, byte by byte: SQLite's own order; PostgreSQL's `COLLATE "C"` (the
    /// order of its `(app_id, token COLLATE "C")` index).
    var tokenOrder: SQL

    /// The database whose planner and collations the SQL is written for.
    public enum Dialect: Sendable { case sqlite, postgres }

    public init?(_ audience: Audience, appID: String, dialect: Dialect = .sqlite) {
        tokenOrder = dialect == .postgres ? #"d.token COLLATE "C""# : "d.token"
        // A tag's or topic's devices are read from its (tag, device_id) key, then each looked up by id. SQLite,
        // which keeps no statistics here, would rather walk the app's devices along (app_id, id) over the chunk's
        // range and look each up in the tags (every device of the app, tagged or not): CROSS JOIN keeps the order.
        let join: SQL = dialect == .sqlite ? "CROSS JOIN" : "JOIN"
        switch audience {
        case .all:
            (from, condition, wholeApp) = ("devices d", "d.app_id = \(appID)", true)
        case .user(let u):
            (from, condition) = ("devices d", "d.app_id = \(appID) AND d.user_id = \(u)")
        case .tag(let t):
            (from, condition, rowID) = (
                "device_tags g \(join) devices d ON d.id = g.device_id", "g.tag = \(t) AND d.app_id = \(appID)",
                "g.device_id"
            )
        case .topic(let t):
            (from, condition, rowID) = (
                "device_topics g \(join) devices d ON d.id = g.device_id", "g.topic = \(t) AND d.app_id = \(appID)",
                "g.device_id"
            )
        case .tokens, .providerTokens, .fcmTopic, .fcmCondition, .apnsChannel:
            return nil
        }
    }

    /// Devices after a row id, in row order, at most `limit`: a page, or a fan-out's next chunk.
    func ids(after cursor: Int64, limit: Int) -> SQL {
        "SELECT \(rowID) AS id FROM \(from) WHERE \(condition) AND \(rowID) > \(cursor) ORDER BY \(rowID) LIMIT \(limit)"
    }

    /// The filter as PostgreSQL runs it: tokens ordered byte by byte, as its `(app_id, token COLLATE "C")` index.
    public static func postgres(_ audience: Audience, appID: String) -> AudienceFilter? {
        AudienceFilter(audience, appID: appID, dialect: .postgres)
    }

    /// Where a fan-out starts, or resumes from its stored progress: a whole app in token order, unless it was begun
    /// in row order (by a version before that order; it ends in the order it began).
    public func cursor(storedID: Int64, storedToken: String) -> FanOutCursor {
        wholeApp && storedID == 0 ? .token(storedToken) : .id(storedID)
    }

    /// The end of a fan-out's next chunk after `cursor` (at most `limit` devices): one row of one value, the last
    /// device's id or token, NULL when none is left.
    func chunkEnd(after cursor: FanOutCursor, limit: Int) -> SQL {
        switch cursor {
        case .id(let id): "SELECT max(id) FROM (\(ids(after: id, limit: limit))) chunk"
        case .token(let token):
            """
            SELECT max(k) FROM (SELECT \(tokenOrder) AS k FROM \(from) WHERE \(condition) AND \(tokenOrder) > \(token)
            ORDER BY k LIMIT \(limit)) chunk
            """
        }
    }

    /// The devices of the chunk after `cursor` up to its end (a value ``chunkEnd(after:limit:)`` read).
    func chunk(after cursor: FanOutCursor, upTo end: FanOutCursor) -> SQL {
        switch (cursor, end) {
        case (.token(let a), .token(let b)): "\(tokenOrder) > \(a) AND \(tokenOrder) <= \(b)"
        case (.id(let a), .id(let b)): "\(rowID) > \(a) AND \(rowID) <= \(b)"
        default: preconditionFailure("a chunk's two ends are of one kind")
        }
    }

    /// The order a fan-out numbers its deliveries in (a spread send's times follow it).
    func order(of cursor: FanOutCursor) -> SQL {
        if case .token = cursor { return tokenOrder }
        return rowID
    }

    /// How many devices each provider reaches.
    var countByProvider: SQL { "SELECT d.provider, count(*) FROM \(from) WHERE \(condition) GROUP BY d.provider" }

    /// How many devices there are after a fan-out's cursor.
    func count(after cursor: FanOutCursor) -> SQL {
        switch cursor {
        case .id(let id): "SELECT count(*) FROM \(from) WHERE \(condition) AND \(rowID) > \(id)"
        case .token(let t): "SELECT count(*) FROM \(from) WHERE \(condition) AND \(tokenOrder) > \(t)"
        }
    }
}

/// Where an in-database fan-out's walk of its audience stands: after a device's row id, or after a token.
///
/// A whole app is walked in token order, along the `(app_id, token)` index. Its deliveries are then inserted in
/// the order of the deliveries' `(notification_id, target)` index, so that index only grows at its end: inserted
/// in row order (random tokens), each chunk rewrote pages all over it, which cost a fan-out of 1,000,000 several
/// seconds of CPU. Other audiences (a tag, a topic, a user) are walked in row order along their own indexes.
public enum FanOutCursor: Sendable, Hashable {
    /// After this device row id (0: from the start).
    case id(Int64)
    /// After this token ("": from the start; no token is empty).
    case token(String)

    /// The two stored columns, `fanout_cursor` and `fanout_token`.
    public var stored: (id: Int64, token: String) {
        switch self {
        case .id(let id): (id, "")
        case .token(let t): (0, t)
        }
    }
}

extension Audience {
    /// A fan-out's audience as stored in `notifications.audience`, or nil when it cannot be read (damaged, or
    /// written by a later version). A key this version does not write makes it unreadable: a later version's
    /// narrowing (`{"all": true, "segment": …}`) read as the broader audience would reach devices it was not for.
    static func stored(_ text: String?) -> Audience? {
        guard let text, let json = try? JSONValue.parse(text), case .object(let keys) = json,
            let audience = Audience.read(json).0, case .object(let written) = audience.json,
            Set(keys.keys).isSubset(of: Set(written.keys))
        else { return nil }
        return audience
    }
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
