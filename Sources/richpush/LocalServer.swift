import Foundation
import Hummingbird
import NIOCore
import Logging
import RichPushAPNs
import RichPushCore
import RichPushFCM
import RichPushSandbox
import RichPushServer
import RichPushTransport
import ServiceLifecycle
import UnixSignals

/// The whole server in this process: SQLite store, registry and queue, API, worker, and (in sandbox mode) the
/// emulators it sends to. `richpush serve` runs it until a signal; `richpush demo` starts one and talks to it.
struct LocalServer {
    let sandbox: Sandbox?
    let clients: ProviderClients
    let api: RichPushAPI
    let backend: any StorageBackend
    let application: Application<RouterResponder<APIRequestContext>>

    /// The database the configuration names: an SQLite file with its checkpointer, or PostgreSQL shared with
    /// other nodes. Credentials are sealed with a key kept in a file (made on first start, never when sealed
    /// credentials exist without it: that would lock them away for good).
    static func openBackend(_ config: ServerConfiguration, nodeID: String, logLevel: Logger.Level) async throws -> (any StorageBackend, [any Service]) {
        let keyFile = config.resolvedCredentialsKeyFile
        let sealer = { (sealedExist: Bool) throws -> CredentialSealer in
            try CredentialSealer.load(keyFile: keyFile, create: !FileManager.default.fileExists(atPath: keyFile) && !sealedExist)
        }
        if config.isPostgres {
            // A fan-out a dead node held is taken over after the same time as its deliveries.
            var logger = Logger(label: "richpush.postgres")
            // The database client's own notes on connections it could not make are repeated for every attempt: above
            // debug, they show only when asked for.
            logger.logLevel = logLevel <= .debug ? logLevel : max(logLevel, .notice)
            return (try await PostgresBackend.open(url: config.database, sealer: sealer, nodeID: nodeID, fanOutLease: max(5, config.leaseSeconds), logger: logger), [])
        }
        let pool = try SQLiteDeliveryQueue.openPool(path: config.database, backgroundCheckpoints: true)
        let checkpointer = try WALCheckpointer(path: config.database)
        return (try SQLiteBackend(pool: pool, sealer: try sealer(try SQLiteServerStore.hasSealedCredentials(pool: pool))), [checkpointer])
    }

    static func make(_ config: ServerConfiguration, adminKey: String, logLevel: Logger.Level = .info, onRunning: @escaping @Sendable (_ port: Int, _ sandboxAdminPort: Int, _ mediaBase: String) -> Void) async throws -> LocalServer {
        let nodeID = config.nodeID ?? PostgresBackend.newNodeID()
        let (backend, databaseServices) = try await openBackend(config, nodeID: nodeID, logLevel: logLevel)
        let (store, registry, queue) = (backend.store, backend.registry, backend.queue)

        // In sandbox mode every request goes to the emulators; apps without credentials use the sandbox's.
        var sandbox: Sandbox?
        let clients: ProviderClients
        var sandboxTokenURI: String?
        if config.sandbox {
            // The sandbox fetches media from any address: ServerConfiguration.check() keeps it on loopback.
            try config.check()
            let dir = URL(fileURLWithPath: config.sandboxDirectory, isDirectory: true)
            let creds: SandboxCredentials
            let apnsPort: Int, fcmPort: Int
            if let a = config.externalSandboxAPNsPort, let f = config.externalSandboxFCMPort {
                creds = try SandboxCredentials.read(from: dir)
                (apnsPort, fcmPort) = (a, f)
            } else {
                let s = try await Sandbox.start(directory: dir, threads: 1)
                sandbox = s
                (creds, apnsPort, fcmPort) = (s.credentials, s.apns.port, s.fcm.port)
            }
            let trust = TLSTrust.certificateAuthority(pem: creds.caCertificatePEM)
            let account = try ServiceAccount(contentsOf: dir.appendingPathComponent("service-account.json"))
            sandboxTokenURI = account.tokenURI
            let apns = APNsClient(configuration: .init(
                endpoint: .custom(host: "127.0.0.1", port: apnsPort),
                authentication: .token(try APNsSigningKey(p8: creds.apnsKeyPEM, keyID: creds.apnsKeyID, teamID: creds.apnsTeamID)), trust: trust))
            let fcm = FCMClient(configuration: .init(serviceAccount: account, endpoint: .custom(host: "127.0.0.1", port: fcmPort), trust: trust))
            clients = ProviderClients(
                routing: .init(apnsEndpoint: .custom(host: "127.0.0.1", port: apnsPort), fcmEndpoint: .custom(host: "127.0.0.1", port: fcmPort), fcmTokenURI: account.tokenURI, trust: trust),
                fallback: .init(apns: apns, fcm: fcm, fcmProjectID: account.projectID))
        } else {
            clients = ProviderClients()
        }

        // Failures on the delivery path are logged where they happen, with the id they concern; the delivery itself
        // then ends with the sender's reason (no app, no message) and is retried by the queue's policy.
        var deliveryLog = Logger(label: "richpush.delivery")
        deliveryLog.logLevel = logLevel
        let log = deliveryLog
        let sender = ProviderDeliverySender(
            app: { id in
                do {
                    guard let app = try await store.app(id: id) else { return nil }
                    return clients.sender(for: app)
                } catch {
                    log.error("could not read the app", metadata: ["app_id": .string(id), "error": .string("\(error)")])
                    return nil
                }
            },
            message: { id in
                do { return try await store.message(id: id) } catch {
                    log.error("could not read the message", metadata: ["notification_id": .string(id), "error": .string("\(error)")])
                    return nil
                }
            })
        let metrics = ServerMetrics()
        // Leases name the node that holds them (several nodes share a PostgreSQL queue).
        // `lanes` workers share the sends in flight; each claims and settles its own batches.
        let lanes = max(1, min(config.lanes, config.concurrency))
        let workers = (1...lanes).map { lane in
            DeliveryWorker(
                configuration: .init(
                    owner: "\(nodeID)/w\(lane)", batchSize: config.batchSize,
                    concurrency: config.concurrency / lanes + (lane <= config.concurrency % lanes ? 1 : 0), lease: config.leaseSeconds),
                queue: queue, sender: sender, metrics: metrics, health: backend.health, logger: deliveryLog,
                prune: { d, _ in
                    do { _ = try await registry.prune(appID: d.appID, token: d.target, invalidSince: nil) } catch {
                        log.error("could not prune a gone token", metadata: ["delivery_id": .string("\(d.id)"), "error": .string("\(error)")])
                    }
                })
        }
        let wakeWorkers: @Sendable () -> Void = { for worker in workers { worker.wake() } }
        // Media in the sandbox is often on loopback over http: allowed there, refused otherwise.
        var api = RichPushAPI(
            backend: backend, adminKey: adminKey,
            validation: .init(allowInsecureMedia: config.sandbox, requireTargets: false), metrics: metrics,
            limiter: RateLimiter(rate: config.rateLimit, burst: config.rateLimit * 2), onQueued: wakeWorkers)
        api.onAccepted = { id, message in sender.remember(id, message) }
        api.nodeID = nodeID
        if let running = sandbox { api.simulate = { id in await SimulatedIPhone.run(sandbox: running, notificationID: id) } }
        backend.onWorkQueued(wakeWorkers)
        api.providers = { clients.sender(for: $0) }
        api.extraFCMTokenEndpoints = Set([sandboxTokenURI].compactMap { $0 })
        // Media preflight and hosting. Outside the sandbox, fetches refuse every internal address.
        // On a shared database hosted media is kept there too: every node serves every file, its disk a cache.
        let mediaStore = try MediaStore(
            directory: URL(fileURLWithPath: config.resolvedMediaDirectory, isDirectory: true), cacheBytes: config.mediaCacheMegabytes << 20, shared: backend.sharedMedia)
        let fetcher = try SafeFetcher(policy: AddressPolicy(allowAll: config.sandbox), limits: .init(allowHTTP: config.sandbox))
        let media = MediaService(store: mediaStore, fetcher: fetcher, publicBase: config.publicBase(boundPort: config.port))
        api.media = media
        let receipts: DeviceReceipts? = config.receiptsEnabled ? DeviceReceipts(secret: try await store.secret(named: "receipts"), base: config.publicURL) : nil
        api.receipts = receipts

        // Fan-outs a crash cut short are finished before serving (on a shared database, by the leader: a fan-out
        // another node runs is not this node's to take).
        if !config.isPostgres { _ = try await api.resumeFanOuts() }
        // Periodic work one node does for all: resuming fan-outs a dead node left, sweeping shared media.
        var jobs: [PeriodicJob] = []
        if config.isPostgres {
            let resuming = api
            jobs.append(PeriodicJob(name: "resume-fan-outs", interval: 5) { _ = try await resuming.resumeFanOuts() })
            if config.mediaRetentionDays > 0, let shared = backend.sharedMedia {
                let retention = config.mediaRetentionDays * 86_400
                jobs.append(PeriodicJob(name: "sweep-shared-media", interval: 3600) {
                    let (files, bytes) = try await shared.sweep(before: Date().addingTimeInterval(-retention))
                    metrics.mediaSwept(files: files, bytes: bytes)
                })
            }
        }
        let limiter = api.limiter
        let clusterServices = backend.backgroundServices(address: "\(config.host):\(config.port)", leaderJobs: jobs) { limiter.share(among: $0) }
        var logger = Logger(label: "richpush")
        logger.logLevel = logLevel
        let application = Application(
            router: api.router(), server: .http1(configuration: .init(additionalChannelHandlers: [MediaFastPath(store: mediaStore)])),
            configuration: .init(address: .hostname(config.host, port: config.port), serverName: "richpush", backlog: 4096),
            services: workers.map { WorkerService(worker: $0) } + databaseServices + clusterServices
                + (config.mediaRetentionDays > 0 ? [MediaSweeper(store: mediaStore, retention: config.mediaRetentionDays * 86_400, metrics: metrics)] : []),
            onServerRunning: { [adminPort = sandbox?.adminPort ?? 0] channel in
                let port = channel.localAddress?.port ?? 0
                // Accept a burst of connections (the downloads after a large send) in few loop turns, not four a turn.
                channel.setOption(ChannelOptions.maxMessagesPerRead, value: 256).whenFailure { _ in }
                media.publicBase = config.mediaBase(boundPort: port)
                receipts?.base = config.publicBase(boundPort: port)
                onRunning(port, adminPort, media.publicBase)
            }, logger: logger)
        return LocalServer(sandbox: sandbox, clients: clients, api: api, backend: backend, application: application)
    }

    /// Runs until the signals (or the task's cancellation) stop it.
    func run(signals: [UnixSignal]) async throws {
        try await application.runService(gracefulShutdownSignals: signals)
        api.fanOuts.cancelAll()
        await clients.shutdown()
        await sandbox?.stop()
        await backend.close()
    }
}
