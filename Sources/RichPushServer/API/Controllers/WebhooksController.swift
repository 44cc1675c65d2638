import Foundation
import Hummingbird
import RichPushCore

/// `/v1/apps/{app}/webhooks`: the endpoints an app's backend hears its events at, with the `manage` scope. At most
/// ``WebhookLimits/endpointsPerApp`` per app; each with its own signing secret, shown once when it is made or
/// rotated. A test sends one signed event at once and answers what the receiver said; a replay sends again what
/// was recorded in a time range (docs/webhooks.md).
struct WebhooksController: AppRoutes {
    let store: any ServerStore
    let webhooks: any WebhookStore
    let maxBodyBytes: Int
    /// This node's sender (nil: webhooks are off here, and tests cannot be sent from it).
    let sender: WebhookSender?
    /// Whether plain loopback addresses are allowed (the sandbox); HTTPS is always required.
    let policy: AddressPolicy

    func addRoutes(to group: RouterGroup<APIRequestContext>) {
        let managing = group.app(.manage, store: store)
        managing.get("webhooks", use: list)
        managing.post("webhooks", use: create)
        managing.get("webhooks/:webhook", use: show)
        managing.patch("webhooks/:webhook", use: update)
        managing.delete("webhooks/:webhook", use: remove)
        managing.post("webhooks/:webhook/rotate-secret", use: rotate)
        managing.post("webhooks/:webhook/test", use: test)
        managing.post("webhooks/:webhook/replay", use: replay)
    }

    func list(_ request: Request, _ context: AppRequestContext) async throws -> Response {
        let all = try await webhooks.endpoints(appID: context.app.id)
        return Response.json(200, .object(["webhooks": .array(all.map { $0.json() })]))
    }

    func create(_ request: Request, _ context: AppRequestContext) async throws -> Response {
        let app = context.app
        let body = try WebhookBody.read(try await bodyJSON(request, upTo: 8192), creating: true, policy: policy)
        let e = WebhookEndpoint(
            appID: app.id,
            url: body.url ?? "",
            types: body.types ?? Set(WebhookEventType.subscribable),
            description: body.description ?? "",
            batchSize: body.batchSize ?? WebhookLimits.defaultBatchSize
        )
        let made: WebhookEndpoint
        do { made = try await webhooks.create(e) } catch is WebhookLimitReached {
            throw APIError(
                .invalid,
                "this app has \(WebhookLimits.endpointsPerApp) webhook endpoints",
                issues: [
                    .init(
                        path: "",
                        rule: "webhooks-per-app",
                        message:
                            "an app has at most \(WebhookLimits.endpointsPerApp) webhook endpoints: delete one first"
                    )
                ]
            )
        }
        sender?.nudge()
        var answer = made.json().objectValue ?? [:]
        answer["secret"] = .string(made.secret)
        answer["note"] = "the secret is shown once: keep it where your receiver verifies signatures"
        return Response.json(201, .object(answer))
    }

    /// The endpoint of the path, or 404.
    func endpoint(_ context: AppRequestContext) async throws -> WebhookEndpoint {
        let id = context.parameters.get("webhook") ?? ""
        guard WebhookEndpoint.isID(id), let e = try await webhooks.endpoint(appID: context.app.id, id: id) else {
            throw APIError(.notFound, "no such webhook endpoint for this app")
        }
        return e
    }

    func show(_ request: Request, _ context: AppRequestContext) async throws -> Response {
        Response.json(200, try await endpoint(context).json())
    }

    func update(_ request: Request, _ context: AppRequestContext) async throws -> Response {
        var e = try await endpoint(context)
        let body = try WebhookBody.read(try await bodyJSON(request, upTo: 8192), creating: false, policy: policy)
        if let u = body.url { e.url = u }
        if let t = body.types { e.types = t }
        if let d = body.description { e.description = d }
        if let b = body.batchSize { e.batchSize = b }
        guard try await webhooks.update(e) else { throw APIError(.notFound, "no such webhook endpoint for this app") }
        if body.url != nil { sender?.client.forget(e.id) }
        if let enabled = body.enabled {
            _ = try await webhooks.setEnabled(appID: e.appID, id: e.id, enabled: enabled, now: Date())
            if enabled { sender?.nudge() }
        }
        return Response.json(200, try await endpoint(context).json())
    }

    func remove(_ request: Request, _ context: AppRequestContext) async throws -> Removed {
        let e = try await endpoint(context)
        guard try await webhooks.remove(appID: e.appID, id: e.id) else {
            throw APIError(.notFound, "no such webhook endpoint for this app")
        }
        sender?.client.forget(e.id)
        return Removed(removed: e.id)
    }

    func rotate(_ request: Request, _ context: AppRequestContext) async throws -> Response {
        let e = try await endpoint(context)
        // No body, or `{}`: the route takes no field, and one given is refused rather than passed over.
        var r = FieldReader(strict: true, refusesNUL: true)
        _ = r.body(try await bodyJSON(request, upTo: 1024, empty: .object([:])), known: [])
        guard r.report.isValid else { throw APIError.invalid("the rotation", r.report) }
        let secret = WebhookSigner.newSecret()
        let now = Date()
        guard try await webhooks.rotateSecret(appID: e.appID, id: e.id, secret: secret, now: now) else {
            throw APIError(.notFound, "no such webhook endpoint for this app")
        }
        let until = now.addingTimeInterval(WebhookLimits.secretOverlap)
        return Response.json(
            200,
            .object([
                "id": .string(e.id),
                "secret": .string(secret),
                "previous_secret_until": .string(ISO8601DateFormatter().string(from: until)),
                "note": .string(
                    "the secret is shown once; requests carry a signature with each secret until previous_secret_until"
                ),
            ])
        )
    }

    func test(_ request: Request, _ context: AppRequestContext) async throws -> Response {
        let e = try await endpoint(context)
        guard let sender else { throw APIError(.notFound, "webhooks are off on this node (webhooks.enabled)") }
        let result: WebhookSender.TestResult
        switch await sender.test(e) {
        case .success(let r): result = r
        case .failure(.endpointBusy): throw APIError.rateLimited(after: 1, "a test of this endpoint is under way")
        case .failure(.appBusy):
            throw APIError.rateLimited(
                after: 1,
                "this app's endpoints have \(WebhookSender.testsPerApp) tests under way, the most it may have at once"
            )
        case .failure(.nodeBusy):
            throw APIError.rateLimited(
                after: 1,
                "this node has \(WebhookSender.testsPerNode) tests under way, the most it runs at once"
            )
        }
        var o: [String: JSONValue] = [
            "webhook_id": .string(result.id), "milliseconds": .int(Int64(result.milliseconds)),
            "delivered": .bool(result.status.map { (200...299).contains($0) } ?? false),
        ]
        if let s = result.status { o["status"] = .int(Int64(s)) }
        if let error = result.error { o["error"] = .string(error) }
        return Response.json(200, .object(o))
    }

    func replay(_ request: Request, _ context: AppRequestContext) async throws -> Response {
        let e = try await endpoint(context)
        let now = Date()
        let (from, to) = try WebhookBody.range(try await bodyJSON(request, upTo: 1024), now: now)
        // One replay at a time: each reads its range again (a loop of them would keep a core reading). Decided on
        // the row, so that of replays asked at once one starts; a disabled endpoint sends nothing to replay to.
        guard try await webhooks.replay(appID: e.appID, id: e.id, from: from, to: to) else {
            guard let now = try await webhooks.endpoint(appID: e.appID, id: e.id) else {
                throw APIError(.notFound, "no such webhook endpoint for this app")
            }
            if now.disabledAt != nil {
                throw APIError(
                    .endpointDisabled,
                    "the endpoint is disabled: enable it (PATCH {\"enabled\": true}) and replay then"
                )
            }
            throw APIError.rateLimited(after: 5, "a replay of this endpoint is under way")
        }
        sender?.nudge()
        let stamp = ISO8601DateFormatter()
        return Response.json(
            202,
            .object([
                "id": .string(e.id),
                "replay": .object(["from": .string(stamp.string(from: from)), "to": .string(stamp.string(from: to))]),
            ])
        )
    }
}

extension WebhookEndpoint {
    /// The endpoint as the API shows it (never its secrets).
    func json() -> JSONValue {
        let stamp = ISO8601DateFormatter()
        var o: [String: JSONValue] = [
            "id": .string(id), "url": .string(url),
            "events": .array(WebhookEventType.subscribable.filter(types.contains).map { .string($0.rawValue) }),
            "description": .string(description), "batch_size": .int(Int64(batchSize)), "state": .string(state),
            "created_at": .string(stamp.string(from: createdAt)), "failures": .int(Int64(failures)),
        ]
        func date(_ key: String, _ d: Date?) { if let d { o[key] = .string(stamp.string(from: d)) } }
        date("last_attempt_at", lastAttemptAt)
        date("last_success_at", lastSuccessAt)
        date("failing_since", failingSince)
        date("disabled_at", disabledAt)
        if failures > 0, disabledAt == nil { date("next_attempt_at", nextAttemptAt) }
        if let lastError { o["last_error"] = .string(lastError) }
        if let disabledReason { o["disabled_reason"] = .string(disabledReason) }
        if let until = previousUntil, until > Date() { date("previous_secret_until", until) }
        if let r = replay {
            o["replay"] = .object([
                "from": .string(stamp.string(from: r.from)), "to": .string(stamp.string(from: r.to)),
            ])
        }
        return .object(o)
    }
}

/// `POST` and `PATCH …/webhooks`: every field bounded and checked, every problem named.
struct WebhookBody {
    var url: String?
    var types: Set<WebhookEventType>?
    var description: String?
    var batchSize: Int?
    var enabled: Bool?

    static let fields: Set<String> = ["url", "events", "description", "batch_size", "enabled"]

    static func read(_ json: JSONValue, creating: Bool, policy: AddressPolicy) throws -> WebhookBody {
        var r = FieldReader(strict: true, refusesNUL: true)
        let o = r.body(json, known: creating ? fields.subtracting(["enabled"]) : fields)
        var b = WebhookBody()
        b.url = r.text(o, "url", at: "", required: creating, lengths: 1...WebhookLimits.maxURLBytes)
        if let u = b.url {
            if let problem = urlProblem(u, policy: policy) {
                r.report.add("url", problem.rule, problem.message)
                b.url = nil
            } else {
                b.url = normalized(u)
            }
        }
        if let names = r.texts(o, "events", at: "", maxCount: WebhookEventType.subscribable.count, lengths: 1...64) {
            var types = Set<WebhookEventType>()
            for (i, n) in names.enumerated() {
                if let t = WebhookEventType(rawValue: n), t != .test {
                    types.insert(t)
                } else {
                    r.report.add(
                        "events[\(i)]",
                        "enum",
                        "each is one of \(WebhookEventType.subscribable.map(\.rawValue).joined(separator: ", "))"
                    )
                }
            }
            if names.isEmpty { r.report.add("events", "empty", "subscribe to one event type at least") }
            b.types = types
        }
        b.description = r.text(o, "description", at: "", lengths: 0...200, shape: FieldReader.label)
        if let n = r.int(o, "batch_size", at: "") {
            if WebhookLimits.batchSizes.contains(Int(clamping: n)) {
                b.batchSize = Int(n)
            } else {
                r.report.add("batch_size", "range", "batch_size is 1 to \(WebhookLimits.batchSizes.upperBound)")
            }
        }
        b.enabled = r.bool(o, "enabled", at: "")
        guard r.report.isValid else { throw APIError.invalid("the webhook endpoint", r.report) }
        return b
    }

    /// Why a URL cannot be an endpoint: not a URL as media URLs are read (a host that is no name or address, a bad
    /// port, control characters: the same rules, ``MediaURL``), not https, credentials in it, a fragment, or a host
    /// the address policy refuses by its name or literal address (a name is checked again, resolved, at each
    /// connection).
    static func urlProblem(_ s: String, policy: AddressPolicy) -> (rule: String, message: String)? {
        let url: MediaURL
        do { url = try MediaURL(s) } catch {
            if error.rule == .userInfo {
                return ("credentials", "no user or password in the URL: receivers verify the signature instead")
            }
            if error.rule == .scheme { return ("https", "webhooks go over https only") }
            return (error.rule.rawValue, error.message)
        }
        guard url.scheme == "https" else { return ("https", "webhooks go over https only") }
        if s.contains("#") { return ("fragment", "a URL without a #fragment") }
        let bare =
            url.host.hasPrefix("[") && url.host.hasSuffix("]") ? String(url.host.dropFirst().dropLast()) : url.host
        if case .refused(let why) = policy.check(hostName: bare) {
            return ("address", "the address policy refuses this host: \(why)")
        }
        if let literal = IPAddress(host: bare), case .refused(let why) = policy.check(literal, port: url.port ?? 443) {
            return ("address", "the address policy refuses this address: \(why)")
        }
        return nil
    }

    /// The URL as it is kept and sent to: as media URLs are normalized (scheme and host in lower case, a default
    /// port dropped, the path as written).
    static func normalized(_ s: String) -> String { (try? MediaURL(s).fetched) ?? s }

    /// A replay's `from` and `to` (RFC 3339; `to` defaults to now): within what is kept, `from` before `to`.
    static func range(_ json: JSONValue, now: Date) throws -> (Date, Date) {
        var r = FieldReader(strict: true, refusesNUL: true)
        let o = r.body(json, known: ["from", "to"])
        func date(_ key: String, required: Bool) -> Date? {
            guard let s = r.text(o, key, at: "", required: required, lengths: 1...40) else { return nil }
            // RFC 3339, a real time, nothing before or after it (Foundation's parser reads past trailing characters
            // and rolls 24:00 or 31 November over into another time).
            guard let d = WebhookTime.parse(s) else {
                r.report.add(key, "date", "\(key) is a time such as 2026-11-27T10:00:00Z")
                return nil
            }
            return d
        }
        let from = date("from", required: true)
        let to = min(date("to", required: false) ?? now, now)
        if let from {
            if from >= to { r.report.add("from", "order", "from is before to, and before now") }
            if from < now.addingTimeInterval(-WebhookLimits.retention - 3600) {
                r.report.add(
                    "from",
                    "retention",
                    "events are kept \(Int(WebhookLimits.retention / 86_400)) days: from is within them"
                )
            }
        }
        guard r.report.isValid, let from else { throw APIError.invalid("the replay", r.report) }
        return (from, to)
    }

}
