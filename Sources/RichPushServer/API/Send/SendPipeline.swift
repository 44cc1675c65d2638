import Foundation
import Hummingbird
import RichPushCore

/// The steps every notification an app sends goes through, whichever route takes it (a send, an update of one, and
/// what comes next): its Idempotency-Key read; its media fetched and judged within the caller's quota; its id and
/// time to live given; its payload held to every push service's limits, with the receipt address when there is
/// room; its hosted media kept while a device may fetch it; and once stored, the bookkeeping of an accepted
/// notification. A field a send gains is read by `SendRequest` and carried by `PushMessage`: none of these steps
/// names one.
struct SendPipeline: Sendable {
    let media: MediaService?
    let quotas: Quotas
    let receipts: DeviceReceipts?
    let providers: Providers
    let validation: MessageValidator.Options
    let metrics: ServerMetrics
    let minutes: MinuteCounter
    let onAccepted: @Sendable (_ id: String, _ message: PushMessage) -> Void

    /// The request's `Idempotency-Key` (nil: none), held to 1 to 255 characters.
    static func idempotencyKey(_ request: Request) throws -> String? {
        let key = request.headers.first { $0.name.canonicalName == "idempotency-key" }?.value
        if let key, key.isEmpty || key.unicodeScalars.count > 255 {
            throw APIError(.invalidIdempotencyKey, "Idempotency-Key must be 1 to 255 characters")
        }
        return key
    }

    /// Media is fetched and judged before anything is stored: a refused media answers 422 naming it, and what the
    /// check noted becomes the answer's warnings. Only media fetched from another server takes a place in the
    /// quota: this server's own hosted media (judged from the store) and a URL whose kept verdict answers take
    /// none. The quota counted is the calling key's app's (none for the admin key).
    func prepareMedia(
        _ message: inout PushMessage,
        options: SendOptions,
        report: inout ValidationReport,
        context: AppRequestContext
    ) async throws {
        guard let media else { return }
        let fetches = media.fetchesNeeded(message, onFailure: options.onFailure, rehost: options.rehost)
        let caller = try context.requireAnyKey(.send)
        var prepared = message
        let (errors, notes) = try await quotas.fetching(app: caller, count: fetches) {
            await media.prepare(&prepared, onFailure: options.onFailure, rehost: options.rehost)
        }
        message = prepared
        guard errors.isEmpty else { throw APIError(.mediaRefused, "media failed the preflight check", issues: errors) }
        // Kept whole: a media note names the URL as written and as fetched (url, fetched).
        for var n in notes {
            n.severity = .warning
            report.issues.append(n)
        }
    }

    /// Gives the message its id, and fits it to every push service the audience may reach, with the device's
    /// receipt address (`rp.r`) when it is wanted and there is room. Returns when it expires (nil: never) and the
    /// last moment a device may act on it. Throws 422 (`invalid`, "`what` is not valid") naming each size problem.
    func fit(
        _ message: inout PushMessage,
        id: String,
        audience: Audience,
        options: SendOptions,
        report: inout ValidationReport,
        what: String
    ) throws -> (expiresAt: Date?, end: Date) {
        message.id = id
        let (expiresAt, end) = options.expiry(ttl: message.ttl)
        let problems = fitReceiptAddress(
            &message,
            id: id,
            audience: audience,
            until: end,
            wanted: options.receipts,
            into: &report
        )
        guard problems.isEmpty else { throw APIError(.invalid, "\(what) is not valid", issues: problems) }
        return (expiresAt, end)
    }

    /// Hosted media stays while a device may still fetch it.
    func keepMedia(_ message: PushMessage, until end: Date) async throws {
        try await media?.keep(message, until: end)
    }

    /// An accepted notification's bookkeeping: the sender keeps its message (its first deliveries need not read it
    /// back), and the minute counts and the metrics count its deliveries (the store that queued them told the
    /// workers: ``WorkQueued``).
    /// `queued` nil: a registry fan-out queues them later (and counts them then: see ``fannedOut(_:count:)``).
    func accepted(_ id: String, app: String, message: PushMessage, queued: Int?) {
        onAccepted(id, message)
        metrics.notificationAccepted(app: app, deliveries: queued ?? 0)
        guard let queued else { return }
        minutes.add(id, .accepted, count: queued)
    }

    /// A registry fan-out queued `count` deliveries of notification `id`.
    func fannedOut(_ id: String, count: Int) {
        minutes.add(id, .accepted, count: count)
        metrics.deliveriesEnqueued(count)
    }

    /// Puts the receipt address in the payload when it is wanted and every service's limits leave room for it; a
    /// payload without room goes without (a warning says so). Returns the size problems left, with or without it.
    func fitReceiptAddress(
        _ message: inout PushMessage,
        id: String,
        audience: Audience,
        until end: Date,
        wanted: Bool,
        into report: inout ValidationReport
    ) -> [ValidationIssue] {
        func sizes() -> [ValidationIssue] {
            providers.all.flatMap { $0.sizeIssues(message, audience: audience, now: validation.now) }
        }
        guard wanted, message.receiptURL == nil, let receipts, RichPushKey.isNeeded(for: message),
            let url = receipts.template(for: id, until: end.addingTimeInterval(DeviceReceipts.grace))
        else { return sizes() }
        message.receiptURL = url
        let withAddress = sizes()
        guard !withAddress.isEmpty else { return [] }
        message.receiptURL = nil
        let without = sizes()
        if without.isEmpty {
            report.add(
                "receipt_url",
                "no-room",
                "the payload has no room for the receipt address; this notification is sent without receipts",
                .warning
            )
        }
        return without
    }
}
