import Foundation
import RichPushCore

/// What became of one notification, stage by stage: accepted (a delivery queued), sent (a request made to the
/// service), accepted by the service, received on the device (the extension's report), media shown (the report
/// attached a file) and opened (the app's report), each with its count, its share of the stage before and of
/// those accepted, and why the ones that stopped there stopped. Read from counts the database keeps grouped (the
/// deliveries by state and reason, the receipts and opens in sum): the same few rows however large the send.
public struct Funnel: Sendable, Hashable {
    public struct Stage: Sendable, Hashable {
        public var name: String
        public var count: Int
        /// Why those of the stage before did not reach this one, with how many (the most first; at most
        /// ``Funnel/maxReasons``, the rest as `other`).
        public var drops: [String: Int]
    }

    public var stages: [Stage]
    public var dismissed: Int
    public var actions: [String: Int]
    /// Opens by the deep link they led to (``OpenSummary/links``).
    public var links: [String: Int]

    public static let maxReasons = 20
    public static let names = ["accepted", "sent", "provider_accepted", "received", "media_shown", "opened"]

    public init(breakdown: [DeliveryBreakdown], receipts: ReceiptSummary, opens: OpenSummary) {
        let accepted = breakdown.reduce(0) { $0 + $1.count }
        let sent = breakdown.filter(\.tried).reduce(0) { $0 + $1.count }
        let delivered = breakdown.filter { $0.state == .delivered }.reduce(0) { $0 + $1.count }
        var notSent: [String: Int] = [:]
        var refused: [String: Int] = [:]
        for b in breakdown where b.state != .delivered {
            if !b.tried {
                // Not tried yet, or never: waiting in the queue, replaced by a newer version, past its TTL.
                let why = b.state == .queued || b.state == .leased ? "waiting" : b.state.rawValue
                notSent[why, default: 0] += b.count
            } else {
                let why: String
                switch b.state {
                case .queued, .leased: why = "retrying"
                default: why = b.reason.isEmpty ? b.state.rawValue : b.reason
                }
                refused[why, default: 0] += b.count
            }
        }
        let received = receipts.count
        let shown = receipts.withMedia
        var noMedia = receipts.skipped
        let skippedReports = noMedia.values.reduce(0, +)
        if received - shown > skippedReports { noMedia["no media"] = received - shown - skippedReports }
        var notOpened: [String: Int] = [:]
        if opens.dismissed > 0 { notOpened["dismissed"] = opens.dismissed }
        let untouched = delivered - opens.opened - opens.dismissed
        if untouched > 0 { notOpened["not opened (yet)"] = untouched }
        stages = [
            Stage(name: "accepted", count: accepted, drops: [:]),
            Stage(name: "sent", count: sent, drops: Self.bounded(notSent)),
            Stage(name: "provider_accepted", count: delivered, drops: Self.bounded(refused)),
            Stage(
                name: "received",
                count: received,
                drops: delivered > received ? ["no report from the device": delivered - received] : [:]
            ),
            Stage(name: "media_shown", count: shown, drops: Self.bounded(noMedia)),
            Stage(name: "opened", count: opens.opened, drops: notOpened),
        ]
        dismissed = opens.dismissed
        actions = opens.actions
        links = opens.links
    }

    /// The most common reasons, the rest summed as `other`.
    static func bounded(_ reasons: [String: Int]) -> [String: Int] {
        let sorted = reasons.filter { $0.value > 0 }.sorted { ($0.value, $1.key) > ($1.value, $0.key) }
        var out: [String: Int] = [:]
        for (i, (k, v)) in sorted.enumerated() {
            if i < maxReasons { out[k, default: 0] += v } else { out["other", default: 0] += v }
        }
        return out
    }

    /// A share with four decimals, nil when there was nothing to share.
    static func rate(_ part: Int, _ whole: Int) -> Double? {
        whole > 0 ? (Double(part) / Double(whole) * 10_000).rounded() / 10_000 : nil
    }

    public var json: JSONValue {
        let accepted = stages.first?.count ?? 0
        var list: [JSONValue] = []
        for (i, s) in stages.enumerated() {
            var o: [String: JSONValue] = [
                "stage": .string(s.name), "count": .int(Int64(s.count)),
                "drops": .object(s.drops.mapValues { .int(Int64($0)) }),
            ]
            let previous = i == 0 ? nil : stages[i - 1].count
            o["rate"] = previous.flatMap { Self.rate(s.count, $0) }.map(JSONValue.double) ?? .null
            o["of_accepted"] = Self.rate(s.count, accepted).map(JSONValue.double) ?? .null
            list.append(.object(o))
        }
        return [
            "stages": .array(list), "dismissed": .int(Int64(dismissed)),
            "actions": .object(actions.mapValues { .int(Int64($0)) }),
            "links": .object(links.mapValues { .int(Int64($0)) }),
        ]
    }

    /// One line per stage, then one per drop reason: `stage,count,rate,of_accepted,reason,dropped`.
    public var csv: String {
        let accepted = stages.first?.count ?? 0
        var lines = ["stage,count,rate,of_accepted,reason,dropped"]
        func cell(_ d: Double?) -> String { d.map { String(format: "%.4f", $0) } ?? "" }
        for (i, s) in stages.enumerated() {
            let previous = i == 0 ? nil : stages[i - 1].count
            let base =
                "\(s.name),\(s.count),\(cell(previous.flatMap { Self.rate(s.count, $0) })),\(cell(Self.rate(s.count, accepted)))"
            lines.append(base + ",,")
            for (reason, n) in s.drops.sorted(by: { ($0.value, $1.key) > ($1.value, $0.key) }) {
                lines.append(base + "," + Self.csvField(reason) + ",\(n)")
            }
        }
        return lines.joined(separator: "\r\n") + "\r\n"
    }

    /// A field quoted when it holds a comma, a quote or a line break (RFC 4180), and a leading `=`, `+`, `-` or
    /// `@` defused, so a spreadsheet does not read a reason as a formula.
    static func csvField(_ s: String) -> String {
        var v = s
        if let f = v.first, "=+-@".contains(f) { v = "'" + v }
        guard v.contains(where: { ",\"\r\n".contains($0) }) else { return v }
        return "\"" + v.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
}
