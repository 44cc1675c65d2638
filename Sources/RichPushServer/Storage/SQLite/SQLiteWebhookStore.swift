import Foundation
import GRDB
import RichPushCore

/// Webhook endpoints and events in the server's SQLite file (the queue's migrations create the tables: the settle
/// writes events beside the deliveries). Secrets are sealed as credentials are.
public final class SQLiteWebhookStore: WebhookStore {
    let pool: DatabasePool
    let secrets: WebhookSecrets

    init(pool: DatabasePool, sealer: CredentialSealer?) {
        self.pool = pool
        secrets = WebhookSecrets(sealer: sealer)
    }

    public func create(_ endpoint: WebhookEndpoint) async throws -> WebhookEndpoint {
        let sealed = try secrets.seal(endpoint.secret)
        return try await pool.write { db in
            guard
                try Int.fetchOne(db, query: WebhookSQL.count(appID: endpoint.appID)) ?? 0
                    < WebhookLimits.endpointsPerApp
            else { throw WebhookLimitReached() }
            var e = endpoint
            if let head = try Row.fetchAll(db, query: WebhookSQL.head(appID: e.appID, .sqlite)).first {
                e.cursor = WebhookCursor(xid: head[0], seq: head[1])
            }
            try db.execute(query: WebhookSQL.insert(e, secret: sealed))
            return e
        }
    }

    public func endpoints(appID: String) async throws -> [WebhookEndpoint] {
        // Decoded inside the read: a closure that returned rows (not Sendable) took GRDB's blocking read, and 16
        // such requests at once held every thread of the concurrency pool waiting for a reader (the node froze).
        try await pool.read { db in try Row.fetchAll(db, query: WebhookSQL.endpoints(appID: appID)).map(self.endpoint) }
    }

    public func endpoint(appID: String, id: String) async throws -> WebhookEndpoint? {
        try await pool.read { db in
            try Row.fetchAll(db, query: WebhookSQL.endpoint(appID: appID, id: id)).first.map(self.endpoint)
        }
    }

    public func update(_ endpoint: WebhookEndpoint) async throws -> Bool {
        try await changes(WebhookSQL.update(endpoint))
    }

    public func setEnabled(appID: String, id: String, enabled: Bool, now: Date) async throws -> Bool {
        // Enabling an endpoint that is not disabled changes nothing (its backoff stays).
        if enabled {
            _ = try await changes(WebhookSQL.enable(appID: appID, id: id, now: now))
        } else {
            _ = try await changes(WebhookSQL.disable(appID: appID, id: id, reason: "disabled by the app", now: now))
        }
        return try await endpoint(appID: appID, id: id) != nil
    }

    public func remove(appID: String, id: String) async throws -> Bool {
        try await changes(WebhookSQL.remove(appID: appID, id: id))
    }

    public func rotateSecret(appID: String, id: String, secret: String, now: Date) async throws -> Bool {
        let statement = WebhookSQL.rotate(
            appID: appID,
            id: id,
            sealed: try secrets.seal(secret),
            until: now.addingTimeInterval(WebhookLimits.secretOverlap)
        )
        return try await changes(statement)
    }

    public func replay(appID: String, id: String, from: Date, to: Date) async throws -> Bool {
        try await changes(WebhookSQL.replay(appID: appID, id: id, from: from, to: to))
    }

    public func append(_ events: [NewWebhookEvent], now: Date) async throws {
        guard !events.isEmpty else { return }
        try await pool.write { db in for e in events { try db.execute(query: WebhookSQL.append(e, now: now)) } }
    }

    public func claim(owner: String, now: Date, lease: TimeInterval, limit: Int) async throws -> [WebhookEndpoint] {
        let statement = WebhookSQL.claim(
            owner: owner,
            now: now,
            until: now.addingTimeInterval(lease),
            limit: limit,
            .sqlite
        )
        return try await pool.write { db in try Row.fetchAll(db, kept: statement, self.endpoint) }
    }

    public func events(
        appID: String,
        after: WebhookCursor,
        through: WebhookCursor?,
        limit: Int,
        hearing: WebhookEndpoint?
    ) async throws -> [WebhookEvent] {
        let statement = WebhookSQL.events(
            appID: appID,
            after: after,
            through: through,
            limit: limit,
            hearing: hearing,
            .sqlite
        )
        return try await pool.read { db in try Row.fetchAll(db, kept: statement, Self.event) }
    }

    public func replayEvents(
        appID: String,
        replay: WebhookReplay,
        limit: Int,
        hearing: WebhookEndpoint?
    )
        async throws -> [WebhookEvent]
    {
        let statement = WebhookSQL.replayEvents(appID: appID, replay: replay, limit: limit, hearing: hearing, .sqlite)
        return try await pool.read { db in try Row.fetchAll(db, kept: statement, Self.event) }
    }

    public func head(appID: String) async throws -> WebhookCursor? {
        try await pool.read { db in
            try Row.fetchAll(db, kept: WebhookSQL.visibleHead(appID: appID, .sqlite)) {
                WebhookCursor(xid: $0[0], seq: $0[1])
            }.first
        }
    }

    public func acknowledge(id: String, owner: String, cursor: WebhookCursor, now: Date) async throws {
        _ = try await changes(WebhookSQL.acknowledge(id: id, owner: owner, cursor: cursor, now: now))
    }

    public func acknowledgeReplay(id: String, owner: String, cursor: WebhookCursor?, now: Date) async throws {
        _ = try await changes(WebhookSQL.acknowledgeReplay(id: id, owner: owner, cursor: cursor, now: now))
    }

    public func fail(
        id: String,
        owner: String,
        batchEnd: WebhookCursor?,
        error: String,
        next: Date,
        disable: String?,
        now: Date
    ) async throws {
        let statement = WebhookSQL.fail(
            id: id,
            owner: owner,
            batchEnd: batchEnd,
            error: error,
            next: next,
            disable: disable,
            now: now
        )
        _ = try await changes(statement)
    }

    public func extend(id: String, owner: String, until: Date) async throws -> WebhookEndpoint? {
        try await pool.write { db in
            try Row.fetchAll(db, kept: WebhookSQL.extend(id: id, owner: owner, until: until), self.endpoint).first
        }
    }

    public func acknowledgeAndExtend(
        id: String,
        owner: String,
        cursor: WebhookCursor,
        now: Date,
        until: Date
    ) async throws -> WebhookEndpoint? {
        let statement = WebhookSQL.acknowledgeAndExtend(id: id, owner: owner, cursor: cursor, now: now, until: until)
        return try await pool.write { db in try Row.fetchAll(db, kept: statement, self.endpoint).first }
    }

    public func release(id: String, owner: String) async throws {
        _ = try await changes(WebhookSQL.release(id: id, owner: owner))
    }

    public func stateCounts() async throws -> [String: Int] {
        try await pool.read { db in
            Dictionary(try Row.fetchAll(db, query: WebhookSQL.stateCounts).map { ($0[0] as String, $0[1] as Int) }) {
                $0 + $1
            }
        }
    }

    public func sweep(before cutoff: Date, limit: Int) async throws -> Int {
        try await pool.write { db in
            try db.execute(query: WebhookSQL.sweep(before: cutoff, limit: limit))
            return db.changesCount
        }
    }

    public func completeNotifications(now: Date, limit: Int) async throws -> Int {
        let due = try await pool.read { db in
            try Row.fetchAll(db, query: WebhookSQL.dueOpen(now: now, limit: limit)).map {
                ($0[0] as String, $0[1] as String, $0[2] as Int)
            }
        }
        var completed = 0
        for (notification, app, checks) in due {
            completed += try await pool.write { db -> Int in
                switch try Int.fetchOne(db, query: WebhookSQL.isComplete(notification)) {
                case nil:
                    try db.execute(query: WebhookSQL.closed(notification))
                    return 0
                case 0?:
                    let next = now.addingTimeInterval(WebhookCompletion.pause(afterChecks: checks + 1))
                    try db.execute(query: WebhookSQL.later(notification, next: next))
                    return 0
                default:
                    let counts = try Row.fetchAll(db, query: WebhookSQL.stateCounts(notification)).map {
                        ($0[0] as String, $0[1] as Int)
                    }
                    let event = NewWebhookEvent(
                        appID: app,
                        type: .notificationCompleted,
                        notificationID: notification,
                        detail: WebhookCompletion.detail(counts)
                    )
                    try db.execute(query: WebhookSQL.append(event, now: now))
                    try db.execute(query: WebhookSQL.closed(notification))
                    return 1
                }
            }
        }
        return completed
    }

    /// Runs one of the endpoints' updates (each a text of one shape: compiled once per connection and kept).
    private func changes(_ statement: SQL) async throws -> Bool {
        try await pool.write { db in
            try db.execute(kept: statement)
            return db.changesCount > 0
        }
    }

    func endpoint(_ row: Row) throws -> WebhookEndpoint {
        func date(_ i: Int) -> Date? { (row[i] as Double?).map { Date(timeIntervalSince1970: $0) } }
        func cursor(_ x: Int, _ s: Int) -> WebhookCursor? {
            guard let xid = row[x] as Int64?, let seq = row[s] as Int64? else { return nil }
            return WebhookCursor(xid: xid, seq: seq)
        }
        return try secrets.opened(
            WebhookEndpoint.Stored(
                id: row[0],
                appID: row[1],
                url: row[2],
                types: row[3],
                description: row[4],
                batchSize: row[5],
                secret: row[6],
                previousSecret: row[7],
                previousUntil: date(8),
                createdAt: date(9) ?? .distantPast,
                disabledAt: date(10),
                disabledReason: row[11],
                failures: row[12],
                failingSince: date(13),
                lastError: row[14],
                lastAttemptAt: date(15),
                lastSuccessAt: date(16),
                nextAttemptAt: date(17) ?? .distantPast,
                cursor: cursor(18, 19) ?? .start,
                batchEnd: cursor(20, 21),
                replayFrom: date(22),
                replayTo: date(23),
                replayCursor: cursor(24, 25)
            )
        )
    }

    static func event(_ row: Row) -> WebhookEvent {
        func date(_ i: Int) -> Date? { (row[i] as Double?).map { Date(timeIntervalSince1970: $0) } }
        return WebhookEvent(
            seq: row[0],
            xid: row[1],
            appID: row[2],
            endpointID: row[3],
            type: row[4],
            notificationID: row[5],
            deliveryID: row[6],
            provider: row[7],
            target: row[8],
            state: row[9],
            reason: row[10],
            providerID: row[11],
            nextAt: date(12),
            detail: row[13],
            createdAt: date(14) ?? .distantPast
        )
    }
}
