import Foundation
import Hummingbird
import RichPushCore

/// `POST /v1/apps/{app}/live/updates`: many Live Activities updated (or ended) in one request, each its own state.
///
/// A backend that tracks thousands of orders sends their states in a few requests instead of one each. Every item is
/// the body of a send to one activity (`audience.live_activity` with the message's `live_activity`) and becomes its
/// own notification, as that send would: the same checks, the same hourly budget per activity, the same answer
/// fields. The items are checked first, all of them (a problem names the item: `items[3].live_activity.event`);
/// one bad item refuses the request and nothing is stored. Then the activities' tokens are read in one query and
/// every notification is written with its deliveries in one transaction.
///
/// Each item counts as a request against the key's rate limit: a batch of N spends N (the first was spent when the
/// key was checked), so a batch never lets a key send more than its single requests would.
extension NotificationsController {
    /// The most items one request may carry.
    static let maxLiveUpdates = 1000
    /// The body's bound on this route (a state may be up to 4 KB; most are a few hundred bytes).
    static let maxLiveUpdatesBytes = 1 << 20

    func liveUpdates(_ request: Request, _ context: AppRequestContext) async throws -> Response {
        let app = context.app
        let body = try await bodyJSON(request, upTo: Self.maxLiveUpdatesBytes)
        let idempotency = try SendPipeline.idempotency(request, body: body)
        let items = try Self.liveItems(body)
        try spendItems(items.count, request)
        let now = Date()
        var sends: [SendRequest] = []
        var activities: [ExactText] = []
        var seen = Set<ExactText>()
        var problems: [ValidationIssue] = []
        // Read until every item is read or the answer holds as many problems as it lists.
        for (i, item) in items.enumerated() where problems.count < APIError.maxIssuesShown {
            let send: SendRequest
            do {
                send = try SendRequest.decode(item, validation: validation, maxTokens: maxTokensPerRequest, now: now)
            } catch {
                problems += error.issues.map { Self.item(i, $0) }
                if error.issues.isEmpty {
                    problems.append(ValidationIssue(path: "items[\(i)]", rule: "invalid", message: error.message))
                }
                continue
            }
            guard case .activity(let id)? = send.live else {
                problems.append(
                    ValidationIssue(
                        path: "items[\(i)].audience",
                        rule: "live-activity-only",
                        message: "each item is sent to one activity: audience {\"live_activity\": id}"
                    )
                )
                continue
            }
            if send.options.dryRun {
                problems.append(
                    ValidationIssue(
                        path: "items[\(i)].dry_run",
                        rule: "no-dry-run",
                        message: "a batch is not tried dry: send one item to POST /notifications with dry_run"
                    )
                )
                continue
            }
            // One state per activity and batch: two accepted in the same second are ordered by arrival only.
            guard seen.insert(ExactText(id)).inserted else {
                problems.append(
                    ValidationIssue(
                        path: "items[\(i)].audience.live_activity",
                        rule: "duplicate-activity",
                        message: "this activity has an item earlier in the batch: one state per activity and request"
                    )
                )
                continue
            }
            sends.append(send)
            activities.append(ExactText(id))
        }
        guard problems.isEmpty else { throw APIError(.invalid, "the updates are not valid", issues: problems) }
        // Every activity's tokens in one read, at most as many in all as one send may reach: a batch costs no more
        // than a send to that many tokens (a larger one belongs on broadcast channels, or in smaller batches).
        let tokens = try await backend.liveTokens.activityTokens(
            appID: app.id,
            activityIDs: activities.map(\.text),
            limit: maxTokensPerRequest
        )
        if tokens.values.reduce(0, { $0 + $1.count }) > maxTokensPerRequest {
            throw Self.refusal(
                "live-audience-too-large",
                "the items' activities hold more than \(maxTokensPerRequest) tokens in all: send fewer items per request, or a shared state on a broadcast channel (audience.apns_channel)"
            )
        }

        // Each item is made ready as its send would be; the priority-10 budget is spent once all of them are.
        let pipeline = self.pipeline
        var ready: [(message: PushMessage, report: ValidationReport, plan: AcceptPlan)] = []
        for (i, send) in sends.enumerated() {
            var (message, report, options) = (send.message, send.report, send.options)
            let audience = Audience.providerTokens(apns: tokens[activities[i], default: []], fcm: [])
            // Every item goes to APNs: each answer says so when its credentials are missing, as its send's would.
            report.issues += pipeline.credentialWarnings(app: app, audience: audience)
            let id = UUID().uuidString.lowercased()
            do {
                try await pipeline.prepareMedia(&message, options: options, report: &report, context: context)
                let (expiresAt, end) = try pipeline.fit(
                    &message,
                    id: id,
                    audience: audience,
                    options: options,
                    report: &report,
                    what: "the update"
                )
                try await pipeline.keepMedia(message, until: end)
                let plan = AcceptPlan(
                    notification: .init(id: id, appID: app.id, message: .null, response: .null, createdAt: now),
                    idempotencyKey: idempotency.key.map { Self.itemKey($0, i) },
                    audience: audience,
                    notBefore: options.notBefore,
                    expiresAt: expiresAt,
                    spread: options.spread
                )
                ready.append((message, report, plan))
            } catch let error as APIError {
                var e = error
                e.issues = error.issues.map { Self.item(i, $0) }
                if e.issues.isEmpty { e.message = "items[\(i)]: \(error.message)" }
                throw e
            }
        }
        for i in ready.indices {
            var (message, report) = (ready[i].message, ready[i].report)
            spendLiveBudget(&message, app: app, live: sends[i].live, audience: ready[i].plan.audience, into: &report)
            ready[i].plan.notification.message = message.json
            (ready[i].message, ready[i].report) = (message, report)
        }

        let showsReach = mayReadRegistry(context)
        let answers = ready.map { JSONValue.array($0.report.warnings.map(\.json)) }
        let ids = ready.map(\.plan.notification.id)
        let accepted = try await intake.acceptAll(ready.map(\.plan)) { i, queued in
            idempotency.stored([
                "id": .string(ids[i]), "status": "accepted", "warnings": answers[i],
                "deliveries": showsReach ? (queued.map { .int(Int64($0)) } ?? .null) : .null,
            ])
        }
        var out: [JSONValue] = []
        for (i, a) in accepted.enumerated() {
            if a.created { pipeline.accepted(ids[i], app: app.id, message: ready[i].message, queued: a.queued) }
            out.append(try idempotency.shown(a.notification.response, replay: !a.created))
        }
        let answer: JSONValue = ["notifications": .array(out), "accepted": .int(Int64(out.count))]
        return Response.json(202, answer)
    }

    /// The idempotency key an item is stored under: the batch's key and the item's place, joined by a character
    /// no `Idempotency-Key` header may hold, so that no single send's key can name a batch's item.
    static func itemKey(_ key: String, _ index: Int) -> String { "\u{1}batch\u{1}\(key)\u{1}\(index)" }

    /// `{"items": [...]}`: 1 to ``maxLiveUpdates`` objects.
    static func liveItems(_ body: JSONValue) throws(APIError) -> [JSONValue] {
        guard case .object(let o) = body else { throw APIError(.invalid, "the body is an object: {\"items\": [...]}") }
        var r = FieldReader(strict: true, refusesNUL: true)
        r.rejectUnknown(o, known: ["items"], at: "")
        guard case .array(let items)? = o["items"] else {
            r.report.add("items", "required", "items is a list of 1 to \(maxLiveUpdates) updates, each a send's body")
            throw APIError(.invalid, "the updates are not valid", issues: r.report.errors)
        }
        if items.isEmpty || items.count > maxLiveUpdates {
            r.report.add("items", "count", "items holds 1 to \(maxLiveUpdates) updates (it holds \(items.count))")
        }
        guard r.report.isValid else { throw APIError(.invalid, "the updates are not valid", issues: r.report.errors) }
        return items
    }

    /// The batch counts as `count` requests against the key's rate limit.
    func spendItems(_ count: Int, _ request: Request) throws {
        guard count > 1, let limiter = keyLimiter, let hash = Authenticator.bearerHash(request) else { return }
        let most = Int(limiter.largestCost.rounded(.down))
        guard count <= most else {
            throw Self.refusal(
                "over-rate-burst",
                "each item counts as a request: this server's rate limit takes at most \(most) at once (rate_limit \(limiter.rate)/s, bursts of \(limiter.burst)); send smaller batches"
            )
        }
        if let wait = limiter.check(hash, cost: Double(count - 1)) {
            throw APIError.rateLimited(after: RateLimiter.retryAfter(wait), "too many updates for this key")
        }
    }

    /// A refusal of the whole batch (path `items`).
    static func refusal(_ rule: String, _ message: String) -> APIError {
        APIError(
            .invalid,
            "the updates are not valid",
            issues: [ValidationIssue(path: "items", rule: rule, message: message)]
        )
    }

    static func item(_ i: Int, _ issue: ValidationIssue) -> ValidationIssue {
        var issue = issue
        issue.path = issue.path.isEmpty ? "items[\(i)]" : "items[\(i)].\(issue.path)"
        return issue
    }
}
