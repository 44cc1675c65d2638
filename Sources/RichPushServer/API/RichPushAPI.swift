import Crypto
import Foundation
import Hummingbird
import NIOCore
import RichPushCore

/// The versioned JSON API. Every request but `/health` needs `Authorization: Bearer <key>`: the admin key from
/// the configuration, or an app's key with the scope the route needs.
public struct RichPushAPI: Sendable {
    /// The database: the stores below are its, and its fast paths are taken through it.
    public let backend: any StorageBackend
    public var store: any ServerStore { backend.store }
    public var registry: any DeviceRegistry { backend.registry }
    public var queue: any DeliveryQueue { backend.queue }
    public var intake: any NotificationIntake { backend.intake }
    /// SHA-256 of the admin key (the key itself is never kept).
    public var adminKeyHash: String
    public var validation: MessageValidator.Options
    public var maxBodyBytes: Int
    public var metrics: ServerMetrics
    public var limiter: RateLimiter
    /// Failed authentications (no key, an unknown key) per client address: an unknown key gets no bucket of its own.
    public var authFailureLimiter = RateLimiter(rate: 20, burst: 100)
    /// Registry fan-outs run after the answer; tests and shutdown wait for them here.
    public let fanOuts = BackgroundWork()
    /// Called when deliveries were queued (the worker looks at once instead of at its next poll).
    public var onQueued: @Sendable () -> Void
    /// Called with each new notification's message before its deliveries are queued (the sender keeps it, rather
    /// than reading it back from the store for the first delivery).
    public var onAccepted: @Sendable (_ id: String, _ message: PushMessage) -> Void = { _, _ in }
    /// Most tokens in one `audience.tokens` (or `apns_tokens` + `fcm_tokens`) list.
    public var maxTokensPerRequest = 10_000
    /// Preflight, hosting and charts; nil turns media checks and `/media` off.
    public var media: MediaService?
    /// Receipt addresses for devices (`rp.r`) and `POST /v1/receipts/{token}`; nil turns both off.
    public var receipts: DeviceReceipts?
    /// The provider setup of an app, for dry runs (FCM project, and FCM's `validate_only` check of tokens).
    public var providers: (@Sendable (ServerApp) -> ProviderDeliverySender.App)?
    /// OAuth endpoints a stored service account may name besides Google's: the emulator's, in sandbox mode.
    public var extraFCMTokenEndpoints: Set<String> = []
    /// This node's id, shown by `/health` (several nodes on one database).
    public var nodeID: String?
    /// In sandbox mode: the device library run on what the APNs emulator received for a notification (nil when it
    /// has received nothing for it). The console's simulated iPhone.
    public var simulate: (@Sendable (_ notificationID: String) async -> JSONValue?)?

    public init(
        backend: any StorageBackend, adminKey: String,
        validation: MessageValidator.Options = .init(requireTargets: false), maxBodyBytes: Int = 256 * 1024, metrics: ServerMetrics = ServerMetrics(),
        limiter: RateLimiter = RateLimiter(), onQueued: @escaping @Sendable () -> Void = {}
    ) {
        self.backend = backend
        adminKeyHash = APIKeys.hash(adminKey)
        self.validation = validation
        self.maxBodyBytes = maxBodyBytes
        self.metrics = metrics
        self.limiter = limiter
        self.onQueued = onQueued
    }

    /// Resumes fan-outs a crash cut short (call once at start, before serving).
    public func resumeFanOuts() async throws -> Int {
        var total = 0
        for id in try await intake.pendingFanOuts() { total += try await intake.completeFanOut(notificationID: id) }
        if total > 0 { onQueued() }
        return total
    }

    public func router() -> Router<APIRequestContext> {
        let router = Router(context: APIRequestContext.self)
        // A known path with another method is 405 with the methods it takes, not 404.
        router.add(middleware: MethodGuard(routes: Self.routes))
        let api = self
        // Live: the process answers. Ready: its database answers too (a load balancer sends traffic to ready nodes).
        router.get("/health") { _, _ in api.healthAnswer(ready: true) }
        router.get("/health/ready") { _, _ in api.healthAnswer(ready: true) }
        router.get("/health/live") { _, _ in api.healthAnswer(ready: false) }
        // Metrics carry no secrets and no tokens; keep the listener off the public internet all the same.
        router.get("/metrics") { _, _ -> Response in
            api.metrics.databaseUp(api.backend.health.isUp)
            if api.backend.health.isUp, let counts = try? await api.queue.counts() { api.metrics.queueDepth(counts) }
            api.metrics.fanOutsRunning(api.fanOuts.count)
            return Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4"], body: .init(byteBuffer: ByteBuffer(string: api.metrics.render())))
        }
        // The console: a page of this server's (nothing to install), talking to the API below with a key.
        router.get("/console") { _, _ in ConsoleFiles.response("index.html") }
        router.get("/console/:file") { _, context in ConsoleFiles.response(context.parameters.get("file") ?? "") }
        router.get("/openapi.yaml") { _, _ -> Response in
            Response(status: .ok, headers: [.contentType: "application/yaml"], body: .init(byteBuffer: ByteBuffer(string: Self.openAPIDocument)))
        }
        router.get("/media/:name") { request, context in await api.serveMedia(request, context, head: false) }
        router.head("/media/:name") { request, context in await api.serveMedia(request, context, head: true) }
        router.post("/v1/media") { request, context in await api.handle(context) { try await api.uploadMedia(request, context) } }
        router.post("/v1/media/check") { request, context in await api.handle(context) { try await api.checkMedia(request, context) } }
        router.get("/v1/me") { request, context in await api.handle(context) { try await api.me(request, context) } }
        router.post("/v1/apps") { request, context in await api.handle(context) { try await api.createApp(request, context) } }
        router.get("/v1/apps/:app/keys") { request, context in await api.handle(context) { try await api.listKeys(request, context) } }
        router.get("/v1/apps/:app/devices") { request, context in await api.handle(context) { try await api.searchDevices(request, context) } }
        router.get("/v1/apps/:app/notifications") { request, context in await api.handle(context) { try await api.listNotifications(request, context) } }
        router.get("/v1/apps/:app/notifications/:id/simulation") { request, context in await api.handle(context) { try await api.simulation(request, context) } }
        router.get("/v1/apps/:app") { request, context in await api.handle(context) { try await api.showApp(request, context) } }
        router.patch("/v1/apps/:app") { request, context in await api.handle(context) { try await api.updateApp(request, context) } }
        router.post("/v1/apps/:app/keys") { request, context in await api.handle(context) { try await api.createKey(request, context) } }
        router.delete("/v1/apps/:app/keys/:key") { request, context in await api.handle(context) { try await api.revokeKey(request, context) } }
        router.post("/v1/apps/:app/devices") { request, context in await api.handle(context) { try await api.registerDevice(request, context) } }
        router.delete("/v1/apps/:app/devices/:token") { request, context in await api.handle(context) { try await api.removeDevice(request, context) } }
        router.post("/v1/apps/:app/notifications") { request, context in await api.handle(context) { try await api.send(request, context) } }
        router.get("/v1/apps/:app/notifications/:id") { request, context in await api.handle(context) { try await api.outcomes(request, context) } }
        router.post("/v1/apps/:app/notifications/:id/receipts") { request, context in await api.handle(context) { try await api.receipt(request, context) } }
        router.post("/v1/receipts/:token") { request, context in await api.handle(context) { try await api.deviceReceipt(request, context) } }
        return router
    }

    /// `docs/openapi.yaml`, shipped as a resource.
    public static let openAPIDocument: String = {
        guard let url = Bundle.module.url(forResource: "openapi", withExtension: "yaml"), let text = try? String(contentsOf: url, encoding: .utf8) else {
            return "openapi: 3.0.3\ninfo: {title: RichPush API, version: '1'}\npaths: {}\n"
        }
        return text
    }()

    /// The routes the router serves, as (method, OpenAPI path), for keeping the document honest.
    public static let routes: [(String, String)] = [
        ("get", "/health"), ("get", "/health/live"), ("get", "/health/ready"), ("get", "/metrics"), ("get", "/console"), ("get", "/console/{file}"), ("get", "/openapi.yaml"), ("get", "/media/{name}"), ("head", "/media/{name}"), ("post", "/v1/media"),
        ("post", "/v1/media/check"), ("get", "/v1/me"), ("post", "/v1/apps"), ("get", "/v1/apps/{app}"), ("patch", "/v1/apps/{app}"),
        ("get", "/v1/apps/{app}/keys"), ("post", "/v1/apps/{app}/keys"), ("delete", "/v1/apps/{app}/keys/{key}"), ("get", "/v1/apps/{app}/devices"),
        ("post", "/v1/apps/{app}/devices"), ("delete", "/v1/apps/{app}/devices/{token}"), ("get", "/v1/apps/{app}/notifications"),
        ("post", "/v1/apps/{app}/notifications"), ("get", "/v1/apps/{app}/notifications/{id}"), ("get", "/v1/apps/{app}/notifications/{id}/simulation"),
        ("post", "/v1/apps/{app}/notifications/{id}/receipts"), ("post", "/v1/receipts/{token}"),
    ]

    // MARK: Errors and JSON

    /// A failed request: status, a stable code, a message, and the validation issues when there are some.
    struct Failure: Error {
        var status: Int
        var code: String
        var message: String
        var issues: [ValidationIssue] = []
    }

    /// Runs a route and turns what it throws into an answer. A failure that is not one of the route's own answers
    /// is logged where it happened, with a request id the 500 answer also carries (the error, never a body or a key).
    func handle(_ context: APIRequestContext, _ body: () async throws -> Response) async -> Response {
        // Every route here needs the database (a key is looked up in it): refused at once while it is away.
        guard backend.health.isUp else { return Self.unavailable() }
        do { return try await body() } catch let f as Failure {
            var error: [String: JSONValue] = ["code": .string(f.code), "message": .string(f.message)]
            if !f.issues.isEmpty { error["issues"] = .array(f.issues.map(\.json)) }
            return Self.json(f.status, ["error": .object(error)])
        } catch let limited as RateLimited {
            var r = Self.json(429, ["error": ["code": "rate-limited", "message": .string("too many requests for this key; retry after \(limited.retryAfter) s")]])
            r.headers[.retryAfter] = String(limited.retryAfter)
            return r
        } catch is NIOTooManyBytesError {
            return Self.json(413, ["error": ["code": "body-too-large", "message": .string("the body is over \(maxBodyBytes) bytes")]])
        } catch where backend.isUnavailable(error) {
            context.logger.warning("database unavailable", metadata: ["error": .string(String(describing: error))])
            return Self.unavailable()
        } catch {
            let requestID = String(UUID().uuidString.lowercased().prefix(18))
            context.logger.error(
                "request failed", metadata: ["request_id": .string(requestID), "error": .string(String(describing: error))])
            return Self.json(500, ["error": ["code": "internal", "message": "internal error", "request_id": .string(requestID)]])
        }
    }

    /// `503` with `Retry-After`: this node cannot reach its database; nothing of the request was stored.
    static func unavailable() -> Response {
        var r = json(503, ["error": ["code": "database-unavailable", "message": "the database does not answer; nothing was stored, try again"]])
        r.headers[.retryAfter] = "5"
        return r
    }

    /// `/health` (ready unless `ready` is false: then liveness alone, always 200).
    func healthAnswer(ready checkReady: Bool) -> Response {
        let status = backend.health.status
        var body: [String: JSONValue] = [
            "live": true, "ready": .bool(status.up), "database": status.up ? "up" : "down",
            "database_since": .string(ISO8601DateFormatter().string(from: status.since)),
        ]
        if let reason = status.reason { body["reason"] = .string(reason) }
        if let nodeID { body["node"] = .string(nodeID) }
        var r = Self.json(checkReady && !status.up ? 503 : 200, .object(body))
        if checkReady && !status.up { r.headers[.retryAfter] = "5" }
        return r
    }

    static func json(_ status: Int, _ value: JSONValue) -> Response {
        Response(status: .init(code: status), headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: value.serialized())))
    }

    /// The body as JSON, up to `limit` bytes (the API's limit unless a route has its own).
    func bodyJSON(_ request: Request, upTo limit: Int? = nil) async throws -> JSONValue {
        var request = request
        let buffer = try await request.collectBody(upTo: limit ?? maxBodyBytes)
        do { return try JSONValue.parse(Array(buffer.readableBytesView)) } catch {
            throw Failure(status: 400, code: "invalid-json", message: "\(error)")
        }
    }

    struct RateLimited: Error {
        var retryAfter: Int
    }

    // MARK: Authentication

    // MARK: Routes

    func createApp(_ request: Request, _ context: APIRequestContext) async throws -> Response {
        try await requireAdmin(request, context)
        let body = try AppBody.decode(try await bodyJSON(request), creating: true, tokenEndpoints: extraFCMTokenEndpoints)
        var app = ServerApp(id: "", name: "", bundleID: "", fcmProjectID: nil)
        body.apply(to: &app)
        let (created, key) = try await store.createApp(app)
        return Self.json(201, ["app": created.json, "api_key": .string(key), "note": "the key is shown once; RichPush keeps only its hash"])
    }

    func showApp(_ request: Request, _ context: APIRequestContext) async throws -> Response {
        let app = try await requireApp(request, context, .read)
        return Self.json(200, ["app": app.json])
    }

    /// Changes the name, bundle id or credentials (`"apns": null` removes them).
    func updateApp(_ request: Request, _ context: APIRequestContext) async throws -> Response {
        var app = try await requireApp(request, context, .manage)
        try AppBody.decode(try await bodyJSON(request), creating: false, tokenEndpoints: extraFCMTokenEndpoints).apply(to: &app)
        guard let updated = try await store.updateApp(app) else { throw Failure(status: 404, code: "not-found", message: "no app '\(app.id)'") }
        return Self.json(200, ["app": updated.json])
    }

    func createKey(_ request: Request, _ context: APIRequestContext) async throws -> Response {
        let app = try await requireApp(request, context, .manage)
        let scopes = try KeyBody.decode(try await bodyJSON(request)).scopes
        let (grant, key) = try await store.createKey(appID: app.id, scopes: scopes)
        return Self.json(201, ["id": .string(grant.keyID), "api_key": .string(key), "scopes": .array(APIScope.allCases.filter(scopes.contains).map { .string($0.rawValue) }), "note": "the key is shown once; RichPush keeps only its hash"])
    }

    func revokeKey(_ request: Request, _ context: APIRequestContext) async throws -> Response {
        let app = try await requireApp(request, context, .manage)
        let keyID = context.parameters.get("key") ?? ""
        guard try await store.revokeKey(appID: app.id, keyID: keyID) else { throw Failure(status: 404, code: "not-found", message: "no key '\(keyID)' for this app") }
        return Self.json(200, ["revoked": .string(keyID)])
    }

    func registerDevice(_ request: Request, _ context: APIRequestContext) async throws -> Response {
        let app = try await requireApp(request, context, .manage)
        let device = try DeviceBody.decode(try await bodyJSON(request), appID: app.id).device
        try await registry.upsert(device)
        return Self.json(200, ["token": .string(device.token), "provider": .string(device.provider.rawValue)])
    }

    func removeDevice(_ request: Request, _ context: APIRequestContext) async throws -> Response {
        let app = try await requireApp(request, context, .manage)
        let token = context.parameters.get("token") ?? ""
        guard try await registry.remove(appID: app.id, token: token) else { throw Failure(status: 404, code: "not-found", message: "no such device") }
        return Self.json(200, ["removed": .string(token)])
    }

    /// Accepts a notification: validates it, stores it with its deliveries (or a pending fan-out), and answers 202
    /// at once. A registry fan-out (all, user, tag, topic) runs after the answer and resumes after a crash.
    func send(_ request: Request, _ context: APIRequestContext) async throws -> Response {
        let app = try await requireApp(request, context, .send)
        let idempotencyKey = request.headers.first { $0.name.canonicalName == "idempotency-key" }?.value
        if let key = idempotencyKey, key.isEmpty || key.unicodeScalars.count > 255 {
            throw Failure(status: 400, code: "invalid-idempotency-key", message: "Idempotency-Key must be 1 to 255 characters")
        }
        let send = try SendRequest.decode(try await bodyJSON(request), validation: validation, maxTokens: maxTokensPerRequest, now: Date())
        var (message, report) = (send.message, send.report)
        let (audience, options) = (send.audience, send.options)
        // Media is fetched and judged before anything is stored: a refused media answers 422 naming it.
        if let media {
            let (errors, notes) = await media.prepare(&message, onFailure: options.onFailure, rehost: options.rehost)
            guard errors.isEmpty else { throw Failure(status: 422, code: "media-refused", message: "media failed the preflight check", issues: errors) }
            for n in notes { report.add(n.path, n.rule, n.message, .warning) }
        }
        let id = UUID().uuidString.lowercased()
        message.id = id
        let (expiresAt, end) = options.expiry(ttl: message.ttl)
        // The device reports what it attached to the address in `rp.r`, when the payload has room for it.
        let sizeProblems = fitReceiptAddress(&message, id: id, audience: audience, until: end, wanted: options.receipts, into: &report)
        guard sizeProblems.isEmpty else { throw Failure(status: 422, code: "invalid", message: "the notification is not valid", issues: sizeProblems) }
        if options.dryRun { return try await dryRunAnswer(app: app, message: message, audience: audience, warnings: report.warnings) }
        // Hosted media stays while a device may still fetch it.
        try await media?.keep(message, until: end)
        let warnings = JSONValue.array(report.warnings.map(\.json))
        let plan = AcceptPlan(
            notification: .init(id: id, appID: app.id, message: message.json, response: .null, createdAt: Date()), idempotencyKey: idempotencyKey,
            audience: audience, notBefore: options.notBefore, expiresAt: expiresAt, spread: options.spread)
        let accepted = try await intake.accept(plan) { queued in
            var o: [String: JSONValue] = ["id": .string(id), "status": "accepted", "warnings": warnings]
            o["deliveries"] = queued.map { .int(Int64($0)) } ?? .null
            return .object(o)
        }
        guard accepted.created else { return Self.json(202, accepted.notification.response) }  // a replay answers as the first time did
        onAccepted(id, message)
        if accepted.fanOutPending {
            let (intake, metrics, onQueued) = (intake, metrics, onQueued)
            metrics.notificationAccepted(deliveries: 0)
            fanOuts.run({
                let n = try await intake.completeFanOut(notificationID: id)
                metrics.deliveriesEnqueued(n)
                onQueued()
            }, onFailure: { _ in metrics.fanOutFailed() })
        } else {
            metrics.notificationAccepted(deliveries: accepted.queued)
            if accepted.queued > 0 { onQueued() }
        }
        return Self.json(202, accepted.notification.response)
    }

    /// The page of deliveries a `GET` of a notification lists: `after` a delivery id (0: from the start), at most
    /// `limit` (1 to 1000, default 1000).
    struct OutcomesPage {
        var after: Int64 = 0
        var limit = 1000

        init(query: Parameters) throws {
            if let a = query.get("after") {
                guard let n = Int64(a), n >= 0 else {
                    throw Failure(status: 422, code: "invalid", message: "after is a whole number of 0 or more (a next_after from the page before)")
                }
                after = n
            }
            if let l = query.get("limit") {
                guard let n = Int(l), (1...1000).contains(n) else {
                    throw Failure(status: 422, code: "invalid", message: "limit is a whole number from 1 to 1000")
                }
                limit = n
            }
        }
    }

    func outcomes(_ request: Request, _ context: APIRequestContext) async throws -> Response {
        let app = try await requireApp(request, context, .read)
        guard let id = context.parameters.get("id"), let n = try await store.notification(id: id), n.appID == app.id else {
            throw Failure(status: 404, code: "not-found", message: "no such notification")
        }
        let page = try OutcomesPage(query: request.uri.queryParameters)
        // Counted in the database and read a page at a time: a poll of a million-device send reads no million rows.
        let byState = try await queue.counts(notificationID: id)
        let counts = Dictionary(uniqueKeysWithValues: byState.map { ($0.key.rawValue, JSONValue.int(Int64($0.value))) })
        let total = byState.values.reduce(0, +)
        // Deliveries are listed in id order: a page starts after the last id of the one before. One more than the
        // page is read to know whether another follows.
        let read = try await queue.deliveries(notificationID: id, after: page.after, limit: page.limit + 1)
        let shown = read.prefix(page.limit)
        let list: [JSONValue] = shown.map { d in
            var o: [String: JSONValue] = ["target": .string(d.target), "provider": .string(d.provider.rawValue), "state": .string(d.state.rawValue), "attempts": .int(Int64(d.attempts))]
            if let r = d.reason { o["reason"] = .string(r) }
            if let p = d.providerID { o["provider_id"] = .string(p) }
            return .object(o)
        }
        // What devices reported: how many showed media, and why media was skipped.
        let receipts = try await store.receipts(notificationID: id)
        var skippedReasons: [String: JSONValue] = [:]
        var withMedia = 0
        for report in receipts.values {
            if !(report["attachments"]?.arrayValue ?? []).isEmpty { withMedia += 1 }
            for s in report["skipped"]?.arrayValue ?? [] {
                let reason = s["reason"]?.stringValue ?? "unknown"
                skippedReasons[reason] = .int((skippedReasons[reason]?.intValue ?? 0) + 1)
            }
        }
        let receiptSummary: JSONValue = ["count": .int(Int64(receipts.count)), "with_media": .int(Int64(withMedia)), "skipped_reasons": .object(skippedReasons)]
        var body: [String: JSONValue] = ["id": .string(id), "total": .int(Int64(total)), "counts": .object(counts), "deliveries": .array(list), "receipts": receiptSummary]
        if read.count > page.limit, let last = shown.last { body["next_after"] = .int(last.id) }
        return Self.json(200, .object(body))
    }
}
