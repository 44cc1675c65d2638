import Foundation
import PostgresNIO
import RichPushCore

/// Webhook endpoints and events in the shared PostgreSQL database. Every node's sender claims endpoints here, so
/// one node at a time sends an endpoint's requests, and events are read in transaction order (``WebhookSQL``).
public final class PostgresWebhookStore: WebhookStore {
    let db: PostgresDatabase
    let secrets: WebhookSecrets

    init(db: PostgresDatabase, sealer: CredentialSealer?) {
        self.db = db
        secrets = WebhookSecrets(sealer: sealer)
    }

    public func create(_ endpoint: WebhookEndpoint) async throws -> WebhookEndpoint {
        let sealed = try secrets.seal(endpoint.secret)
        let logger = db.logger
        return try await db.transaction { c in
            // One creation at a time per app: the count below is then what the insert meets.
            _ = try await c.query(
                "SELECT pg_advisory_xact_lock(hashtext(\("webhooks:" + endpoint.appID)))",
                logger: logger
            )
            .collect()
            let n =
                try await c.query(WebhookSQL.count(appID: endpoint.appID).postgres, logger: logger).collect()
                .first?.decode(Int.self) ?? 0
            guard n < WebhookLimits.endpointsPerApp else { throw WebhookLimitReached() }
            var e = endpoint
            if let head = try await c.query(WebhookSQL.head(appID: e.appID, .postgresql).postgres, logger: logger)
                .collect().first
            {
                let (xid, seq) = try head.decode((Int64, Int64).self)
                e.cursor = WebhookCursor(xid: xid, seq: seq)
            }
            _ = try await c.query(WebhookSQL.insert(e, secret: sealed).postgres, logger: logger).collect()
            return e
        }
    }

    public func endpoints(appID: String) async throws -> [WebhookEndpoint] {
        try await db.rows(WebhookSQL.endpoints(appID: appID).postgres).map(endpoint)
    }

    public func endpoint(appID: String, id: String) async throws -> WebhookEndpoint? {
        try await db.rows(WebhookSQL.endpoint(appID: appID, id: id).postgres).first.map(endpoint)
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
        try await changes(
            WebhookSQL.rotate(
                appID: appID,
                id: id,
                sealed: try secrets.seal(secret),
                until: now.addingTimeInterval(WebhookLimits.secretOverlap)
            )
        )
    }

    public func replay(appID: String, id: String, from: Date, to: Date) async throws -> Bool {
        try await changes(WebhookSQL.replay(appID: appID, id: id, from: from, to: to))
    }

    public func append(_ events: [NewWebhookEvent], now: Date) async throws {
        guard !events.isEmpty else { return }
        let logger = db.logger
        try await db.transaction { c in
            for e in events { _ = try await c.query(WebhookSQL.append(e, now: now).postgres, logger: logger).collect() }
        }
    }

    public func claim(owner: String, now: Date, lease: TimeInterval, limit: Int) async throws -> [WebhookEndpoint] {
        let statement = WebhookSQL.claim(
            owner: owner,
            now: now,
            until: now.addingTimeInterval(lease),
            limit: limit,
            .postgresql
        )
        return try await db.rows(statement.postgres).map(endpoint)
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
            .postgresql
        )
        return try await db.rows(statement.postgres).map(Self.event)
    }

    public func replayEvents(
        appID: String,
        replay: WebhookReplay,
        limit: Int,
        hearing: WebhookEndpoint?
    )
        async throws -> [WebhookEvent]
    {
        let statement = WebhookSQL.replayEvents(
            appID: appID,
            replay: replay,
            limit: limit,
            hearing: hearing,
            .postgresql
        )
        return try await db.rows(statement.postgres).map(Self.event)
    }

    public func head(appID: String) async throws -> WebhookCursor? {
        try await db.rows(WebhookSQL.visibleHead(appID: appID, .postgresql).postgres).first.map {
            let (xid, seq) = try $0.decode((Int64, Int64).self)
            return WebhookCursor(xid: xid, seq: seq)
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
        _ = try await changes(
            WebhookSQL.fail(
                id: id,
                owner: owner,
                batchEnd: batchEnd,
                error: error,
                next: next,
                disable: disable,
                now: now
            )
        )
    }

    public func extend(id: String, owner: String, until: Date) async throws -> WebhookEndpoint? {
        try await db.rows(WebhookSQL.extend(id: id, owner: owner, until: until).postgres).first.map(endpoint)
    }

    /// One statement (an UPDATE … RETURNING), not the protocol's two: one round trip per acknowledged request.
    public func acknowledgeAndExtend(
        id: String,
        owner: String,
        cursor: WebhookCursor,
        now: Date,
        until: Date
    ) async throws -> WebhookEndpoint? {
        let statement = WebhookSQL.acknowledgeAndExtend(id: id, owner: owner, cursor: cursor, now: now, until: until)
        return try await db.rows(statement.postgres).first.map(endpoint)
    }

    public func release(id: String, owner: String) async throws {
        _ = try await changes(WebhookSQL.release(id: id, owner: owner))
    }

    public func stateCounts() async throws -> [String: Int] {
        Dictionary(try await db.rows(WebhookSQL.stateCounts.postgres).map { try $0.decode((String, Int).self) }) {
            $0 + $1
        }
    }

    public func sweep(before cutoff: Date, limit: Int) async throws -> Int {
        try await db.rows((WebhookSQL.sweep(before: cutoff, limit: limit) + " RETURNING 1").postgres).count
    }

    public func completeNotifications(now: Date, limit: Int) async throws -> Int {
        let due = try await db.rows(WebhookSQL.dueOpen(now: now, limit: limit).postgres).map {
            try $0.decode((String, String, Int).self)
        }
        let logger = db.logger
        var completed = 0
        for (notification, app, checks) in due {
            completed += try await db.transaction { c -> Int in
                let state = try await c.query(WebhookSQL.isComplete(notification).postgres, logger: logger).collect()
                    .first?.decode(Int.self)
                switch state {
                case nil:
                    _ = try await c.query(WebhookSQL.closed(notification).postgres, logger: logger).collect()
                    return 0
                case 0?:
                    let next = now.addingTimeInterval(WebhookCompletion.pause(afterChecks: checks + 1))
                    _ = try await c.query(WebhookSQL.later(notification, next: next).postgres, logger: logger)
                        .collect()
                    return 0
                default:
                    let counts = try await c.query(WebhookSQL.stateCounts(notification).postgres, logger: logger)
                        .collect().map { try $0.decode((String, Int).self) }
                    let event = NewWebhookEvent(
                        appID: app,
                        type: .notificationCompleted,
                        notificationID: notification,
                        detail: WebhookCompletion.detail(counts)
                    )
                    _ = try await c.query(WebhookSQL.append(event, now: now).postgres, logger: logger).collect()
                    _ = try await c.query(WebhookSQL.closed(notification).postgres, logger: logger).collect()
                    return 1
                }
            }
        }
        return completed
    }

    private func changes(_ statement: SQL) async throws -> Bool {
        try await !db.rows((statement + " RETURNING 1").postgres).isEmpty
    }

    func endpoint(_ row: PostgresRow) throws -> WebhookEndpoint {
        let r = row.makeRandomAccess()
        func cursor(_ x: Int, _ s: Int) throws -> WebhookCursor? {
            guard let xid = try r[x].decode(Int64?.self), let seq = try r[s].decode(Int64?.self) else { return nil }
            return WebhookCursor(xid: xid, seq: seq)
        }
        return try secrets.opened(
            WebhookEndpoint.Stored(
                id: try r[0].decode(String.self),
                appID: try r[1].decode(String.self),
                url: try r[2].decode(String.self),
                types: try r[3].decode(String.self),
                description: try r[4].decode(String.self),
                batchSize: try r[5].decode(Int.self),
                secret: try r[6].decode(String.self),
                previousSecret: try r[7].decode(String?.self),
                previousUntil: try r[8].decode(Date?.self),
                createdAt: try r[9].decode(Date.self),
                disabledAt: try r[10].decode(Date?.self),
                disabledReason: try r[11].decode(String?.self),
                failures: try r[12].decode(Int.self),
                failingSince: try r[13].decode(Date?.self),
                lastError: try r[14].decode(String?.self),
                lastAttemptAt: try r[15].decode(Date?.self),
                lastSuccessAt: try r[16].decode(Date?.self),
                nextAttemptAt: try r[17].decode(Date.self),
                cursor: try cursor(18, 19) ?? .start,
                batchEnd: try cursor(20, 21),
                replayFrom: try r[22].decode(Date?.self),
                replayTo: try r[23].decode(Date?.self),
                replayCursor: try cursor(24, 25)
            )
        )
    }

    static func event(_ row: PostgresRow) throws -> WebhookEvent {
        let r = row.makeRandomAccess()
        return WebhookEvent(
            seq: try r[0].decode(Int64.self),
            xid: try r[1].decode(Int64.self),
            appID: try r[2].decode(String.self),
            endpointID: try r[3].decode(String?.self),
            type: try r[4].decode(String.self),
            notificationID: try r[5].decode(String?.self),
            deliveryID: try r[6].decode(Int64?.self),
            provider: try r[7].decode(String?.self),
            target: try r[8].decode(String?.self),
            state: try r[9].decode(String?.self),
            reason: try r[10].decode(String?.self),
            providerID: try r[11].decode(String?.self),
            nextAt: try r[12].decode(Date?.self),
            detail: try r[13].decode(String?.self),
            createdAt: try r[14].decode(Date.self)
        )
    }
}
