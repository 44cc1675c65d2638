import Crypto
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

    /// Warnings for the services the audience may reach that the app holds no credentials for (outside sandbox
    /// mode their deliveries fail `<service>_not_configured`). Targets named outright (tokens, an FCM topic or
    /// condition, a channel) are known, and each service they use is named. Which services a registry audience's
    /// devices use is not known before the fan-out: it is warned about when the app holds credentials for none of
    /// them (an app given none yet) or, with `counts` (a dry run that counted the devices), for each service with
    /// devices in it.
    func credentialWarnings(
        app: ServerApp,
        audience: Audience,
        counts: [DeliveryProvider: Int]? = nil
    ) -> [ValidationIssue] {
        let missing = providers.all.compactMap { p in
            p.missingCredentials(for: app, audience: audience).map { (p.id, $0) }
        }
        guard !missing.isEmpty else { return [] }
        if let counts { return missing.filter { counts[$0.0, default: 0] > 0 }.map(\.1) }
        if !audience.mayUseWebPush { return missing.map(\.1) }
        let blank = ServerApp(id: app.id, name: app.name, bundleID: app.bundleID, fcmProjectID: nil)
        let needed = providers.all.filter { $0.missingCredentials(for: blank, audience: audience) != nil }.count
        return missing.count >= needed ? missing.map(\.1) : []
    }

    /// The request's `Idempotency-Key` with the fingerprint of its body (nil key: none).
    static func idempotency(_ request: Request, body: JSONValue) throws -> IdempotentRequest {
        IdempotentRequest(key: try idempotencyKey(request), body: body)
    }

    /// The request's `Idempotency-Key` (nil: none), held to 1 to 255 characters.
    static func idempotencyKey(_ request: Request) throws -> String? {
        let key = request.headers.first { $0.name.canonicalName == "idempotency-key" }?.value
        if let key, key.isEmpty || key.unicodeScalars.count > 255 {
            throw APIError(.invalidIdempotencyKey, "Idempotency-Key must be 1 to 255 characters")
        }
        // Control characters are kept out (HTTP's parsers refuse most anyway): a batch's items are stored under
        // keys joined by one (``NotificationsController/itemKey(_:_:)``).
        if let key, key.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) {
            throw APIError(.invalidIdempotencyKey, "Idempotency-Key must hold no control characters")
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

/// An `Idempotency-Key` and the fingerprint of the request it came with, as the IETF draft describes them
/// (draft-ietf-httpapi-idempotency-key-header-07, §2.4 "Idempotency Fingerprint": a checksum of the payload; here the
/// SHA-256 of the JSON body as read, keys sorted, so that spacing and key order do not count). The first answer is
/// stored with the fingerprint in a member of its own; a repeat with the same body gets the first answer, and a
/// repeat with another body is refused with 422 (§2.7 "Error Scenarios"), where it used to get the first answer
/// silently. Answers stored before fingerprints were kept have none, and are replayed as they were.
struct IdempotentRequest: Sendable {
    /// The member of the stored answer that holds the fingerprint; never sent.
    static let member = "_request_sha256"
    let key: String?
    let fingerprint: String

    /// The fingerprint is made only for a request that has a key: a send without one pays nothing for it.
    init(key: String?, body: JSONValue) {
        self.key = key
        fingerprint = key == nil ? "" : SHA256.hash(data: body.serialized()).map { String(format: "%02x", $0) }.joined()
    }

    /// The answer to store: with the fingerprint when a key will replay it.
    func stored(_ answer: JSONValue) -> JSONValue {
        guard key != nil, case .object(var o) = answer else { return answer }
        o[Self.member] = .string(fingerprint)
        return .object(o)
    }

    /// The answer to send (202) from the stored one; a replay whose first request had another body is refused.
    func answer(_ stored: JSONValue, replay: Bool) throws -> Response {
        Response.json(202, try shown(stored, replay: replay))
    }

    /// The stored answer without its fingerprint; a replay whose first request had another body is refused.
    func shown(_ stored: JSONValue, replay: Bool) throws -> JSONValue {
        guard case .object(var o) = stored else { return stored }
        let first = o.removeValue(forKey: Self.member)
        if replay, let first, first != .string(fingerprint) {
            throw APIError(
                .idempotencyKeyReused,
                "this Idempotency-Key was used with another body: a new request needs a new key",
                issues: [
                    ValidationIssue(
                        path: "Idempotency-Key",
                        rule: "idempotency-key-reused",
                        message:
                            "the key's first request had another body (draft-ietf-httpapi-idempotency-key-header §2.7); resend that body to get its answer, or use a new key"
                    )
                ]
            )
        }
        return .object(o)
    }
}
