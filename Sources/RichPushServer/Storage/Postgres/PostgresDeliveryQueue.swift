import Foundation
import NIOConcurrencyHelpers
import PostgresNIO

/// The delivery queue in PostgreSQL, shared by every node: a claim locks the rows it takes with
/// `FOR UPDATE SKIP LOCKED`, so nodes claiming at once get disjoint batches without waiting for each other; a
/// claim's lease names the node (and worker) that holds it, and a lease that runs out (a node that died) is claimed
/// again by any node. Outcomes are settled a batch per statement.
public final class PostgresDeliveryQueue: DeliveryQueue {
    let db: PostgresDatabase
    /// Where this node's claims of each app ended (``ClaimMarks``).
    let marks = NIOLockedValueBox(ClaimMarks())

    public init(database: PostgresDatabase) { db = database }

    /// The columns a new delivery sets, in the order every insert gives them.

    @discardableResult
    public func enqueue(_ deliveries: [NewDelivery]) async throws -> Int {
        guard !deliveries.isEmpty else { return 0 }
        try await db.rows(Self.insert(deliveries))
        if let earliest = deliveries.map(\.notBefore).min() { marks.withLockedValue { $0.forget(ifPast: earliest) } }
        return deliveries.count
    }

    /// One statement for any number of new deliveries (columns as arrays, unnested by the server).
    static func insert(_ deliveries: [NewDelivery]) -> PostgresQuery {
        let expires = deliveries.map { $0.expiresAt?.timeIntervalSince1970 ?? -1 }
        return """
            INSERT INTO deliveries \(unescaped: Columns.deliveryInsert)
            SELECT n, a, p, t, 'queued', to_timestamp(nb), CASE WHEN e < 0 THEN NULL ELSE to_timestamp(e) END, now()
            FROM unnest(\(deliveries.map(\.notificationID))::text[], \(deliveries.map(\.appID))::text[], \(deliveries.map(\.provider.rawValue))::text[],
                \(deliveries.map(\.target.stored))::text[], \(deliveries.map { $0.notBefore.timeIntervalSince1970 })::float8[], \(expires)::float8[])
                AS u(n, a, p, t, nb, e)
            """
    }

    public func claim(
        owner: String,
        limit: Int,
        now: Date,
        lease: TimeInterval,
        rooms: ClaimRooms
    ) async throws -> [DeliveryRecord] {
        guard limit > 0 else { return [] }
        // A claim that took only expired deliveries says nothing of what is behind them: it looks again (an empty
        // answer would make the worker wait as if the queue were empty).
        for _ in 0..<100 {
            let from = marks.withLockedValue { $0.listed(at: now) }
            // Planned for the queue as it is now: the right plan for an empty queue reads all of a full one.
            let taken = try await db.executePlannedEachTime(
                PostgresStatements.Claim(
                    now: now,
                    limit: limit,
                    owner: owner,
                    until: now.addingTimeInterval(lease),
                    rooms: rooms,
                    marks: from
                )
            )
            marks.withLockedValue { $0.advance(past: taken) }
            let leased = taken.filter { $0.state == .leased }
            if !leased.isEmpty || taken.isEmpty {
                return leased.sorted { ($0.notBefore, $0.id) < ($1.notBefore, $1.id) }
            }
        }
        return []
    }

    /// Forgets where this node's claims ended: deliveries were queued that may sort before a mark.
    public func forgetClaimMarks() { marks.withLockedValue { $0.forgetAll() } }

    /// Deliveries were queued, none due before `earliest` (nil: not known, every mark goes): a mark past that time
    /// moves back to it, so that the next claim reads from there, over the few rows claimed since, not from the head.
    /// A millisecond is allowed for the database's rounding of a time to microseconds.
    public func pullBackClaimMarks(to earliest: Date?) {
        guard let earliest else { return forgetClaimMarks() }
        marks.withLockedValue { $0.pullBack(to: earliest.addingTimeInterval(-0.001)) }
    }

    /// Refreshes the planner's statistics of the deliveries (a plan read before autovacuum got to a new table would
    /// be a guess).
    public func analyze() async throws { _ = try await db.rows("ANALYZE deliveries") }

    /// How PostgreSQL runs one claim, measured: `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)` of the claim statement,
    /// with this node's marks as a claim at `now` would have them, in a transaction that is rolled back (nothing is
    /// claimed). The JSON plan, whose buffers say what the claim
    /// read.
    public func claimPlan(
        limit: Int,
        now: Date,
        lease: TimeInterval,
        rooms: ClaimRooms = .unbounded
    ) async throws
        -> String
    {
        struct RolledBack: Error { var plan: String }
        let statement = PostgresStatements.Claim(
            now: now,
            limit: limit,
            owner: "explain",
            until: now.addingTimeInterval(lease),
            rooms: rooms,
            marks: marks.withLockedValue { $0.listed(at: now) }
        )
        let bindings = try statement.makeBindings()
        do {
            _ = try await db.transaction { c -> Int in
                let rows = try await c.query(
                    PostgresQuery(
                        unsafeSQL: "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + PostgresStatements.Claim.sql,
                        binds: bindings
                    ),
                    logger: c.logger
                )
                var plan = ""
                for try await row in rows { plan += try row.decode(String.self) }
                throw RolledBack(plan: plan)
            }
        } catch let done as RolledBack {
            return done.plan
        }
        return ""
    }

    @discardableResult
    public func finish(id: Int64, owner: String, outcome: DeliveryOutcome, now: Date) async throws -> Bool {
        try await settle([Settlement(id: id, .finish(outcome))], owner: owner, now: now).contains(id)
    }

    @discardableResult
    public func reschedule(id: Int64, owner: String, notBefore: Date, reason: String, now: Date) async throws -> Bool {
        try await settle(
            [Settlement(id: id, .reschedule(notBefore: notBefore, reason: reason))],
            owner: owner,
            now: now
        ).contains(id)
    }

    /// Every outcome and new time of a batch in one statement; only rows `owner` still holds change.
    public func settle(_ items: [Settlement], owner: String, now: Date) async throws -> Set<Int64> {
        guard !items.isEmpty else { return [] }
        // A delivery queued again at a time a mark has passed would wait for the marks' turn: they go now.
        let requeued = items.lazy.compactMap { item -> Date? in
            switch item.action {
            case .finish: nil
            case .reschedule(let time, _), .release(let time, _): time
            }
        }
        if let earliest = requeued.min() { marks.withLockedValue { $0.forget(ifPast: earliest) } }
        var statement = PostgresStatements.Settle(now: now, owner: owner)
        for item in items {
            let (state, reason, providerID, at): (DeliveryState, String?, String?, Double)
            var back = false
            switch item.action {
            case .finish(let o): (state, reason, providerID, at) = (o.state, o.reason, o.providerID, -1)
            case let .reschedule(time, r):
                (state, reason, providerID, at) = (.queued, r, nil, time.timeIntervalSince1970)
            case let .release(time, r):
                (state, reason, providerID, at) = (.queued, r, nil, time.timeIntervalSince1970)
                back = true
            }
            statement.back.append(back)
            statement.ids.append(item.id)
            statement.states.append(state.rawValue)
            statement.reasons.append(reason ?? "")
            statement.hasReason.append(reason != nil)
            statement.providerIDs.append(providerID ?? "")
            statement.hasProviderID.append(providerID != nil)
            statement.times.append(at)
        }
        // Planned for the table as it is (a plan cached while it was empty would read all of it to find the rows).
        return Set(try await db.executePlannedEachTime(statement))
    }

    public func extend(_ ids: [Int64], owner: String, until: Date) async throws -> Set<Int64> {
        guard !ids.isEmpty else { return [] }
        return Set(try await db.executePlannedEachTime(PostgresStatements.Extend(until: until, ids: ids, owner: owner)))
    }

    public func counts() async throws -> [DeliveryState: Int] {
        try await Self.counts(db.rows("SELECT state, count(*) FROM deliveries GROUP BY state"))
    }

    public func counts(notificationID: String) async throws -> [DeliveryState: Int] {
        try await Self.counts(
            db.rows("SELECT state, count(*) FROM deliveries WHERE notification_id = \(notificationID) GROUP BY state")
        )
    }

    static func counts(_ rows: [PostgresRow]) throws -> [DeliveryState: Int] {
        var c: [DeliveryState: Int] = [:]
        for row in rows {
            let (state, n) = try row.decode((String, Int).self)
            if let s = DeliveryState(rawValue: state) { c[s] = n }
        }
        return c
    }

    public func deliveries(notificationID: String) async throws -> [DeliveryRecord] {
        try await db.rows(
            "SELECT \(unescaped: Columns.delivery) FROM deliveries WHERE notification_id = \(notificationID) ORDER BY id"
        ).map(Self.record)
    }

    public func deliveries(notificationID: String, after: Int64, limit: Int) async throws -> [DeliveryRecord] {
        try await db.rows(
            """
            SELECT \(unescaped: Columns.delivery) FROM deliveries WHERE notification_id = \(notificationID) AND id > \(after) ORDER BY id LIMIT \(max(0, limit))
            """
        ).map(Self.record)
    }

    static func record(_ row: PostgresRow) throws -> DeliveryRecord {
        let (
            id, notification, app, provider, target, state, attempts, notBefore, expires, owner, until, reason,
            providerID, updated
        ) =
            try row.decode(
                (
                    Int64, String, String, String, String, String, Int, Date, Date?, String?, Date?, String?, String?,
                    Date
                ).self
            )
        return DeliveryRecord(
            id: id,
            notificationID: notification,
            appID: app,
            provider: DeliveryProvider(rawValue: provider),
            target: DeliveryTarget(stored: target),
            state: DeliveryState(rawValue: state) ?? .queued,
            attempts: attempts,
            notBefore: notBefore,
            expiresAt: expires,
            leaseOwner: owner,
            leaseUntil: until,
            reason: reason,
            providerID: providerID,
            updatedAt: updated
        )
    }
}

/// Where a node's claims of each app ended: the `(not_before, id)` of the last due row taken, in the order the claim
/// reads them. The next claim of the app reads its due rows from there, an index condition: the entries of rows
/// already claimed stay at the head of each app's range of the due index, dead until a vacuum, and a read from the
/// head steps over all of them (at 150,000 claimed, about 1,100 index pages per claim, measured).
///
/// A row that sorts before a mark is not read while the mark stands: one queued again at its old time (a dead
/// node's lease given back by the leader), one a rolled-back claim of another node let go, one another node wrote
/// with a clock behind this one's. So the marks are forgotten every second (such a row waits a second at most), at
/// once when this node queues a delivery again at a time a mark has passed (a release, a reschedule), and whenever
/// deliveries are queued, on this node or another (the backend's ``WorkQueued`` tells the queue).
struct ClaimMarks: Sendable {
    typealias Listed = (apps: [String], times: [Date], ids: [Int64])
    /// How long marks are kept.
    static let life: TimeInterval = 1
    var byApp: [String: (notBefore: Date, id: Int64)] = [:]
    /// When the marks began (a claim's `now`).
    var since = Date.distantPast

    /// The marks for a claim at `now` (none once they are a second old, or when `now` went back).
    mutating func listed(at now: Date) -> Listed {
        if now.timeIntervalSince(since) >= Self.life || now < since {
            forgetAll()
            since = now
        }
        var out: Listed = ([], [], [])
        out.apps.reserveCapacity(byApp.count)
        for (app, mark) in byApp {
            out.apps.append(app)
            out.times.append(mark.notBefore)
            out.ids.append(mark.id)
        }
        return out
    }

    /// Moves each app's mark to the last row a claim took of it. A row taken from another node's abandoned
    /// leases may move it further than the due rows did: what it passes waits for the marks' turn.
    mutating func advance(past taken: [DeliveryRecord]) {
        for r in taken {
            if let m = byApp[r.appID], (m.notBefore, m.id) >= (r.notBefore, r.id) { continue }
            byApp[r.appID] = (r.notBefore, r.id)
        }
    }

    /// Moves every mark at or past `time` back to just before it: the rows due from `time` on are read again. (The
    /// notice of a send often arrives after the claims have taken it: forgetting every mark then sent the next claim
    /// through the whole dead head.)
    mutating func pullBack(to time: Date) {
        for (app, mark) in byApp where mark.notBefore >= time { byApp[app] = (time, 0) }
    }

    /// Forgets every mark when one has passed `time`.
    mutating func forget(ifPast time: Date) {
        if byApp.values.contains(where: { $0.notBefore >= time }) { forgetAll() }
    }

    mutating func forgetAll() { byApp.removeAll(keepingCapacity: true) }
}
