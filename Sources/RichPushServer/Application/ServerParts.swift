import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOPosix
import RichPushCore
import ServiceLifecycle

/// The parts of a server, each built once from the configuration and then read, never changed: the database,
/// the push services, the delivery workers and what they share, media, and the API with everything it answers
/// from. ``buildApplication(_:adminKey:logger:onRunning:)`` runs them: `services()` in one group, the API behind
/// `httpServer()`.
struct ServerParts {
    let config: ServerConfiguration
    let logger: Logger
    let opened: OpenedBackend
    var backend: any StorageBackend { opened.backend }
    let setup: ProviderSetup
    let receipts: DeviceReceipts?
    let metrics: ServerMetrics
    /// Counts per notification and minute, from the workers and the API, written every 2 s.
    let minutes: MinuteCounter
    let workers: [DeliveryWorker]
    let mediaStore: MediaStore
    let media: MediaService
    let api: RichPushAPI
    let connections: ConnectionLimits
    /// Sends the apps' webhooks (nil: `webhooks.enabled` is off on this node).
    let webhooks: WebhookSender?
    let fastPath = MediaFastPath.Status()

    /// An outage and the recovery, each said once in the log, the outage with why.
    static func sayDatabaseChanges(_ health: DatabaseHealth, logger: Logger) {
        health.observe { up in
            if up {
                logger.notice("the database answers again: requests and deliveries go on")
            } else {
                logger.error(
                    "the database is unavailable: requests are answered 503 and workers stop claiming until it answers",
                    metadata: ["reason": "\(health.status.reason ?? "unknown")"]
                )
            }
        }
    }

    static func make(_ config: ServerConfiguration, adminKey: String, logger: Logger) async throws -> ServerParts {
        let nodeID = config.nodeID ?? PostgresBackend.newNodeID()
        let opened = try await openBackend(config, nodeID: nodeID, logger: logger)
        let backend = opened.backend
        sayDatabaseChanges(backend.health, logger: logger.part("database"))
        let setup = try await ProviderSetup.make(config, logger: logger.part("providers"))
        let deliveryLog = logger.part("delivery")
        let receipts = opened.receiptsSecret.map { DeviceReceipts(secret: $0, base: config.publicURL) }
        let sender = deliverySender(
            store: backend.store,
            providers: setup.providers,
            receipts: receipts,
            logger: deliveryLog
        )
        let metrics = ServerMetrics()
        let minutes = MinuteCounter { [receipts = backend.receipts] counts in try await receipts.addMinutes(counts) }
        let admission = DeliveryAdmission(limits: config.admissionLimits, metrics: metrics)
        let workers = deliveryWorkers(
            config,
            nodeID: nodeID,
            backend: backend,
            sender: sender,
            admission: admission,
            metrics: metrics,
            minutes: minutes,
            logger: deliveryLog
        )
        backend.workQueued.listen { for worker in workers { worker.wake() } }

        // Media preflight and hosting. Outside the sandbox, fetches refuse every internal address (in the sandbox,
        // media is often plain http on loopback). On a shared database hosted media is kept there too: every node
        // serves every file, its disk a cache.
        let mediaStore = try MediaStore(
            directory: URL(fileURLWithPath: config.resolvedMediaDirectory, isDirectory: true),
            cacheBytes: config.mediaCacheMegabytes << 20,
            shared: backend.sharedMedia
        )
        let fetcher = try SafeFetcher(
            policy: AddressPolicy(allowAll: config.sandbox),
            limits: .init(allowHTTP: config.sandbox)
        )
        let media = MediaService(
            store: mediaStore,
            fetcher: fetcher,
            publicBase: config.publicBase(boundPort: config.port),
            logger: logger
        )
        let connections = ConnectionLimits(config.connections, proxies: config.trustedProxies, metrics: metrics)
        let webhooks =
            config.webhooksEnabled
            ? webhookSender(config, nodeID: nodeID, backend: backend, setup: setup, metrics: metrics, logger: logger)
            : nil
        var api = makeAPI(
            config,
            adminKey: adminKey,
            nodeID: nodeID,
            backend: backend,
            setup: setup,
            sender: sender,
            admission: admission,
            metrics: metrics,
            minutes: minutes,
            media: media,
            receipts: receipts,
            connections: connections
        )
        api.webhookSender = webhooks
        api.webhookPolicy = AddressPolicy(allowAll: config.sandbox)
        api.sandboxWebhooks = setup.sandbox.map { $0.webhooks.url("") }
        return ServerParts(
            config: config,
            logger: logger,
            opened: opened,
            setup: setup,
            receipts: receipts,
            metrics: metrics,
            minutes: minutes,
            workers: workers,
            mediaStore: mediaStore,
            media: media,
            api: api,
            connections: connections,
            webhooks: webhooks
        )
    }

    /// The webhook sender: HTTPS to addresses the policy allows (in sandbox mode loopback too, trusting the
    /// sandbox's CA).
    static func webhookSender(
        _ config: ServerConfiguration,
        nodeID: String,
        backend: any StorageBackend,
        setup: ProviderSetup,
        metrics: ServerMetrics,
        logger: Logger
    ) -> WebhookSender {
        let client = WebhookClient(
            configuration: .init(
                policy: AddressPolicy(allowAll: config.sandbox),
                resolver: SystemResolver(),
                trust: setup.trust,
                requestTimeout: .milliseconds(Int64(config.webhookTimeoutSeconds * 1000))
            ),
            group: MultiThreadedEventLoopGroup.singleton
        )
        return WebhookSender(
            store: backend.webhooks,
            client: client,
            // An endpoint's lease is the deliveries' (a node that died lets go of both alike), and outlasts two of its
            // requests (each request's turn extends it first).
            configuration: .init(
                owner: nodeID + "/webhooks",
                lease: max(config.leaseSeconds, 2 * config.webhookTimeoutSeconds),
                maxEndpointsInFlight: config.webhookEndpointsInFlight
            ),
            metrics: metrics,
            logger: logger.part("webhooks")
        )
    }

    /// The HTTP API and what it answers from: the routes' limits, quotas and caches, as the configuration sets them.
    static func makeAPI(
        _ config: ServerConfiguration,
        adminKey: String,
        nodeID: String,
        backend: any StorageBackend,
        setup: ProviderSetup,
        sender: ProviderDeliverySender,
        admission: DeliveryAdmission,
        metrics: ServerMetrics,
        minutes: MinuteCounter,
        media: MediaService,
        receipts: DeviceReceipts?,
        connections: ConnectionLimits
    ) -> RichPushAPI {
        // The console's simulated iPhone: the device library run on what the APNs emulator received.
        var simulate: (@Sendable (String) async -> JSONValue?)?
        if let sandbox = setup.sandbox {
            simulate = { id in await SimulatedIPhone.run(sandbox: sandbox, notificationID: id) }
        }
        var api = RichPushAPI(
            backend: backend,
            adminKey: adminKey,
            validation: .init(allowInsecureMedia: config.sandbox, requireTargets: false),
            metrics: metrics,
            limiter: RateLimiter(rate: config.rateLimit, burst: config.rateLimit * 2),
            onAccepted: { id, message in sender.remember(id, message) },
            media: media,
            receipts: receipts,
            providers: setup.providers,
            extraFCMTokenEndpoints: Set([setup.sandboxTokenURI].compactMap { $0 }),
            nodeID: nodeID,
            admission: admission,
            simulate: simulate
        )
        api.minutes = minutes
        api.quotas = Quotas(config.quotas, ledger: backend.uploads)
        api.updateLimits = config.updates
        api.insight = InsightStreams(limits: config.insightViews, metrics: metrics) { [numbers = api.numbers] id in
            try await NotificationsController.insightEvent(id, numbers: numbers)
        }
        api.publicClientLimiter = RateLimiter(rate: config.publicRatePerClient, burst: config.publicRatePerClient * 10)
        api.trustedProxies = config.trustedProxies
        api.connections = connections
        // On PostgreSQL the database's disk is the database server's (its "disk full" still answers 507), and hosted
        // media lives there too; this node's disk is a cache.
        if !config.isPostgres, config.minFreeDiskMegabytes > 0 {
            let database = URL(fileURLWithPath: config.database).deletingLastPathComponent().path
            api.diskFloor = DiskFloor(
                folders: [("database", database), ("media", config.resolvedMediaDirectory)],
                minimumFree: Int64(config.minFreeDiskMegabytes * 1_048_576),
                metrics: metrics
            )
        }
        api.registrationLimits = config.registrations
        api.liveBudget = config.livePriority10PerHour.map { RateLimiter(rate: Double($0) / 3600, burst: Double($0)) }
        let events = config.webhookPublicEventsPerSecond
        api.publicEventBudget = RateLimiter(rate: events, burst: events * 1000)
        return api
    }

    /// Every part that runs, in the order one group starts them. The group shuts them down in reverse, each after
    /// the one behind it has finished: the listener first (the application adds it last), then the workers (which
    /// drain the sends they hold), the cluster's and the database's own services, running fan-outs and live
    /// views, the sandbox, the provider clients, and the database last (PostgreSQL's client and health probe run
    /// as the first service; SQLite's pool is closed by the first closer).
    func services() -> [any Service] {
        let (backend, setup, api) = (self.backend, self.setup, self.api)
        let closers: [any Service] = [
            ClosingService(name: "database") { await backend.close() },
            ClosingService(name: "providers") {
                await setup.providers.shutdown()
                await setup.closeFallbacks()
            },
            ClosingService(name: "sandbox") { await setup.sandbox?.stop() },
            // Fan-outs that came before the group ran them (none in a server that is running).
            ClosingService(name: "fan-outs started alone") { api.fanOuts.cancelAll() },
        ]
        let (limiter, publicLimiter, quotas) = (api.limiter, api.publicClientLimiter, api.quotas)
        let eventBudget = api.publicEventBudget
        let cluster = backend.backgroundServices(
            address: "\(config.host):\(config.port)",
            leaderJobs: leaderJobs(config, api: api, backend: backend, metrics: metrics),
            logger: logger
        ) {
            limiter.share(among: $0)
            publicLimiter.share(among: $0)
            eventBudget?.share(among: $0)
            quotas.share(among: $0)
        }
        var sweeper: [any Service] = []
        if config.mediaRetentionDays > 0 {
            let retention = config.mediaRetentionDays * 86_400
            sweeper.append(MediaSweeper(store: mediaStore, retention: retention, metrics: metrics, logger: logger))
        }
        let flusher = MinuteFlusher(counter: minutes, health: backend.health, logger: logger)
        let senders: [any Service] = webhooks.map { [$0] } ?? []
        return opened.first + closers + [flusher, api.fanOuts, api.insight.readers] + opened.services + cluster
            + sweeper + senders + workers.map { WorkerService(worker: $0) }
    }

    /// The HTTP/1.1 server: each connection watched by the guard (the bounds per client and node, idle and slow
    /// ones closed), hosted media answered before the router.
    func httpServer() -> HTTPServerBuilder {
        .http1(
            configuration: .init(
                additionalChannelHandlers: [
                    // The codec's own refusals get the API's error body.
                    ParserRefusalExplainer(),
                    ConnectionGuard(connections),
                    // The connection's idle rule is the fast path's: it sees every request, media ones too.
                    MediaFastPath(
                        store: mediaStore,
                        status: fastPath,
                        idle: .milliseconds(Int64(config.connections.idleSeconds * 1000)),
                        connections: connections,
                        logger: logger.part("media")
                    ),
                ],
                idleTimeout: nil
            )
        )
    }

    var httpLogger: Logger { logger.part("http") }

    /// What runs once the listener is up: the addresses that name the bound port, then `onRunning`.
    func whenRunning(
        _ onRunning: @escaping @Sendable (_ port: Int, _ sandboxAdminPort: Int, _ mediaBase: String) -> Void
    ) -> @Sendable (any Channel) async -> Void {
        let (config, media, receipts, log) = (config, media, receipts, httpLogger)
        let adminPort = setup.sandbox?.adminPort ?? 0
        return { channel in
            let port = channel.localAddress?.port ?? 0
            // Accept a burst of connections (the downloads after a large send) in few loop turns, not four a turn.
            channel.setOption(ChannelOptions.maxMessagesPerRead, value: 256).whenFailure { error in
                log.warning("could not set the listener's accept batch", metadata: ["error": "\(error)"])
            }
            media.publicBase = config.mediaBase(boundPort: port)
            receipts?.base = config.publicBase(boundPort: port)
            onRunning(port, adminPort, media.publicBase)
        }
    }
}

extension Logger {
    /// This logger with `part` in its metadata (which part of the server speaks).
    func part(_ name: String) -> Logger {
        var l = self
        l[metadataKey: "part"] = .string(name)
        return l
    }
}
