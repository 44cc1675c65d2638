import Foundation
import GRDB
import NIOConcurrencyHelpers

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
            guard db.changesCount == 1 else { return .repeated }
            try db.execute(
                query: WebhookSQL.ofDelivery(
                    .receiptReceived,
                    delivery: "\(r.deliveryID)",
                    detail: r.webhookDetail,
                    now: Date()
                )
            )
            return .recorded
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
            if try !Row.fetchAll(db, query: OpenSQL.record(o)).isEmpty {
                try db.execute(
                    query: WebhookSQL.ofDelivery(
                        .open,
                        delivery: "\(o.deliveryID)",
                        detail: o.webhookDetail,
                        now: Date()
                    )
                )
                return .recorded
            }
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
        // One text whatever the counts: compiled once per connection (each call compiled it: a Live Activity update
        // is a notification of its own, and its minutes were written by a statement compiled anew).
        try await pool.write { db in for c in counts { try db.execute(kept: MinuteSQL.add(c)) } }
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
