import Foundation
import Hummingbird
import Logging
import NIOCore
import RichPushAPNs
import RichPushCore
import RichPushFCM
import RichPushSandbox
import RichPushTransport
import ServiceLifecycle

/// Builds the whole server from its configuration: the database (an SQLite file, or PostgreSQL shared with other
/// nodes), the provider clients (or, in sandbox mode, the emulators they send to), the delivery workers, media
/// preflight and hosting, receipts, periodic jobs and the HTTP API, wired together and ready to run.
///
/// ```swift
/// var config = ServerConfiguration()
/// config.database = "richpush.sqlite"
/// let server = try await buildApplication(config, adminKey: adminKey, logger: Logger(label: "richpush"))
/// try await server.run(gracefulShutdownSignals: [.sigterm, .sigint])
/// ```
///
/// - Parameters:
///   - onRunning: called once the listener is up, with its port, the sandbox admin port (0 without a sandbox in
///     this process) and the base address hosted media is served at.
public func buildApplication(
    _ config: ServerConfiguration,
    adminKey: String,
    logger: Logger,
    onRunning: @escaping @Sendable (_ port: Int, _ sandboxAdminPort: Int, _ mediaBase: String) -> Void = { _, _, _ in }
) async throws -> RichPushApplication {
    let nodeID = config.nodeID ?? PostgresBackend.newNodeID()
    let opened = try await openBackend(config, nodeID: nodeID, logger: logger)
    let backend = opened.backend
    var providerLog = logger
    providerLog[metadataKey: "part"] = "providers"
    let setup = try await ProviderSetup.make(config, logger: providerLog)
    let providers = setup.providers

    var deliveryLog = logger
    deliveryLog[metadataKey: "part"] = "delivery"
    let receipts = opened.receiptsSecret.map { DeviceReceipts(secret: $0, base: config.publicURL) }
    let sender = deliverySender(store: backend.store, providers: providers, receipts: receipts, logger: deliveryLog)
    let metrics = ServerMetrics()
    // Counts per notification and minute, from the workers and the API, written every 2 s.
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
    let wakeWorkers: @Sendable () -> Void = { for worker in workers { worker.wake() } }
    backend.workQueued.listen(wakeWorkers)

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
        providers: providers,
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
    let connections = ConnectionLimits(config.connections, proxies: config.trustedProxies, metrics: metrics)
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

    // Fan-outs a crash cut short are finished before serving (on a shared database, by the leader: a fan-out
    // another node runs is not this node's to take).
    if !config.isPostgres { _ = try await api.resumeFanOuts() }
    let jobs = leaderJobs(config, api: api, backend: backend, metrics: metrics)
    let (limiter, publicLimiter, quotas) = (api.limiter, api.publicClientLimiter, api.quotas)
    let clusterServices = backend.backgroundServices(
        address: "\(config.host):\(config.port)",
        leaderJobs: jobs,
        logger: logger
    ) {
        limiter.share(among: $0)
        publicLimiter.share(among: $0)
        quotas.share(among: $0)
    }
    let sweeper: [any Service] =
        config.mediaRetentionDays > 0
        ? [
            MediaSweeper(
                store: mediaStore,
                retention: config.mediaRetentionDays * 86_400,
                metrics: metrics,
                logger: logger
            )
        ] : []

    // One group runs every part. It shuts them down in reverse order, each after the one behind it has finished:
    // the listener first, then the workers (which drain the sends they hold), the cluster's and the database's
    // own services, running fan-outs, the sandbox, the provider clients, and the database last (PostgreSQL's
    // client and health probe run as the first service; SQLite's pool is closed by the first closer).
    let sandbox = setup.sandbox
    let fanOuts = api.fanOuts
    let closers: [any Service] = [
        ClosingService(name: "database") { await backend.close() },
        ClosingService(name: "providers") {
            await providers.shutdown()
            await setup.closeFallbacks()
        },
        ClosingService(name: "sandbox") { await sandbox?.stop() },
        // Fan-outs that came before the group ran them (none in a server that is running).
        ClosingService(name: "fan-outs started alone") { fanOuts.cancelAll() },
    ]
    let fastPath = MediaFastPath.Status()
    var mediaLogger = logger
    mediaLogger[metadataKey: "part"] = "media"
    let mediaLog = mediaLogger
    var httpLog = logger
    httpLog[metadataKey: "part"] = "http"
    let serverLog = httpLog
    let application = Application(
        router: api.router(),
        server: .http1(
            configuration: .init(
                additionalChannelHandlers: [
                    ConnectionGuard(connections), MediaFastPath(store: mediaStore, status: fastPath, logger: mediaLog),
                ],
                idleTimeout: .milliseconds(Int64(config.connections.idleSeconds * 1000))
            )
        ),
        configuration: .init(address: .hostname(config.host, port: config.port), serverName: "richpush", backlog: 4096),
        services: opened.first + closers + [MinuteFlusher(counter: minutes, health: backend.health, logger: logger)] + [
            fanOuts, api.insight.readers,
        ]
            + opened.services + clusterServices + sweeper
            + workers.map { WorkerService(worker: $0) },
        onServerRunning: { [adminPort = sandbox?.adminPort ?? 0] channel in
            let port = channel.localAddress?.port ?? 0
            // Accept a burst of connections (the downloads after a large send) in few loop turns, not four a turn.
            channel.setOption(ChannelOptions.maxMessagesPerRead, value: 256).whenFailure { error in
                serverLog.warning("could not set the listener's accept batch", metadata: ["error": "\(error)"])
            }
            media.publicBase = config.mediaBase(boundPort: port)
            receipts?.base = config.publicBase(boundPort: port)
            onRunning(port, adminPort, media.publicBase)
        },
        logger: serverLog
    )
    return RichPushApplication(api: api, sandbox: sandbox, mediaFastPath: fastPath, application: application)
}

/// The database the configuration names, ready for the group: `first` runs before every other service and stops
/// after them (PostgreSQL's client and health probe), `services` beside the rest (SQLite's checkpointer). The
/// receipts secret is read here (nil when receipts are off), since on PostgreSQL the backend's own client runs only
/// once the group does.
struct OpenedBackend {
    var backend: any StorageBackend
    var first: [any Service] = []
    var services: [any Service] = []
    var receiptsSecret: [UInt8]?
}

/// The database the configuration names: an SQLite file with its checkpointer, or PostgreSQL shared with other
/// nodes. Credentials are sealed with a key kept in a file (made on first start, never when sealed credentials
/// exist without it: that would lock them away for good).
func openBackend(_ config: ServerConfiguration, nodeID: String, logger: Logger) async throws -> OpenedBackend {
    let keyFile = config.resolvedCredentialsKeyFile
    let sealer = { @Sendable (sealedExist: Bool) throws -> CredentialSealer in
        try CredentialSealer.load(
            keyFile: keyFile,
            create: !FileManager.default.fileExists(atPath: keyFile) && !sealedExist
        )
    }
    let secrets = config.receiptsEnabled ? ["receipts"] : []
    if config.isPostgres {
        var postgresLog = logger
        postgresLog[metadataKey: "part"] = "postgres"
        // The database client's own notes on connections it could not make are repeated for every attempt: above
        // debug, they show only when asked for.
        postgresLog.logLevel = logger.logLevel <= .debug ? logger.logLevel : max(logger.logLevel, .notice)
        // A fan-out a dead node held is taken over after the same time as its deliveries.
        let (backend, values) = try await PostgresBackend.prepared(
            url: config.database,
            sealer: sealer,
            secrets: secrets,
            nodeID: nodeID,
            fanOutLease: max(5, config.leaseSeconds),
            logger: postgresLog
        )
        return OpenedBackend(backend: backend, first: [backend.database], receiptsSecret: values["receipts"])
    }
    let pool = try SQLiteDeliveryQueue.openPool(path: config.database, backgroundCheckpoints: true)
    var sqliteLog = logger
    sqliteLog[metadataKey: "part"] = "sqlite"
    let checkpointer = try WALCheckpointer(pool: pool, logger: sqliteLog)
    let backend = try SQLiteBackend(
        pool: pool,
        sealer: try sealer(try SQLiteServerStore.hasSealedCredentials(pool: pool))
    )
    return OpenedBackend(
        backend: backend,
        services: [checkpointer],
        receiptsSecret: config.receiptsEnabled ? try await backend.store.secret(named: "receipts") : nil
    )
}

/// The push services: in sandbox mode every request goes to the emulators (started here, or a running
/// `richpush sandbox`), and apps without credentials use the sandbox's; otherwise each app's own credentials.
/// A provider joins the server here, with one line in the list.
struct ProviderSetup {
    var providers: Providers
    var sandbox: Sandbox?
    var sandboxTokenURI: String?
    /// Closes the sandbox's own clients (the fallbacks), which the providers use but do not own.
    var closeFallbacks: @Sendable () async -> Void = {}

    static func make(_ config: ServerConfiguration, logger: Logger) async throws -> ProviderSetup {
        var apnsLog = logger
        apnsLog[metadataKey: "provider"] = "apns"
        var fcmLog = logger
        fcmLog[metadataKey: "provider"] = "fcm"
        var webPushLog = logger
        webPushLog[metadataKey: "provider"] = "webpush"
        guard config.sandbox else {
            return ProviderSetup(
                providers: .standard(
                    apns: .init(logger: apnsLog),
                    fcm: .init(logger: fcmLog),
                    webPush: .init(logger: webPushLog)
                )
            )
        }
        // The sandbox fetches media from any address: ServerConfiguration.check() keeps it on loopback.
        try config.check()
        let dir = URL(fileURLWithPath: config.sandboxDirectory, isDirectory: true)
        var sandbox: Sandbox?
        let creds: SandboxCredentials
        let apnsPort: Int
        let fcmPort: Int
        if let a = config.externalSandboxAPNsPort, let f = config.externalSandboxFCMPort {
            creds = try SandboxCredentials.read(from: dir)
            (apnsPort, fcmPort) = (a, f)
        } else {
            var sandboxLog = logger
            sandboxLog[metadataKey: "part"] = "sandbox"
            let s = try await Sandbox.start(directory: dir, threads: 1, logger: sandboxLog)
            sandbox = s
            (creds, apnsPort, fcmPort) = (s.credentials, s.apns.port, s.fcm.port)
        }
        let trust = TLSTrust.certificateAuthority(pem: creds.caCertificatePEM)
        let account = try ServiceAccount(contentsOf: dir.appendingPathComponent("service-account.json"))
        let apnsEndpoint = APNsConfiguration.Endpoint.custom(host: "127.0.0.1", port: apnsPort)
        let fcmEndpoint = FCMConfiguration.Endpoint.custom(host: "127.0.0.1", port: fcmPort)
        let apns = APNsClient(
            configuration: .init(
                endpoint: apnsEndpoint,
                authentication: .token(
                    try APNsSigningKey(p8: creds.apnsKeyPEM, keyID: creds.apnsKeyID, teamID: creds.apnsTeamID)
                ),
                trust: trust,
                logger: apnsLog
            )
        )
        let fcm = FCMClient(
            configuration: .init(serviceAccount: account, endpoint: fcmEndpoint, trust: trust, logger: fcmLog)
        )
        let providers = Providers.standard(
            apns: .init(endpoint: apnsEndpoint, trust: trust, fallback: apns, logger: apnsLog),
            fcm: .init(
                endpoint: fcmEndpoint,
                tokenURI: account.tokenURI,
                trust: trust,
                fallback: fcm,
                fallbackProjectID: account.projectID,
                logger: fcmLog
            ),
            // The sandbox's push service is on loopback: subscriptions it makes are sent to, with its CA.
            webPush: .init(policy: AddressPolicy(allowAll: true), trust: trust, logger: webPushLog)
        )
        return ProviderSetup(providers: providers, sandbox: sandbox, sandboxTokenURI: account.tokenURI) {
            await apns.shutdown()
            await fcm.shutdown()
        }
    }
}

/// Reads each delivery's app and message. Failures are logged where they happen, with the id they concern; the
/// delivery itself then ends with the sender's reason (no app, no message) and is retried by the queue's policy.
func deliverySender(
    store: any ServerStore,
    providers: Providers,
    receipts: DeviceReceipts?,
    logger: Logger
) -> ProviderDeliverySender {
    ProviderDeliverySender(
        providers: providers,
        receipts: receipts,
        app: { id in
            do { return try await store.app(id: id) } catch {
                logger.error("could not read the app", metadata: ["app_id": .string(id), "error": .string("\(error)")])
                throw error
            }
        },
        message: { id in
            do { return try await store.message(id: id) } catch {
                logger.error(
                    "could not read the message",
                    metadata: ["notification_id": .string(id), "error": .string("\(error)")]
                )
                throw error
            }
        }
    )
}

/// `lanes` workers share the node's sends in flight; each claims and settles its own. They share one admission:
/// the bounds per app and per push service origin, and the circuits, are the node's. Leases name the node that
/// holds them (several nodes share a PostgreSQL queue).
func deliveryWorkers(
    _ config: ServerConfiguration,
    nodeID: String,
    backend: any StorageBackend,
    sender: ProviderDeliverySender,
    admission: DeliveryAdmission,
    metrics: ServerMetrics,
    minutes: MinuteCounter? = nil,
    logger: Logger
) -> [DeliveryWorker] {
    let registry = backend.registry
    let lanes = max(1, min(config.lanes, config.concurrency))
    return (1...lanes).map { lane in
        DeliveryWorker(
            configuration: .init(
                owner: "\(nodeID)/w\(lane)",
                batchSize: config.batchSize,
                concurrency: config.concurrency / lanes + (lane <= config.concurrency % lanes ? 1 : 0),
                lease: config.leaseSeconds
            ),
            queue: backend.queue,
            sender: sender,
            admission: admission,
            metrics: metrics,
            health: backend.health,
            updates: backend.updates,
            minutes: minutes,
            logger: logger,
            prune: { d, _ in
                // A topic or a condition has no device to prune.
                guard let token = d.target.token else { return }
                do { _ = try await registry.prune(appID: d.appID, token: token, invalidSince: nil) } catch {
                    logger.error(
                        "could not prune a gone token",
                        metadata: ["delivery_id": .string("\(d.id)"), "error": .string("\(error)")]
                    )
                }
            }
        )
    }
}

/// Periodic work one node does for all: notifications past their retention, and on a shared database resuming
/// fan-outs a dead node left and sweeping shared media.
func leaderJobs(
    _ config: ServerConfiguration,
    api: RichPushAPI,
    backend: any StorageBackend,
    metrics: ServerMetrics
)
    -> [PeriodicJob]
{
    var jobs: [PeriodicJob] = []
    if config.notificationRetentionDays > 0 {
        let retention = config.notificationRetentionDays * 86_400
        jobs.append(
            PeriodicJob(name: "sweep-notifications", interval: 600) {
                // A thousand at a time until none is left, so that a backlog (a first start with retention on)
                // goes in one run without one long transaction.
                while true {
                    let cutoff = Date().addingTimeInterval(-retention)
                    let n = try await backend.sweepNotifications(before: cutoff, limit: 1000)
                    metrics.notificationsSwept(n)
                    if n < 1000 { break }
                }
            }
        )
    }
    // An activity's update token is worth nothing 12 hours after it was registered: 8 hours of activity and 4
    // on the Lock Screen after its end; a push-to-start token not registered again for 30 days belongs to a device
    // gone. The table stays the size of what is running and who is around.
    jobs.append(
        PeriodicJob(name: "sweep-live-tokens", interval: 600) {
            for kind in LiveToken.Kind.allCases {
                while try await backend.liveTokens.sweep(
                    kind,
                    before: Date().addingTimeInterval(-LiveTokenLimits.lifetime(kind)),
                    limit: 1000
                ) == 1000 {}
            }
        }
    )
    guard config.isPostgres else { return jobs }
    jobs.append(PeriodicJob(name: "resume-fan-outs", interval: 5) { _ = try await api.resumeFanOuts() })
    if config.mediaRetentionDays > 0, let shared = backend.sharedMedia {
        let retention = config.mediaRetentionDays * 86_400
        jobs.append(
            PeriodicJob(name: "sweep-shared-media", interval: 3600) {
                let (files, bytes) = try await shared.sweep(before: Date().addingTimeInterval(-retention))
                metrics.mediaSwept(files: files, bytes: bytes)
            }
        )
    }
    return jobs
}
