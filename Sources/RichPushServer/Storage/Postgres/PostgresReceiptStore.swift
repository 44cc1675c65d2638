import Foundation
import NIOConcurrencyHelpers
import PostgresNIO

/// Receipts in the shared PostgreSQL database: one `INSERT … SELECT` checks the delivery and writes the receipt,
/// with no lock on the notification (a flood of receipts holds nothing other requests wait on).
public final class PostgresReceiptStore: ReceiptStore {
    let db: PostgresDatabase

    init(db: PostgresDatabase) { self.db = db }

    public func record(_ r: DeliveryReceipt) async throws -> ReceiptRecording {
        // The receipt and its webhook event in one statement: the event's row reads the receipt just written.
        let event = WebhookSQL.ofDelivery(
            .receiptReceived,
            delivery: "(SELECT delivery_id FROM written)",
            detail: r.webhookDetail,
            now: Date()
        )
        let statement: SQL = """
            WITH written AS (
                INSERT INTO delivery_receipts
                    (delivery_id, notification_id, attachments, skipped, deadline_hit, elapsed_ms, received_at)
                SELECT d.id, d.notification_id, \(r.attachments), \(r.skipped.rawValue), \(r.deadlineHit ? 1 : 0),
                    \(r.elapsedMilliseconds), \(r.receivedAt)
                FROM deliveries d WHERE d.id = \(r.deliveryID) AND d.notification_id = \(r.notificationID)
                ON CONFLICT (delivery_id) DO NOTHING RETURNING delivery_id),
            told AS (\(event))
            SELECT 1 FROM written
            """
        let inserted = try await db.rows(statement.postgres)
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
        let event = WebhookSQL.ofDelivery(
            .open,
            delivery: "(SELECT delivery_id FROM written)",
            detail: o.webhookDetail,
            now: Date()
        )
        let statement: SQL =
            "WITH written AS (\(OpenSQL.record(o, returning: "delivery_id"))), told AS (\(event)) SELECT 1 FROM written"
        if try await !db.rows(statement.postgres).isEmpty { return .recorded }
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
