import Foundation
import GRDB
import NIOConcurrencyHelpers
import PostgresNIO

/// Receipts in the server's SQLite file, beside the deliveries they belong to. Writes go through the group commit
/// the other stores use: a flood of receipts shares transactions instead of queueing one each.
public final class SQLiteReceiptStore: ReceiptStore {
    let pool: DatabasePool
    let commits: GroupCommit

    /// Expects the server store's migrations (``SQLiteServerStore``), which create the table.
    init(pool: DatabasePool) {
        self.pool = pool
        commits = GroupCommit(pool: pool)
    }

    public func record(_ r: DeliveryReceipt) async throws -> ReceiptRecording {
        try await commits.write { db in
            let owner = try String.fetchOne(
                db,
                sql: "SELECT notification_id FROM deliveries WHERE id = ?",
                arguments: [r.deliveryID]
            )
            guard owner == r.notificationID else { return .notDelivered }
            try db.cachedStatement(
                sql: """
                    INSERT INTO delivery_receipts
                        (delivery_id, notification_id, attachments, skipped, deadline_hit, elapsed_ms, received_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (delivery_id) DO NOTHING
                    """
            ).execute(arguments: [
                r.deliveryID, r.notificationID, r.attachments, r.skipped.rawValue, r.deadlineHit ? 1 : 0,
                r.elapsedMilliseconds, r.receivedAt.timeIntervalSince1970,
            ])
            return db.changesCount == 1 ? .recorded : .repeated
        }
    }

    public func summary(notificationID: String) async throws -> ReceiptSummary {
        try await pool.read { db in
            let row = try Row.fetchOne(
                db,
                sql: "SELECT \(ReceiptSummary.columns) FROM delivery_receipts WHERE notification_id = ?",
                arguments: [notificationID]
            )
            return ReceiptSummary(values: row.map { r in (0..<r.count).map { r[$0] as Int } } ?? [])
        }
    }

    public func recordOpen(_ o: DeliveryOpen) async throws -> ReceiptRecording {
        try await commits.write { db in
            if try !Row.fetchAll(db, query: OpenSQL.record(o)).isEmpty { return .recorded }
            return OpenSQL.refusal(
                state: try String.fetchOne(db, query: OpenSQL.deliveryState(o.deliveryID, of: o.notificationID))
            )
        }
    }

    public func openSummary(notificationID: String) async throws -> OpenSummary {
        try await pool.read { db in
            let links = try Row.fetchAll(db, query: OpenSQL.links(notificationID))
            return OpenSummary(
                rows: try Row.fetchAll(db, query: OpenSQL.summary(notificationID)).map {
                    ($0[0] as String, $0[1] as String, $0[2] as Int)
                },
                topLinks: links.map { ($0[0] as String, $0[1] as Int) },
                linked: links.first.map { $0[2] as Int } ?? 0
            )
        }
    }

    public func addMinutes(_ counts: [MinuteCount]) async throws {
        guard !counts.isEmpty else { return }
        try await pool.write { db in for c in counts { try db.execute(query: MinuteSQL.add(c)) } }
    }

    public func appHours(appID: String, since: Date) async throws -> (hours: [AppHour], failures: [(String, Int)]) {
        let minute = Int64(max(0, since.timeIntervalSince1970) / 60)
        return try await pool.read { db in
            let rows = try Row.fetchAll(db, query: MinuteSQL.hours(appID: appID, sinceMinute: minute)).map {
                ($0[0] as Int64, $0[1] as String, $0[2] as Int)
            }
            let failures = try Row.fetchAll(db, query: MinuteSQL.failures(appID: appID, sinceMinute: minute)).map {
                ($0[0] as String, $0[1] as Int)
            }
            return (AppHour.grouped(rows), failures)
        }
    }

    public func openTimeline(notificationID: String) async throws -> [(start: Int64, opens: Int)] {
        try await pool.read { db in
            try Row.fetchAll(db, query: OpenSQL.timeline(notificationID, postgres: false)).map {
                (start: $0[0] as Int64, opens: $0[1] as Int)
            }.reversed()
        }
    }

    public func breakdown(notificationID: String) async throws -> [DeliveryBreakdown] {
        try await pool.read { db in
            try Row.fetchAll(db, query: OpenSQL.breakdown(notificationID)).compactMap { row in
                DeliveryState(rawValue: row[0]).map {
                    DeliveryBreakdown(state: $0, reason: row[1], tried: (row[2] as Int) == 1, count: row[3])
                }
            }
        }
    }

    public func delivery(notificationID: String, target: String) async throws -> Int64? {
        try await pool.read { db in
            try Int64.fetchOne(
                db,
                sql: "SELECT id FROM deliveries WHERE notification_id = ? AND target = ? ORDER BY id LIMIT 1",
                arguments: [notificationID, target]
            )
        }
    }
}

/// Receipts in the shared PostgreSQL database: one `INSERT … SELECT` checks the delivery and writes the receipt,
/// with no lock on the notification (a flood of receipts holds nothing other requests wait on).
public final class PostgresReceiptStore: ReceiptStore {
    let db: PostgresDatabase

    init(db: PostgresDatabase) { self.db = db }

    public func record(_ r: DeliveryReceipt) async throws -> ReceiptRecording {
        let inserted = try await db.rows(
            """
            INSERT INTO delivery_receipts
                (delivery_id, notification_id, attachments, skipped, deadline_hit, elapsed_ms, received_at)
            SELECT d.id, d.notification_id, \(r.attachments), \(r.skipped.rawValue), \(r.deadlineHit ? 1 : 0),
                \(r.elapsedMilliseconds), \(r.receivedAt)
            FROM deliveries d WHERE d.id = \(r.deliveryID) AND d.notification_id = \(r.notificationID)
            ON CONFLICT (delivery_id) DO NOTHING RETURNING 1
            """
        )
        if !inserted.isEmpty { return .recorded }
        let existing = try await db.rows(
            "SELECT 1 FROM delivery_receipts WHERE delivery_id = \(r.deliveryID) AND notification_id = \(r.notificationID)"
        )
        return existing.isEmpty ? .notDelivered : .repeated
    }

    public func summary(notificationID: String) async throws -> ReceiptSummary {
        let rows = try await db.rows(
            "SELECT \(unescaped: ReceiptSummary.columns) FROM delivery_receipts WHERE notification_id = \(notificationID)"
        )
        guard let row = rows.first else { return ReceiptSummary() }
        var values: [Int] = []
        for cell in row { values.append(Int(try cell.decode(Int64.self))) }
        return ReceiptSummary(values: values)
    }

    public func recordOpen(_ o: DeliveryOpen) async throws -> ReceiptRecording {
        if try await !db.rows(OpenSQL.record(o).postgres).isEmpty { return .recorded }
        return OpenSQL.refusal(
            state: try await db.rows(OpenSQL.deliveryState(o.deliveryID, of: o.notificationID).postgres).first?
                .decode(String.self)
        )
    }

    public func openSummary(notificationID: String) async throws -> OpenSummary {
        let links = try await db.rows(OpenSQL.links(notificationID).postgres).map {
            try $0.decode((String, Int, Int).self)
        }
        return OpenSummary(
            rows: try await db.rows(OpenSQL.summary(notificationID).postgres).map {
                try $0.decode((String, String, Int).self)
            },
            topLinks: links.map { ($0.0, $0.1) },
            linked: links.first?.2 ?? 0
        )
    }

    public func addMinutes(_ counts: [MinuteCount]) async throws {
        guard !counts.isEmpty else { return }
        let logger = db.logger
        // In a fixed order, so that two nodes adding to the same rows take their locks alike (no deadlock).
        let sorted = counts.sorted {
            ($0.notificationID, $0.minute, $0.kind.rawValue, $0.reason) < (
                $1.notificationID, $1.minute, $1.kind.rawValue, $1.reason
            )
        }
        try await db.transaction { c in
            for m in sorted { _ = try await c.query(MinuteSQL.add(m).postgres, logger: logger).collect() }
        }
    }

    public func appHours(appID: String, since: Date) async throws -> (hours: [AppHour], failures: [(String, Int)]) {
        let minute = Int64(max(0, since.timeIntervalSince1970) / 60)
        let rows = try await db.rows(MinuteSQL.hours(appID: appID, sinceMinute: minute).postgres).map {
            try $0.decode((Int64, String, Int).self)
        }
        let failures = try await db.rows(MinuteSQL.failures(appID: appID, sinceMinute: minute).postgres).map {
            try $0.decode((String, Int).self)
        }
        return (AppHour.grouped(rows), failures)
    }

    public func openTimeline(notificationID: String) async throws -> [(start: Int64, opens: Int)] {
        try await db.rows(OpenSQL.timeline(notificationID, postgres: true).postgres).map {
            let (b, n) = try $0.decode((Int64, Int).self)
            return (start: b, opens: n)
        }.reversed()
    }

    public func breakdown(notificationID: String) async throws -> [DeliveryBreakdown] {
        try await db.rows(OpenSQL.breakdown(notificationID).postgres).compactMap { row in
            let (state, reason, tried, count) = try row.decode((String, String, Int, Int).self)
            return DeliveryState(rawValue: state).map {
                DeliveryBreakdown(state: $0, reason: reason, tried: tried == 1, count: count)
            }
        }
    }

    public func delivery(notificationID: String, target: String) async throws -> Int64? {
        try await db.rows(
            """
            SELECT id FROM deliveries WHERE notification_id = \(notificationID) AND target = \(target) ORDER BY id LIMIT 1
            """
        ).first?.decode(Int64.self)
    }
}

/// The in-memory twin: receipts checked against the memory queue's deliveries, answering as the others do.
public final class MemoryReceiptStore: ReceiptStore {
    let queue: MemoryDeliveryQueue
    private let receipts = NIOLockedValueBox<[Int64: DeliveryReceipt]>([:])
    private let opens = NIOLockedValueBox<[Int64: DeliveryOpen]>([:])
    private let minutes = NIOLockedValueBox<[MinuteCount]>([])

    init(queue: MemoryDeliveryQueue) { self.queue = queue }

    public func record(_ r: DeliveryReceipt) async throws -> ReceiptRecording {
        let owned = await queue.deliveries(notificationID: r.notificationID).contains { $0.id == r.deliveryID }
        guard owned else { return .notDelivered }
        return receipts.withLockedValue {
            guard $0[r.deliveryID] == nil else { return .repeated }
            $0[r.deliveryID] = r
            return .recorded
        }
    }

    public func summary(notificationID: String) async throws -> ReceiptSummary {
        let mine = receipts.withLockedValue { $0.values.filter { $0.notificationID == notificationID } }
        var skipped: [String: Int] = [:]
        for r in mine { for code in r.skipped.list { skipped[code, default: 0] += 1 } }
        return ReceiptSummary(
            count: mine.count,
            withMedia: mine.filter { $0.attachments > 0 }.count,
            deadlineHit: mine.filter(\.deadlineHit).count,
            skipped: skipped
        )
    }

    public func delivery(notificationID: String, target: String) async throws -> Int64? {
        await queue.deliveries(notificationID: notificationID).filter { $0.target.stored == target }.map(\.id).min()
    }

    public func recordOpen(_ o: DeliveryOpen) async throws -> ReceiptRecording {
        guard let d = await queue.deliveries(notificationID: o.notificationID).first(where: { $0.id == o.deliveryID })
        else { return .notDelivered }
        guard d.state == .delivered else { return .notAccepted(d.state) }
        return opens.withLockedValue {
            guard $0[o.deliveryID] == nil else { return .repeated }
            $0[o.deliveryID] = o
            return .recorded
        }
    }

    public func openSummary(notificationID: String) async throws -> OpenSummary {
        // One row per open: the summary groups them as the databases' GROUP BY would; the links as their query.
        let mine = opens.withLockedValue { $0.values.filter { $0.notificationID == notificationID } }
        var byLink: [String: Int] = [:]
        for o in mine { if let l = o.link { byLink[l, default: 0] += 1 } }
        let top = byLink.sorted { ($0.value, $1.key) > ($1.value, $0.key) }.prefix(OpenSummary.maxActions)
        return OpenSummary(
            rows: mine.map { ($0.event.rawValue, $0.action ?? "", 1) },
            topLinks: top.map { ($0.key, $0.value) },
            linked: byLink.values.reduce(0, +)
        )
    }

    public func addMinutes(_ counts: [MinuteCount]) async throws {
        minutes.withLockedValue { $0 += counts }
    }

    public func appHours(appID: String, since: Date) async throws -> (hours: [AppHour], failures: [(String, Int)]) {
        let minute = Int64(max(0, since.timeIntervalSince1970) / 60)
        var apps: [String: String] = [:]
        var sums: [String: Int] = [:]
        var failures: [String: Int] = [:]
        for m in minutes.withLockedValue({ $0 }) where m.minute >= minute {
            if apps[m.notificationID] == nil {
                apps[m.notificationID] = await queue.deliveries(notificationID: m.notificationID).first?.appID ?? ""
            }
            guard apps[m.notificationID] == appID else { continue }
            sums["\(m.minute / 60 * 3600)|\(m.kind.rawValue)", default: 0] += m.count
            if m.kind == .failed { failures[m.reason, default: 0] += m.count }
        }
        let rows = sums.map { key, n -> (Int64, String, Int) in
            let parts = key.split(separator: "|")
            return (Int64(parts[0]) ?? 0, String(parts[1]), n)
        }
        let top = failures.sorted { ($0.value, $1.key) > ($1.value, $0.key) }.prefix(10).map { ($0.key, $0.value) }
        return (AppHour.grouped(rows), Array(top))
    }

    public func openTimeline(notificationID: String) async throws -> [(start: Int64, opens: Int)] {
        var buckets: [Int64: Int] = [:]
        for o in opens.withLockedValue({ $0.values.filter { $0.notificationID == notificationID } })
        where o.event == .opened {
            buckets[Int64(o.at.timeIntervalSince1970 / 600) * 600, default: 0] += 1
        }
        return buckets.sorted { $0.key < $1.key }.suffix(288).map { (start: $0.key, opens: $0.value) }
    }

    public func breakdown(notificationID: String) async throws -> [DeliveryBreakdown] {
        var counts: [DeliveryBreakdown: Int] = [:]
        for d in await queue.deliveries(notificationID: notificationID) {
            counts[
                DeliveryBreakdown(state: d.state, reason: d.reason ?? "", tried: d.attempts > 0, count: 0),
                default: 0
            ] += 1
        }
        return counts.map { key, n in
            var b = key
            b.count = n
            return b
        }
    }

    func remove(notificationID: String) {
        receipts.withLockedValue { $0 = $0.filter { $0.value.notificationID != notificationID } }
        opens.withLockedValue { $0 = $0.filter { $0.value.notificationID != notificationID } }
        minutes.withLockedValue { $0.removeAll { $0.notificationID == notificationID } }
    }
}
