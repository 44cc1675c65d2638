import Foundation
import Hummingbird
import Logging
import NIOConcurrencyHelpers
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
///   - connectionLoops: the event loops the API's connections run on (the process's shared loops by default; a
///     test that makes them busy gives loops of its own).
///   - onRunning: called once the listener is up, with its port, the sandbox admin port (0 without a sandbox in
///     this process) and the base address hosted media is served at.
public func buildApplication(
    _ config: ServerConfiguration,
    adminKey: String,
    logger: Logger,
    connectionLoops: (any EventLoopGroup)? = nil,
    onRunning: @escaping @Sendable (_ port: Int, _ sandboxAdminPort: Int, _ mediaBase: String) -> Void = { _, _, _ in }
) async throws -> RichPushApplication {
    let parts = try await ServerParts.make(config, adminKey: adminKey, logger: logger)
    // Fan-outs a crash cut short are finished before serving (on a shared database, by the leader: a fan-out
    // another node runs is not this node's to take).
    if !config.isPostgres { _ = try await parts.api.resumeFanOuts() }
    let application = Application(
        router: parts.api.router(),
        server: parts.httpServer(),
        configuration: .init(address: .hostname(config.host, port: config.port), serverName: "richpush", backlog: 4096),
        services: parts.services(),
        onServerRunning: parts.whenRunning(onRunning),
        eventLoopGroupProvider: connectionLoops.map { .shared($0) } ?? .singleton,
        logger: parts.httpLogger
    )
    return RichPushApplication(
        api: parts.api,
        sandbox: parts.setup.sandbox,
        mediaFastPath: parts.fastPath,
        application: application
    )
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
    // A key made now is written at once (two nodes starting together on one folder then share it), and removed
    // again if the database refuses it (it holds another node's key): a node that refuses to start leaves nothing.
    let made = NIOLockedValueBox<CredentialSealer?>(nil)
    let sealer = { @Sendable (sealedExist: Bool) throws -> CredentialSealer in
        let s = try CredentialSealer.load(
            keyFile: keyFile,
            create: !FileManager.default.fileExists(atPath: keyFile) && !sealedExist
        )
        made.withLockedValue { $0 = s }
        return s
    }
    let undo = { @Sendable in made.withLockedValue { $0 }?.removeMadeFile() }
    let secrets = config.receiptsEnabled ? ["receipts"] : []
    if config.isPostgres {
        var postgresLog = logger
        postgresLog[metadataKey: "part"] = "postgres"
        // The database client's own notes on connections it could not make are repeated for every attempt: above
        // debug, they show only when asked for.
        postgresLog.logLevel = logger.logLevel <= .debug ? logger.logLevel : max(logger.logLevel, .notice)
        // A fan-out a dead node held is taken over after the same time as its deliveries.
        let (backend, values): (PostgresBackend, [String: [UInt8]])
        do {
            (backend, values) = try await PostgresBackend.prepared(
                url: config.database,
                sealer: sealer,
                secrets: secrets,
                nodeID: nodeID,
                fanOutLease: max(5, config.leaseSeconds),
                logger: postgresLog
            )
        } catch {
            undo()
            throw error
        }
        return OpenedBackend(backend: backend, first: [backend.database], receiptsSecret: values["receipts"])
    }
    let pool = try SQLiteDeliveryQueue.openPool(path: config.database, backgroundCheckpoints: true)
    var sqliteLog = logger
    sqliteLog[metadataKey: "part"] = "sqlite"
    let checkpointer = try WALCheckpointer(pool: pool, logger: sqliteLog)
    let backend: SQLiteBackend
    do {
        backend = try SQLiteBackend(
            pool: pool,
            sealer: try sealer(try SQLiteServerStore.hasSealedCredentials(pool: pool))
        )
    } catch {
        undo()
        throw error
    }
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
    /// Whom outbound TLS trusts besides the push services' own: the sandbox's CA in sandbox mode (its webhook
    /// receiver), the system's otherwise.
    var trust: TLSTrust = .system
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
        return ProviderSetup(providers: providers, sandbox: sandbox, sandboxTokenURI: account.tokenURI, trust: trust) {
            await apns.shutdown()
            await fcm.shutdown()
        }
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
    // Webhooks: `notification.completed` for the notifications that ended, and events past their retention.
    jobs.append(
        PeriodicJob(name: "webhook-completions", interval: 1) {
            while try await backend.webhooks.completeNotifications(now: Date(), limit: 200) == 200 {}
        }
    )
    jobs.append(
        PeriodicJob(name: "sweep-webhook-events", interval: 300) {
            let cutoff = Date().addingTimeInterval(-WebhookLimits.retention)
            while try await backend.webhooks.sweep(before: cutoff, limit: 5000) == 5000 {}
        }
    )
    // What a request that began before an app's deletion wrote after it goes too (AppDeletion).
    jobs.append(
        PeriodicJob(name: "purge-deleted-apps", interval: 60) { _ = try await backend.purgeDeletedApps(now: Date()) }
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
