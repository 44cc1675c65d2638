import Foundation
import Hummingbird
import NIOCore
import RichPushCore

/// `/v1/apps/{app}/notifications`: the send path (validate, preflight media, store, queue, answer 202), the
/// outcomes, the list of past notifications, the app's own receipts, and (in sandbox mode) the simulated iPhone.
struct NotificationsController: AppRoutes {
    let backend: any StorageBackend
    var store: any ServerStore { backend.store }
    var registry: any DeviceRegistry { backend.registry }
    var queue: any DeliveryQueue { backend.queue }
    var intake: any NotificationIntake { backend.intake }
    let validation: MessageValidator.Options
    let maxBodyBytes: Int
    let maxTokensPerRequest: Int
    let metrics: ServerMetrics
    let fanOuts: BackgroundWork
    let onAccepted: @Sendable (_ id: String, _ message: PushMessage) -> Void
    let media: MediaService?
    let quotas: Quotas
    let liveBudget: RateLimiter?
    let counts: CountCaches
    let receipts: DeviceReceipts?
    let providers: Providers
    let simulate: (@Sendable (_ notificationID: String) async -> JSONValue?)?
    let insight: InsightStreams
    /// Each notification's counts and funnel, read at most once a second whatever the readers.
    let numbers: InsightCache
    let minutes: MinuteCounter
    let updateLimits: UpdateLimits
    /// The API keys' rate limiter: a batch of Live Activity updates spends one request per item.
    var keyLimiter: RateLimiter? = nil

    func addRoutes(to group: RouterGroup<APIRequestContext>) {
        let reading = group.app(.read, store: store)
        let sending = group.app(.send, store: store)
        let opening = group.app(.register, .send, store: store)
        reading.get("notifications", use: listNotifications)
        sending.post("notifications", use: send)
        reading.get("notifications/:id", use: outcomes)
        reading.get("notifications/:id/simulation", use: simulation)
        sending.post("notifications/:id/receipts", use: receipt)
        sending.post("notifications/:id/updates", use: update)
        sending.post("live/updates", use: liveUpdates)
        opening.post("notifications/:id/opens", use: appOpen)
        reading.get("notifications/:id/funnel", use: funnel)
        reading.get("notifications/:id/events", use: events)
        reading.get("insights", use: appInsights)
    }

    /// Accepts a notification: validates it, stores it with its deliveries (or a pending fan-out), and answers 202
    /// at once. A registry fan-out (all, user, tag, topic) runs after the answer and resumes after a crash.
    func send(_ request: Request, _ context: AppRequestContext) async throws -> Response {
        let app = context.app
        let (body, idempotency) = try await idempotentBody(request)
        let send = try SendRequest.decode(
            body,
            validation: validation,
            maxTokens: maxTokensPerRequest,
            now: Date()
        )
        var (message, report) = (send.message, send.report)
        var (audience, options) = (send.audience, send.options)
        if let live = send.live { audience = try await liveAudience(app: app, live) }
        if !options.dryRun { spendLiveBudget(&message, app: app, live: send.live, audience: audience, into: &report) }
        if !options.dryRun { report.issues += pipeline.credentialWarnings(app: app, audience: audience) }
        try await pipeline.prepareMedia(&message, options: options, report: &report, context: context)
        let id = UUID().uuidString.lowercased()
        let (expiresAt, end) = try pipeline.fit(
            &message,
            id: id,
            audience: audience,
            options: options,
            report: &report,
            what: "the notification"
        )
        // How many devices a registry audience reaches is a fact of the registry: read scope only (a send-only key
        // learns nothing of which users, tags or tokens exist, by a dry run or by a send's answer).
        let showsReach = (audience.directTargets != nil && send.live == nil) || mayReadRegistry(context)
        if options.dryRun {
            return try await dryRunAnswer(
                app: app,
                message: message,
                audience: audience,
                warnings: report.warnings,
                showsReach: showsReach
            )
        }
        try await pipeline.keepMedia(message, until: end)
        let warnings = JSONValue.array(report.warnings.map(\.json))
        let plan = AcceptPlan(
            notification: .init(id: id, appID: app.id, message: message.json, response: .null, createdAt: Date()),
            idempotencyKey: idempotency.key,
            audience: audience,
            notBefore: options.notBefore,
            expiresAt: expiresAt,
            spread: options.spread
        )
        let accepted = try await intake.accept(plan) { queued in
            idempotency.stored([
                "id": .string(id), "status": "accepted", "warnings": warnings,
                "deliveries": showsReach ? (queued.map { .int(Int64($0)) } ?? .null) : .null,
            ])
        }
        // a replay answers as the first time did
        guard accepted.created else { return try idempotency.answer(accepted.notification.response, replay: true) }
        let pipeline = self.pipeline
        pipeline.accepted(id, app: app.id, message: message, queued: accepted.fanOutPending ? nil : accepted.queued)
        if accepted.fanOutPending {
            let (intake, metrics) = (intake, metrics)
            fanOuts.run(
                {
                    let count = try await intake.completeFanOut(notificationID: id)
                    pipeline.fannedOut(id, count: count)
                },
                onFailure: { _ in metrics.fanOutFailed() }
            )
        }
        return try idempotency.answer(accepted.notification.response, replay: false)
    }

    /// A Live Activity audience as the tokens registered for it, read once: more than a request may name belongs
    /// on a broadcast channel (refused, live-audience-too-large).
    func liveAudience(app: ServerApp, _ live: LiveAudience) async throws -> Audience {
        // The registered tokens, read once: more than a request may name belongs on a broadcast channel.
        let tokens = try await backend.liveTokens.tokens(
            appID: app.id,
            audience: live,
            limit: maxTokensPerRequest + 1
        )
        guard tokens.count <= maxTokensPerRequest else {
            var r = ValidationReport()
            r.add(
                "audience",
                "live-audience-too-large",
                "more than \(maxTokensPerRequest) tokens: send to a large audience on a broadcast channel (audience.apns_channel)"
            )
            throw APIError(.invalid, "the notification is not valid", issues: r.errors)
        }
        return .providerTokens(apns: tokens, fcm: [])
    }

    /// The request's body with its Idempotency-Key and the body's fingerprint.
    func idempotentBody(_ request: Request) async throws -> (JSONValue, IdempotentRequest) {
        let body = try await bodyJSON(request)
        return (body, try SendPipeline.idempotency(request, body: body))
    }

    /// The notification the path's `id` names, when it is the app's (another app's answers as one that does not exist).
    func requireNotification(_ context: AppRequestContext) async throws -> (String, StoredNotification) {
        guard let id = context.parameters.get("id"), let n = try await store.notification(id: id),
            n.appID == context.app.id
        else { throw APIError(.notFound, "no such notification") }
        return (id, n)
    }

    /// The steps a send shares with an update (and what comes next).
    var pipeline: SendPipeline {
        SendPipeline(
            media: media,
            quotas: quotas,
            receipts: receipts,
            providers: providers,
            validation: validation,
            metrics: metrics,
            minutes: minutes,
            onAccepted: onAccepted
        )
    }

    /// A priority-10 Live Activity update (APNs' default) spends from its activity's (or channel's) hourly budget;
    /// past it the update goes at priority 5, and the answer warns (`live-budget`). Dry runs spend nothing.
    func spendLiveBudget(
        _ message: inout PushMessage,
        app: ServerApp,
        live: LiveAudience?,
        audience: Audience,
        into report: inout ValidationReport
    ) {
        guard let budget = liveBudget, message.liveActivity != nil, message.priority != .normal else { return }
        let key: String
        switch (live, audience) {
        case (.activity(let id)?, _): key = "\(app.id)|activity|\(id)"
        case (_, .apnsChannel(let id)): key = "\(app.id)|channel|\(id)"
        default: return
        }
        guard budget.check(key) != nil else { return }
        message.priority = .normal
        report.add(
            "priority",
            "live-budget",
            "this activity's \(Int(budget.burst)) priority-10 updates an hour are spent: this one goes at priority 5",
            .warning
        )
    }

    /// The page of deliveries a `GET` of a notification lists: `after` a delivery id (0: from the start), at most
    /// `limit` (1 to 1000, default 1000).
    struct OutcomesPage {
        var after: Int64 = 0
        var limit = 1000

        init(query: Parameters) throws {
            after = try ListQuery.after(query)
            if let l = query.get("limit") {
                guard let n = Int(l), (1...1000).contains(n) else {
                    throw APIError(.invalid, "limit is a whole number from 1 to 1000")
                }
                limit = n
            }
        }
    }

    func outcomes(_ request: Request, _ context: AppRequestContext) async throws -> OutcomesReply {
        let (id, stored) = try await requireNotification(context)
        let page = try OutcomesPage(query: request.uri.queryParameters)
        // Counted in the database and read a page at a time: a poll of a million-device send reads no million rows.
        let tally = try await numbers.tally(id)
        let byState = tally.byState
        // Deliveries are listed in id order: a page starts after the last id of the one before. One more than the
        // page is read to know whether another follows.
        let read = try await queue.deliveries(notificationID: id, after: page.after, limit: page.limit + 1)
        let shown = read.prefix(page.limit)
        var reply = OutcomesReply(
            id: id,
            title: stored.message["alert"]?["title"]?.stringValue ?? stored.message["title"]?.stringValue,
            createdAt: stored.createdAt.timeIntervalSince1970,
            total: byState.values.reduce(0, +),
            counts: Dictionary(uniqueKeysWithValues: byState.map { ($0.key.rawValue, $0.value) }),
            fanningOut: tally.fanningOut,
            deliveries: shown.map {
                .init(
                    target: $0.target.stored,
                    provider: $0.provider.rawValue,
                    state: $0.state.rawValue,
                    attempts: $0.attempts,
                    reason: $0.reason,
                    meaning: $0.reason.flatMap(DeliveryReasons.meaning),
                    providerID: $0.providerID,
                    updatedAt: $0.updatedAt.timeIntervalSince1970,
                    nextAttemptAt: $0.state == .queued ? $0.notBefore.timeIntervalSince1970 : nil
                )
            },
            // What devices reported, in sum: the same few numbers however many reported.
            receipts: try await backend.receipts.summary(notificationID: id).json
        )
        if read.count > page.limit, let last = shown.last { reply.nextAfter = last.id }
        // Updates in place: which version this is, and the newest of its family.
        if let f = try await backend.updates.family(of: id), f.version > 0 || f.latest > 0 {
            reply.rootID = f.rootID
            reply.version = f.version
            reply.latestVersion = f.latest
        }
        return reply
    }

    /// `GET /v1/apps/{app}/notifications?before=&limit=`: newest first, with each one's counts by state.
    func listNotifications(_ request: Request, _ context: AppRequestContext) async throws -> Response {
        let app = context.app
        let query = request.uri.queryParameters
        let limit = try ListQuery.limit(query)
        var before: Double?
        if let b = query.get("before") {
            // Seconds since 1970, as `next_before` gives them; held to a range before any conversion.
            guard let t = Double(b), t.isFinite, (0...4_102_444_800).contains(t) else {
                throw APIError(
                    .invalid,
                    "before is seconds since 1970 (a next_before from the page before)"
                )
            }
            // Kept as the number given: a Date made from it may not give the same number back, and the page's
            // last notification would then be listed again on the next page.
            before = t
        }
        let found = try await store.notifications(appID: app.id, before: before, limit: limit)
        var items: [JSONValue] = []
        for n in found {
            let counts = try await numbers.counts(n.id)
            let message = n.message
            var item: [String: JSONValue] = [
                "id": .string(n.id), "created_at": .double(n.createdAt.timeIntervalSince1970),
                "counts": .object(
                    Dictionary(uniqueKeysWithValues: counts.map { ($0.key.rawValue, JSONValue.int(Int64($0.value))) })
                ),
                "total": .int(Int64(counts.values.reduce(0, +))),
            ]
            let alert = message["alert"]
            if let title = alert?["title"]?.stringValue ?? message["title"]?.stringValue {
                item["title"] = .string(title)
            }
            if let body = alert?["body"]?.stringValue ?? alert?.stringValue ?? message["body"]?.stringValue {
                item["body"] = .string(body)
            }
            items.append(.object(item))
        }
        var body: [String: JSONValue] = ["notifications": .array(items)]
        if found.count == limit, let last = found.last {
            body["next_before"] = .double(last.createdAt.timeIntervalSince1970)
        }
        return Response.json(200, .object(body))
    }

    /// `GET /v1/apps/{app}/notifications/{id}/simulation` (sandbox mode): the device library run on what the APNs
    /// emulator received for this notification: what the iPhone shows, attaches and skips, and why.
    func simulation(_ request: Request, _ context: AppRequestContext) async throws -> Response {
        guard let simulate else {
            throw APIError(.notFound, "the simulated iPhone runs in sandbox mode only")
        }
        let (_, n) = try await requireNotification(context)
        guard let result = await simulate(n.id) else {
            throw APIError(
                .notFound,
                "the APNs emulator has not received this notification (yet)"
            )
        }
        return Response.json(200, result)
    }

    /// A device's delivery report (RichPushMedia's `DeliveryReport.json`), posted by the app with a `send` key and
    /// the device's token: bound to that token's delivery like a device's own report.
    func receipt(_ request: Request, _ context: AppRequestContext) async throws -> EditedResponse<Recorded> {
        let (id, _) = try await requireNotification(context)
        let body = try ReceiptBody.decode(try await bodyJSON(request), byApp: true)
        // The device named by its token must be one this notification was sent to; its first report stands.
        guard let delivery = try await backend.receipts.delivery(notificationID: id, target: body.from ?? "") else {
            throw APIError(.notFound, "this notification was not sent to that token")
        }
        let receipt = DeliveryReceipt(deliveryID: delivery, notificationID: id, report: body.report)
        switch try await backend.receipts.record(receipt) {
        case .recorded:
            minutes.add(id, .received)
            return Recorded().created
        case .repeated: throw APIError(.alreadyReported, "this delivery already has its report")
        case .notDelivered: throw APIError(.notFound, "this notification was not sent to that token")
        case .notAccepted(let state): throw ReceiptsController.notAccepted(state)
        }
    }
}
