import Foundation
import RichPushCore

/// What one device reported about one delivery, as kept: a few numbers and a set of reasons from a closed list,
/// whatever the report's size. One per delivery; the first stands.
public struct DeliveryReceipt: Sendable, Hashable {
    public var deliveryID: Int64
    public var notificationID: String
    /// Files the device attached (0 to ``DeviceReceipts/maxAttachments``).
    public var attachments: Int
    /// Why media was skipped, each reason once.
    public var skipped: SkipReasons
    /// The extension's deadline ended the work before everything finished.
    public var deadlineHit: Bool
    /// How long the device worked on it, held to 0...600,000 ms.
    public var elapsedMilliseconds: Int
    public var receivedAt: Date

    public init(
        deliveryID: Int64,
        notificationID: String,
        attachments: Int,
        skipped: SkipReasons,
        deadlineHit: Bool,
        elapsedMilliseconds: Int,
        receivedAt: Date = Date()
    ) {
        self.deliveryID = deliveryID
        self.notificationID = notificationID
        self.attachments = max(0, min(attachments, DeviceReceipts.maxAttachments))
        self.skipped = skipped
        self.deadlineHit = deadlineHit
        self.elapsedMilliseconds = max(0, min(elapsedMilliseconds, 600_000))
        self.receivedAt = receivedAt
    }

    /// The receipt a device's report (the device library's `DeliveryReport.json`, already checked for shape)
    /// makes for a delivery.
    public init(deliveryID: Int64, notificationID: String, report: JSONValue, receivedAt: Date = Date()) {
        let reasons = (report["skipped"]?.arrayValue ?? []).compactMap { $0["reason"]?.stringValue }
        let elapsed = report["elapsed_ms"]?.doubleValue ?? 0
        self.init(
            deliveryID: deliveryID,
            notificationID: notificationID,
            attachments: report["attachments"]?.arrayValue?.count ?? 0,
            skipped: SkipReasons(codes: reasons),
            deadlineHit: report["deadline_hit"]?.boolValue ?? false,
            // A number from outside: held to its range before it becomes an Int.
            elapsedMilliseconds: elapsed.isFinite ? Int(max(0, min(elapsed, 600_000))) : 0,
            receivedAt: receivedAt
        )
    }
}

/// The reasons a device skipped media, from the device library's closed list (`SkipReason.code`); a code outside
/// it counts as `other`. Kept as the bits of one integer.
public struct SkipReasons: OptionSet, Sendable, Hashable {
    public let rawValue: Int64
    public init(rawValue: Int64) { self.rawValue = rawValue }

    /// The codes, in bit order. New codes go at the end: stored bits keep their meaning.
    public static let codes = [
        "bad-url", "insecure-url", "unsupported-scheme", "http-status", "too-many-redirects", "redirect-loop",
        "insecure-redirect", "too-large", "unsupported-type", "unknown-type", "empty-body", "timed-out", "deadline",
        "network", "staging-failed", "attachment-limit", "system-refused", "other",
    ]

    public init(codes: [String]) {
        var bits: Int64 = 0
        for code in codes {
            let index = Self.codes.firstIndex(of: code) ?? (Self.codes.count - 1)
            bits |= 1 << Int64(index)
        }
        rawValue = bits
    }

    /// The codes set, in list order.
    public var list: [String] { Self.codes.indices.filter { rawValue & (1 << Int64($0)) != 0 }.map { Self.codes[$0] } }
}

/// A notification's receipts in sum: the same few numbers however many devices reported.
public struct ReceiptSummary: Sendable, Hashable {
    public var count = 0
    public var withMedia = 0
    public var deadlineHit = 0
    /// Reports that skipped media for each reason (a report counts once per reason).
    public var skipped: [String: Int] = [:]

    public init(count: Int = 0, withMedia: Int = 0, deadlineHit: Int = 0, skipped: [String: Int] = [:]) {
        self.count = count
        self.withMedia = withMedia
        self.deadlineHit = deadlineHit
        self.skipped = skipped.filter { $0.value > 0 }
    }

    public var json: JSONValue {
        [
            "count": .int(Int64(count)), "with_media": .int(Int64(withMedia)), "deadline_hit": .int(Int64(deadlineHit)),
            "skipped_reasons": .object(skipped.mapValues { .int(Int64($0)) }),
        ]
    }
}

/// What became of a receipt.
public enum ReceiptRecording: Sendable, Hashable {
    case recorded
    /// The delivery already has its receipt; the first stands.
    case repeated
    /// No such delivery of this notification (a forged or mistaken delivery id, or one removed meanwhile).
    case notDelivered
    /// The delivery exists but the push service has not accepted it (it failed, expired, was pruned or superseded,
    /// or is still queued or being sent): an open of a notification no device was given is not counted.
    case notAccepted(DeliveryState)
}

/// Receipts, one per delivery, in the database that holds the deliveries: checked against the delivery and written
/// in one statement that locks nothing another request waits on.
public protocol ReceiptStore: Sendable {
    /// Records a receipt for its delivery, unless the delivery is not this notification's or already has one.
    func record(_ receipt: DeliveryReceipt) async throws -> ReceiptRecording
    /// The notification's receipts in sum.
    func summary(notificationID: String) async throws -> ReceiptSummary
    /// The delivery of a notification to a target (the app's own report names its device token).
    func delivery(notificationID: String, target: String) async throws -> Int64?
    /// Records what a person did with a delivery, unless it is not this notification's, the push service did not
    /// accept it (``ReceiptRecording/notAccepted(_:)``), or it already has one.
    func recordOpen(_ open: DeliveryOpen) async throws -> ReceiptRecording
    /// The notification's opens in sum.
    func openSummary(notificationID: String) async throws -> OpenSummary
    /// The notification's deliveries by state, reason and whether they were tried (the funnel's first stages).
    func breakdown(notificationID: String) async throws -> [DeliveryBreakdown]
    /// Opens per 10 minutes (the start of each, in seconds since 1970, and the count), the newest 288 (two days).
    func openTimeline(notificationID: String) async throws -> [(start: Int64, opens: Int)]
    /// Adds counts per notification and minute (one transaction).
    func addMinutes(_ counts: [MinuteCount]) async throws
    /// An app's counts per hour since `since`, and its most common failure reasons (at most 10).
    func appHours(appID: String, since: Date) async throws -> (hours: [AppHour], failures: [(String, Int)])
}

extension ReceiptSummary {
    /// The summary's SQL columns: count, with media, deadline hit, then one count per skip reason, in code order.
    static var columns: String {
        // BIGINT, read the same by both databases (PostgreSQL's SUM of a bigint is numeric without the cast).
        let sums =
            ["CASE WHEN attachments > 0 THEN 1 ELSE 0 END", "deadline_hit"]
            + SkipReasons.codes.indices.map { "(skipped >> \($0)) & 1" }
        return (["CAST(COUNT(*) AS BIGINT)"] + sums.map { "CAST(COALESCE(SUM(\($0)), 0) AS BIGINT)" })
            .joined(separator: ", ")
    }

    /// A summary from the values of ``columns``.
    init(values: [Int]) {
        var skipped: [String: Int] = [:]
        for (i, code) in SkipReasons.codes.enumerated() where values.indices.contains(i + 3) {
            skipped[code] = values[i + 3]
        }
        self.init(
            count: values.first ?? 0,
            withMedia: values.count > 1 ? values[1] : 0,
            deadlineHit: values.count > 2 ? values[2] : 0,
            skipped: skipped
        )
    }
}
