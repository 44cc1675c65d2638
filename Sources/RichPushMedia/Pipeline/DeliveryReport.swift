import RichPushCore

/// What the device did with a notification: attached, skipped and why, timings. An app can post it to the
/// server as a receipt (`json`).
public struct DeliveryReport: Sendable {
    public var notificationID: String?
    public var sources: [PayloadSource]
    public var attached: [StagedAttachment]
    public var skipped: [SkippedMedia]
    public var payloadProblems: [PayloadProblem]
    public var elapsedMilliseconds: Int
    /// True when the deadline (or the system's expiry call) ended processing before everything finished.
    public var deadlineHit: Bool
    /// What became of the receipt posted to the payload's receipt address (nil: there was none). A receipt is
    /// posted before the content is handed over, so the report it carries does not know its own outcome.
    public var receipt: ReceiptOutcome?

    public init(
        notificationID: String?,
        sources: [PayloadSource],
        attached: [StagedAttachment],
        skipped: [SkippedMedia],
        payloadProblems: [PayloadProblem],
        elapsedMilliseconds: Int,
        deadlineHit: Bool,
        receipt: ReceiptOutcome? = nil
    ) {
        self.notificationID = notificationID
        self.sources = sources
        self.attached = attached
        self.skipped = skipped
        self.payloadProblems = payloadProblems
        self.elapsedMilliseconds = elapsedMilliseconds
        self.deadlineHit = deadlineHit
        self.receipt = receipt
    }

    public var json: JSONValue {
        var o: [String: JSONValue] = [
            "attachments": .array(attached.map(\.json)), "skipped": .array(skipped.map(\.json)),
            "elapsed_ms": .int(Int64(elapsedMilliseconds)), "deadline_hit": .bool(deadlineHit),
            "sources": .array(sources.map { .string($0.rawValue) }),
        ]
        if let id = notificationID { o["notification_id"] = .string(id) }
        if let receipt { o["receipt"] = .string(receipt.description) }
        if !payloadProblems.isEmpty {
            o["payload_problems"] = .array(
                payloadProblems.map {
                    ["path": .string($0.path), "code": .string($0.code), "message": .string($0.message)]
                }
            )
        }
        return .object(o)
    }
}
