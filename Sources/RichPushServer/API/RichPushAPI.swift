import Crypto
import Foundation
import Hummingbird
import NIOCore
import RichPushCore

/// The versioned JSON API and what its routes use. Every `/v1` request but a device's receipt post needs
/// `Authorization: Bearer <key>`: the admin key from the configuration, or an app's key with the scope the route
/// needs. ``router()`` hands each resource's controller the parts it uses; ``buildApplication(_:adminKey:logger:onRunning:)``
/// builds one with everything set.
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
    /// A public key's requests (the `register` scope alone) per client address and app: 10 a second, bursts of
    /// 100 (an app registers once a launch; a page once a visit; many devices may share one address).
    public var publicClientLimiter = RateLimiter(rate: 10, burst: 100)
    /// The operator's proxies, whose forwarded-for headers name the client (none: the peer is the client).
    public var trustedProxies = TrustedProxies()
    /// The connections the node holds (shown by /metrics; nil where the API runs without a listener of its own).
    public var connections: ConnectionLimits?
    /// Requests that store something are refused while a watched disk is below its floor (nil: no floor).
    public var diskFloor: DiskFloor?
    /// Registry fan-outs run after the answer; tests and shutdown wait for them here.
    public let fanOuts = BackgroundWork()
    /// The console's live views of notifications (`…/notifications/{id}/events`), one reader per notification.
    public var insight: InsightStreams
    /// Each notification's counts and funnel, shared by the routes that show them and the live views.
    public let numbers: InsightCache
    /// Counts per notification and minute (an app's time series), written every few seconds by the server.
    public var minutes: MinuteCounter
    /// Called with each new notification's message before its deliveries are queued (the sender keeps it, rather
    /// than reading it back from the store for the first delivery).
    public var onAccepted: @Sendable (_ id: String, _ message: PushMessage) -> Void
    /// Most tokens in one `audience.tokens` (or `apns_tokens` + `fcm_tokens`) list.
    public var maxTokensPerRequest = 10_000
    /// The bounds every device and Live Activity registration meets (devices per app and per user, tokens per
    /// app, user and activity).
    public var registrationLimits = RegistrationLimits()
    /// Preflight, hosting and charts; nil turns media checks and `/media` off.
    public var media: MediaService?
    /// What each app may make the server spend on media (uploads a day, counted in the database; fetches at once).
    public var quotas: Quotas
    /// Priority-10 Live Activity updates per activity (or channel) and hour; past it they go at priority 5.
    public var liveBudget: RateLimiter?
    /// `live.token` events public callers may cause, per app (nil: no bound).
    public var publicEventBudget: RateLimiter?
    /// Versions one notification may have, and how fast updates to it may come.
    public var updateLimits = UpdateLimits()
    /// An app's device counts, kept briefly.
    public var counts = CountCaches()
    /// Receipt addresses for devices (`rp.r`) and `POST /v1/receipts/{token}`; nil turns both off.
    public var receipts: DeviceReceipts?
    /// The push services devices are reached through: token checks, sizes and dry runs ask them (the workers
    /// send through the same ones).
    public var providers: Providers
    /// OAuth endpoints a stored service account may name besides Google's: the emulator's, in sandbox mode.
    public var extraFCMTokenEndpoints: Set<String>
    /// This node's id, shown by `/health` (several nodes on one database).
    public var nodeID: String?
    /// The node's bounds per app and per push service origin, and the origins' circuits, which its workers share
    /// (`GET /v1/apps/{app}/push-services` shows them); nil in a server without workers.
    public var admission: DeliveryAdmission?
    /// In sandbox mode: the device library run on what the APNs emulator received for a notification (nil when it
    /// has received nothing for it). The console's simulated iPhone.
    public var simulate: (@Sendable (_ notificationID: String) async -> JSONValue?)?
    /// This node's webhook sender (tests of endpoints are sent through it; nil: webhooks are off on this node).
    var webhookSender: WebhookSender?
    /// The addresses a webhook endpoint may name (outside the sandbox: no internal address).
    public var webhookPolicy = AddressPolicy()
    /// The sandbox's webhook receiver in this process (`GET /v1/me` names it for the console).
    public var sandboxWebhooks: String?

    public init(
        backend: any StorageBackend,
        adminKey: String,
        validation: MessageValidator.Options = .init(requireTargets: false),
        maxBodyBytes: Int = 256 * 1024,
        metrics: ServerMetrics = ServerMetrics(),
        limiter: RateLimiter = RateLimiter(),
        onAccepted: @escaping @Sendable (_ id: String, _ message: PushMessage) -> Void = { _, _ in },
        media: MediaService? = nil,
        receipts: DeviceReceipts? = nil,
        providers: Providers = Providers([APNsProvider(), FCMProvider()]),
        extraFCMTokenEndpoints: Set<String> = [],
        nodeID: String? = nil,
        admission: DeliveryAdmission? = nil,
        simulate: (@Sendable (_ notificationID: String) async -> JSONValue?)? = nil
    ) {
        self.backend = backend
        adminKeyHash = APIKeys.hash(adminKey)
        self.validation = validation
        self.maxBodyBytes = maxBodyBytes
        self.metrics = metrics
        self.limiter = limiter
        self.onAccepted = onAccepted
        self.media = media
        self.receipts = receipts
        self.providers = providers
        self.extraFCMTokenEndpoints = extraFCMTokenEndpoints
        self.nodeID = nodeID
        self.admission = admission
        self.simulate = simulate
        quotas = Quotas(ledger: backend.uploads)
        let numbers = InsightCache(receipts: backend.receipts, updates: backend.updates)
        self.numbers = numbers
        insight = InsightStreams(metrics: metrics) { id in
            try await NotificationsController.insightEvent(id, numbers: numbers)
        }
        minutes = MinuteCounter { [receipts = backend.receipts] counts in try await receipts.addMinutes(counts) }
    }

    /// Resumes fan-outs a crash cut short (call once at start, before serving).
    public func resumeFanOuts() async throws -> Int {
        var total = 0
        for id in try await intake.pendingFanOuts() {
            total += try await intake.completeFanOut(notificationID: id)
        }
        return total
    }

    /// The router: every route the server answers, each resource's in its controller, which holds only what its
    /// routes use. `/v1` routes answer failures through ``APIErrorMiddleware``; all but a device's receipt post
    /// need a key, checked once by ``Authenticator``.
    public func router() -> Router<APIRequestContext> {
        // HEAD wherever GET is (RFC 9110, section 9.1: a general-purpose server supports both).
        let router = Router(context: APIRequestContext.self, options: .autoGenerateHeadEndpoints)
        // A known path with another method is 405 with the methods it takes, not 404.
        let methodGuard = MethodGuard()
        router.add(middleware: ClientAddressMiddleware(proxies: trustedProxies))
        router.add(middleware: methodGuard)
        HealthController(
            backend: backend,
            adminKeyHash: adminKeyHash,
            metrics: metrics,
            fanOuts: fanOuts,
            nodeID: nodeID,
            connections: connections,
            diskFloor: diskFloor
        ).addRoutes(to: router)
        ConsoleController.addRoutes(to: router)
        let media = MediaController(media: media, quotas: quotas, maxBodyBytes: maxBodyBytes)
        media.addPublicRoutes(to: router)
        let v1 = addUnkeyedRoutes(to: router)
        let keyed = v1.group().add(
            middleware: Authenticator(
                store: store,
                adminKeyHash: adminKeyHash,
                limiter: limiter,
                failureLimiter: authFailureLimiter,
                publicClientLimiter: publicClientLimiter
            )
        ).add(middleware: NoStoreMiddleware())
        media.addRoutes(to: keyed)
        addKeyedRoutes(to: keyed)
        methodGuard.fill(from: Self.routes(of: router))
        return router
    }

    /// `/v1` with its error middleware, and the routes on it that take no key: a device's receipt and opens, and
    /// the preflight of a page's registration. Returns the group.
    func addUnkeyedRoutes(to router: Router<APIRequestContext>) -> RouterGroup<APIRequestContext> {
        let v1 = router.group("v1").add(
            middleware: APIErrorMiddleware(
                health: backend.health,
                isUnavailable: { [backend] in backend.isUnavailable($0) },
                maxBodyBytes: maxBodyBytes,
                diskFloor: diskFloor
            )
        )
        if let receipts {
            ReceiptsController(
                receipts: receipts,
                store: backend.receipts,
                metrics: metrics,
                maxBodyBytes: maxBodyBytes,
                minutes: minutes
            )
            .addRoutes(to: v1)
        } else {
            for path in ["receipts/:token", "receipts/:token/opens"] {
                v1.post(RouterPath(path)) { _, _ -> Response in
                    throw APIError(.notFound, "receipts are off on this server")
                }
            }
        }
        // A page on another origin asks before it registers a device: the preflight carries no key, so it is
        // answered here, before the authenticator, and costs nothing (no lookup, a constant answer).
        v1.on("apps/:app/devices", method: .options) { _, _ in DevicesController.preflight() }
        return v1
    }

    /// The routes behind the authenticator, each resource's controller holding only what it answers from.
    func addKeyedRoutes(to keyed: RouterGroup<APIRequestContext>) {
        AppsController(
            store: store,
            backend: backend,
            maxBodyBytes: maxBodyBytes,
            extraFCMTokenEndpoints: extraFCMTokenEndpoints,
            sandbox: simulate != nil,
            sandboxWebhooks: sandboxWebhooks
        ).addRoutes(to: keyed)
        DevicesController(
            store: store,
            registry: registry,
            providers: providers,
            counts: counts,
            maxBodyBytes: maxBodyBytes,
            limits: registrationLimits
        )
        .addRoutes(to: keyed)
        IdentityController(store: store, maxBodyBytes: maxBodyBytes).addRoutes(to: keyed)
        NotificationsController(
            backend: backend,
            validation: validation,
            maxBodyBytes: maxBodyBytes,
            maxTokensPerRequest: maxTokensPerRequest,
            metrics: metrics,
            fanOuts: fanOuts,
            onAccepted: onAccepted,
            media: self.media,
            quotas: quotas,
            liveBudget: liveBudget,
            counts: counts,
            receipts: receipts,
            providers: providers,
            simulate: simulate,
            insight: insight,
            numbers: numbers,
            minutes: minutes,
            updateLimits: updateLimits,
            keyLimiter: limiter
        ).addRoutes(to: keyed)
        LiveController(
            store: store,
            liveTokens: backend.liveTokens,
            providers: providers,
            maxBodyBytes: maxBodyBytes,
            limits: registrationLimits,
            eventBudget: publicEventBudget,
            metrics: metrics
        )
        .addRoutes(to: keyed)
        PushServicesController(store: store, maxBodyBytes: maxBodyBytes, admission: admission, nodeID: nodeID)
            .addRoutes(to: keyed)
        WebhooksController(
            store: store,
            webhooks: backend.webhooks,
            maxBodyBytes: maxBodyBytes,
            sender: webhookSender,
            policy: webhookPolicy
        ).addRoutes(to: keyed)
    }

    /// The routes a router serves, as (method, OpenAPI path), for the method guard and for keeping the document
    /// honest.
    public static func routes(of router: Router<APIRequestContext>) -> [(method: String, path: String)] {
        router.routes.map { ($0.method.rawValue.lowercased(), $0.path.description) }
    }

    /// `docs/openapi.yaml`, shipped as a resource. The package always copies it; the fallback keeps `/openapi.yaml`
    /// a valid (empty) document should a build leave it out, which the API tests would catch.
    public static let openAPIDocument: String = {
        guard let url = Bundle.module.url(forResource: "openapi", withExtension: "yaml"),
            // A resource of the package: see above for why a fallback, not a failure.
            let text = try? String(contentsOf: url, encoding: .utf8)
        else {
            return "openapi: 3.0.3\ninfo: {title: RichPush API, version: '1'}\npaths: {}\n"
        }
        return text
    }()
}
