import Foundation
import PostgresNIO
import RichPushCore

/// Takes notifications in on PostgreSQL: a token, FCM topic or condition send is stored with its deliveries in one
/// transaction; a registry audience is stored with its fan-out pending, then run inside the database in chunks
/// (`INSERT … SELECT`, no device passes through the node), each chunk committing its progress.
///
/// A fan-out is held by one node at a time under a lease renewed by every chunk: should that node die, the lease
/// runs out and another node (the leader, or any node at start) resumes it exactly where it stopped.
public final class PostgresIntake: NotificationIntake {
    let db: PostgresDatabase
    let nodeID: String
    let chunk: Int
    /// How long a fan-out stays with a node that stopped renewing it.
    let fanOutLease: TimeInterval
    /// Called after a commit that queued deliveries, with the earliest time any of them is due (other nodes'
    /// workers are told).
    let queued: @Sendable (_ earliest: Date) -> Void

    public init(
        database: PostgresDatabase,
        nodeID: String,
        chunk: Int = 50_000,
        fanOutLease: TimeInterval = 60,
        queued: @escaping @Sendable (_ earliest: Date) -> Void = { _ in }
    ) {
        db = database
        self.nodeID = nodeID
        self.chunk = chunk
        self.fanOutLease = fanOutLease
        self.queued = queued
    }

    public func acceptAll(
        _ plans: [AcceptPlan],
        respond: @escaping @Sendable (Int, Int?) -> JSONValue
    ) async throws
        -> [Accepted]
    {
        // Registry audiences and token lookups go one by one (each is its own statement's work); the batch route
        // sends Live Activity tokens, whose notifications and deliveries are written here in one transaction.
        guard plans.allSatisfy({ $0.audience.directTargets != nil }) else {
            var all: [Accepted] = []
            for (i, plan) in plans.enumerated() { all.append(try await accept(plan, respond: { respond(i, $0) })) }
            return all
        }
        let statements = plans.enumerated().map { i, plan in
            var n = plan.notification
            let list = plan.audience.directTargets ?? []
            n.response = respond(i, list.count)
            return Self.acceptStatement(n, plan: plan, targets: list, fanOut: false)
        }
        let logger = db.logger
        let rows = try await db.transaction { c in
            var rows: [(Int64, Int64)] = []
            for s in statements {
                for try await row in try await c.execute(s, logger: logger) { rows.append(row) }
            }
            return rows
        }
        guard rows.count == plans.count else { throw DatabaseUnavailable("the accept statements answered too little") }
        var all: [Accepted] = []
        for (i, (created, queued)) in rows.enumerated() {
            if created == 1 {
                all.append(
                    Accepted(
                        notification: statements[i].notification,
                        created: true,
                        queued: Int(queued),
                        fanOutPending: false
                    )
                )
            } else {
                all.append(try await replayed(plans[i]))
            }
        }
        let times = all.indices.lazy.filter { all[$0].created && all[$0].queued > 0 }.map { plans[$0].notBefore }
        if let earliest = times.min() { self.queued(earliest) }
        return all
    }

    static func acceptStatement(
        _ n: StoredNotification,
        plan: AcceptPlan,
        targets list: [(DeliveryProvider, DeliveryTarget)],
        fanOut: Bool
    ) -> PostgresStatements.Accept {
        let step = Spread.step(plan.spread, count: list.count)
        let start = plan.notBefore.timeIntervalSince1970
        return PostgresStatements.Accept(
            notification: n,
            idempotencyKey: plan.idempotencyKey,
            fanOut: fanOut ? plan : nil,
            expiresAt: plan.expiresAt,
            providers: list.map(\.0.rawValue),
            targets: list.map(\.1.stored),
            due: list.indices.map { start + step * Double($0) }
        )
    }

    /// The app used this plan's idempotency key before: the first notification and its answer.
    func replayed(_ plan: AcceptPlan) async throws -> Accepted {
        let rows = try await db.rows(
            """
            SELECT \(unescaped: Columns.notification) FROM notifications
            WHERE app_id = \(plan.notification.appID) AND idempotency_key = \(plan.idempotencyKey)
            """
        )
        guard let row = rows.first else {
            throw DatabaseUnavailable("a notification's idempotency key was taken and then not found")
        }
        return Accepted(
            notification: try PostgresServerStore.notification(row),
            created: false,
            queued: 0,
            fanOutPending: false
        )
    }

    /// Two stand-ins for a count in an answer made before the count is known (``countTemplate(_:)``): no send
    /// reaches so many deliveries, and their digits are unlikely anywhere else in an answer.
    static let countMarks: (Int64, Int64) = (7_340_918_265_530_417, 8_451_029_376_641_528)

    /// The answer to store before the count is known, and the digits the database is to replace by the count (nil:
    /// the answer does not show it). Made with two stand-ins: the answer shows the count only where the two answers
    /// differ, and it is taken only when they differ at one place alone, where the first's digits stand (once in
    /// its bytes: the database replaces bytes too). Anything else (the digits in the caller's own text, the count
    /// shown twice or otherwise) is nil: the caller looks the devices up first.
    static func countTemplate(_ respond: (Int?) -> JSONValue) -> (answer: String, mark: String?)? {
        let (a, b) = (String(countMarks.0), String(countMarks.1))
        let first = respond(Int(countMarks.0)).jsonString
        let second = respond(Int(countMarks.1)).jsonString
        if first == second { return (first, nil) }
        guard let swapped = placing(b, in: first, for: a), Array(swapped.utf8) == Array(second.utf8) else { return nil }
        return (first, a)
    }

    /// `template` with `text` where the bytes of `mark` stand, when they stand there once (as the database's
    /// `replace` finds them); else nil.
    static func placing(_ text: String, in template: String, for mark: String) -> String? {
        var bytes = Array(template.utf8)
        let found = bytes.ranges(of: Array(mark.utf8))
        guard found.count == 1, let at = found.first else { return nil }
        bytes.replaceSubrange(at, with: text.utf8)
        return String(decoding: bytes, as: UTF8.self)
    }

    public func accept(_ plan: AcceptPlan, respond: @escaping @Sendable (Int?) -> JSONValue) async throws -> Accepted {
        var n = plan.notification
        var targets = plan.audience.directTargets
        if case .tokens(let tokens) = plan.audience {
            var seen = Set<String>()
            let wanted = tokens.filter { seen.insert($0).inserted }
            if let accepted = try await acceptRegistered(plan, tokens: wanted, respond: respond) { return accepted }
            targets = try await db.execute(PostgresStatements.DevicesByToken(appID: n.appID, tokens: wanted)).map {
                provider,
                token in
                (DeliveryProvider(rawValue: provider), DeliveryTarget.token(token))
            }
        }
        n.response = respond(targets?.count)
        // The notification and its deliveries in one statement; a registry audience with its fan-out pending.
        let statement = Self.acceptStatement(n, plan: plan, targets: targets ?? [], fanOut: targets == nil)
        guard let (created, queued) = try await db.execute(statement).first else {
            throw DatabaseUnavailable("the accept statement answered nothing")
        }
        // Not created: the app used this idempotency key before.
        guard created == 1 else { return try await replayed(plan) }
        if queued > 0 { self.queued(plan.notBefore) }
        return Accepted(notification: n, created: true, queued: Int(queued), fanOutPending: targets == nil)
    }

    /// A send to registered tokens in one round trip (``PostgresStatements/AcceptRegistered``): the devices are
    /// found, and their count put in the stored answer, by the database. Nil when the answer cannot be made that
    /// way (``countTemplate(_:)``): the caller looks the devices up first.
    func acceptRegistered(
        _ plan: AcceptPlan,
        tokens: [String],
        respond: @escaping @Sendable (Int?) -> JSONValue
    ) async throws -> Accepted? {
        var n = plan.notification
        guard let (template, mark) = Self.countTemplate(respond) else { return nil }
        let statement = PostgresStatements.AcceptRegistered(
            notification: n,
            idempotencyKey: plan.idempotencyKey,
            answer: template,
            countMark: mark,
            tokens: tokens,
            expiresAt: plan.expiresAt,
            start: plan.notBefore.timeIntervalSince1970,
            spread: plan.spread
        )
        guard let (created, queued) = try await db.execute(statement).first else {
            throw DatabaseUnavailable("the accept statement answered nothing")
        }
        guard created == 1 else { return try await replayed(plan) }
        if queued > 0 { self.queued(plan.notBefore) }
        n.response = respond(Int(queued))
        let stored = mark.flatMap { Self.placing(String(queued), in: template, for: $0) } ?? template
        if n.response.jsonString != stored {
            // An answer that put its count in place for both stand-ins and not for this count: none the API makes
            // (its answer is JSON with the count as a number). Stored again as made from the count.
            _ = try await db.rows("UPDATE notifications SET response = \(n.response.jsonString) WHERE id = \(n.id)")
        }
        return Accepted(notification: n, created: true, queued: Int(queued), fanOutPending: false)
    }

    public func completeFanOut(notificationID: String) async throws -> Int {
        // Taken unless another node holds it under a live lease.
        let rows = try await db.rows(
            """
            UPDATE notifications SET fanout_owner = \(nodeID), fanout_lease_until = now() + make_interval(secs => \(fanOutLease))
            WHERE id = \(notificationID) AND fanout_state = \(FanOutState.pending)
              AND (fanout_owner IS NULL OR fanout_owner = \(nodeID) OR fanout_lease_until < now())
            RETURNING app_id, audience, not_before, expires_at, spread, fanout_cursor, fanout_token, fanout_inserted,
                fanout_total
            """
        )
        guard let row = rows.first else { return 0 }
        let (appID, audienceText, notBefore, expiresAt, spread, storedID, storedToken, inserted, storedTotal) =
            try row.decode((String, String?, Date?, Date?, Double, Int64, String, Int, Int).self)
        // A stored audience this version cannot read (damaged, or written by a later one) reaches nobody, and its
        // fan-out is over (one that was not JSON threw, and was tried again without end).
        guard let audience = Audience.stored(audienceText),
            let filter = AudienceFilter.postgres(audience, appID: appID)
        else {
            let logger = db.logger
            try await db.transaction { c in
                _ = try await c.query(
                    """
                    UPDATE notifications SET fanout_state = \(FanOutState.done), fanout_owner = NULL WHERE id = \(notificationID)
                    """,
                    logger: logger
                ).collect()
                _ = try await c.query(
                    WebhookSQL.openWithoutDeliveries(notificationID, appID: appID, now: Date()).postgres,
                    logger: logger
                ).collect()
            }
            return 0
        }
        let cursor = filter.cursor(storedID: storedID, storedToken: storedToken)
        var total = storedTotal
        if spread > 0 && total == 0 {
            // Counted once and stored, so that a resumed fan-out keeps the same spacing.
            total =
                inserted
                + (try await PostgresDeviceRegistry(database: db).countInDatabase(
                    appID: appID,
                    audience: audience,
                    after: cursor
                ) ?? 0)
            try await db.rows("UPDATE notifications SET fanout_total = \(total) WHERE id = \(notificationID)")
        }
        return try await insertInChunks(
            notificationID: notificationID,
            appID: appID,
            audience: audience,
            notBefore: notBefore ?? Date(),
            expiresAt: expiresAt,
            step: Spread.step(spread, count: total),
            from: FanOutProgress(cursor: cursor, inserted: inserted),
            tracked: true
        ).added
    }

    public func pendingFanOuts() async throws -> [String] {
        try await db.rows(
            """
            SELECT id FROM notifications WHERE fanout_state = \(FanOutState.pending) AND (fanout_owner IS NULL OR fanout_lease_until < now()) ORDER BY created_at
            """
        ).map { try $0.decode(String.self) }
    }

    /// Where an in-database fan-out stands: the last device done (nil: none yet, the audience's own order) and how
    /// many deliveries so far.
    struct FanOutProgress: Sendable {
        var cursor: FanOutCursor?
        var inserted: Int
    }

    /// Inserts the audience's deliveries a chunk per transaction. With `tracked`, each chunk also records its
    /// progress with the notification and renews this node's lease on it; it stops (without error) when the lease
    /// was lost to another node.
    func insertInChunks(
        notificationID: String,
        appID: String,
        audience: Audience,
        notBefore: Date,
        expiresAt: Date?,
        step: TimeInterval,
        from start: FanOutProgress,
        tracked: Bool
    ) async throws -> (progress: FanOutProgress, added: Int) {
        guard let filter = AudienceFilter.postgres(audience, appID: appID) else { return (start, 0) }
        let job = ChunkedFanOut(
            notificationID: notificationID,
            appID: appID,
            filter: filter,
            notBefore: notBefore,
            expiresAt: expiresAt,
            step: step,
            tracked: tracked
        )
        var progress = start
        var addedHere = 0
        while true {
            let known = progress
            let (after, added, finished) = try await db.transaction { c in
                try await self.insertChunk(job, on: c, known: known)
            }
            if added > 0 { queued(notBefore) }
            addedHere += added
            progress = after
            if finished { return (progress, addedHere) }
        }
    }

    /// What every chunk of one fan-out inserts.
    struct ChunkedFanOut: Sendable {
        var notificationID: String
        var appID: String
        var filter: AudienceFilter
        var notBefore: Date
        var expiresAt: Date?
        /// Seconds between two deliveries' times (0: all due at `notBefore`).
        var step: TimeInterval
        /// Whether the progress is kept with the notification (a fan-out a node owns and another may resume).
        var tracked: Bool
    }

    /// One chunk, in its transaction: the progress (from the locked row when tracked), the chunk's last device,
    /// the insert, and the new progress; finished when no device is left or the notification is no longer ours.
    private func insertChunk(
        _ job: ChunkedFanOut,
        on c: PostgresConnection,
        known: FanOutProgress
    ) async throws -> (FanOutProgress, Int, Bool) {
        let logger = db.logger
        let id = job.notificationID
        var before = known
        if job.tracked {
            // The progress is read from the locked row, not remembered: two runs of one fan-out (a resume while the
            // first still runs) take turns and go on from each other's last chunk.
            let held = try await c.query(
                """
                SELECT fanout_cursor, fanout_token, fanout_inserted FROM notifications
                WHERE id = \(id) AND fanout_state = \(FanOutState.pending) AND fanout_owner = \(nodeID) FOR UPDATE
                """,
                logger: logger
            ).collect()
            guard let row = held.first else { return (known, 0, true) }
            let (storedID, storedToken, inserted) = try row.decode((Int64, String, Int).self)
            before = FanOutProgress(
                cursor: job.filter.cursor(storedID: storedID, storedToken: storedToken),
                inserted: inserted
            )
        }
        let cursor = before.cursor ?? job.filter.cursor(storedID: 0, storedToken: "")
        let last = try await c.query(job.filter.chunkEnd(after: cursor, limit: chunk).postgres, logger: logger)
            .collect().first
        let end: FanOutCursor? =
            switch cursor {
            case .id: try last?.decode(Int64?.self).map { .id($0) }
            case .token: try last?.decode(String?.self).map { .token($0) }
            }
        guard let end else {
            if job.tracked {
                _ = try await c.query(
                    """
                    UPDATE notifications SET fanout_state = \(FanOutState.done), fanout_owner = NULL, fanout_lease_until = NULL WHERE id = \(id)
                    """,
                    logger: logger
                ).collect()
                // Done in the same transaction: a fan-out that reached nobody is opened for notification.completed
                // (no settle will open it).
                _ = try await c.query(
                    WebhookSQL.openWithoutDeliveries(id, appID: job.appID, now: Date()).postgres,
                    logger: logger
                ).collect()
            }
            return (before, 0, true)
        }
        // In the walk's order (for a whole app, the deliveries' index's order); spread sends number the rows to
        // space them, the others are all due at once.
        let order = job.filter.order(of: cursor)
        let due: SQL =
            job.step > 0
            ? """
            \(job.notBefore)::timestamptz
                + ((\(Int64(before.inserted))::bigint + row_number() OVER (ORDER BY \(order)) - 1) * \(job.step)::float8)
                * interval '1 second'
            """
            : "\(job.notBefore)::timestamptz"
        let insert: SQL = """
            WITH added AS (
                INSERT INTO deliveries \(unescaped: Columns.deliveryInsert)
                SELECT \(id), d.app_id, d.provider, d.token, 'queued', \(due),
                    \(job.expiresAt)::timestamptz, now()
                FROM \(job.filter.from) WHERE \(job.filter.condition) AND \(job.filter.chunk(after: cursor, upTo: end))
                ORDER BY \(order)
                RETURNING 1)
            SELECT count(*) FROM added
            """
        let added = try await c.query(insert.postgres, logger: logger).collect().first?.decode(Int.self) ?? 0
        let next = FanOutProgress(cursor: end, inserted: before.inserted + added)
        if job.tracked {
            let (storedID, storedToken) = end.stored
            _ = try await c.query(
                """
                UPDATE notifications SET fanout_cursor = \(storedID), fanout_token = \(storedToken),
                    fanout_inserted = \(next.inserted),
                    fanout_lease_until = now() + make_interval(secs => \(fanOutLease))
                WHERE id = \(id)
                """,
                logger: logger
            ).collect()
        }
        return (next, added, false)
    }
}
