import Foundation
import NIOConcurrencyHelpers

/// The in-memory twin: receipts checked against the memory queue's deliveries, answering as the others do.
public final class MemoryReceiptStore: ReceiptStore {
    let queue: MemoryDeliveryQueue
    private let receipts = NIOLockedValueBox<[Int64: DeliveryReceipt]>([:])
    private let opens = NIOLockedValueBox<[Int64: DeliveryOpen]>([:])
    private let minutes = NIOLockedValueBox<[MinuteCount]>([])

    init(queue: MemoryDeliveryQueue) { self.queue = queue }

    public func record(_ r: DeliveryReceipt) async throws -> ReceiptRecording {
        guard let d = await queue.deliveries(notificationID: r.notificationID).first(where: { $0.id == r.deliveryID })
        else { return .notDelivered }
        let recording = receipts.withLockedValue { (all) -> ReceiptRecording in
            guard all[r.deliveryID] == nil else { return .repeated }
            all[r.deliveryID] = r
            return .recorded
        }
        if recording == .recorded { queue.webhooks?.ofDelivery(.receiptReceived, d, detail: r.webhookDetail) }
        return recording
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
        let recording = opens.withLockedValue { (all) -> ReceiptRecording in
            guard all[o.deliveryID] == nil else { return .repeated }
            all[o.deliveryID] = o
            return .recorded
        }
        if recording == .recorded { queue.webhooks?.ofDelivery(.open, d, detail: o.webhookDetail) }
        return recording
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

    /// Drops the counts of notifications that are gone (a deletion's late flushes).
    func removeMinutes(keeping: (String) -> Bool) {
        minutes.withLockedValue { $0.removeAll { !keeping($0.notificationID) } }
    }

    func remove(notificationID: String) {
        receipts.withLockedValue { $0 = $0.filter { $0.value.notificationID != notificationID } }
        opens.withLockedValue { $0 = $0.filter { $0.value.notificationID != notificationID } }
        minutes.withLockedValue { $0.removeAll { $0.notificationID == notificationID } }
    }
}
