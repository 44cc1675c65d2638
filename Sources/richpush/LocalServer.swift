import Foundation
import Hummingbird
import Logging
import RichPushAPNs
import RichPushCore
import RichPushFCM
import RichPushSandbox
import RichPushServer
import UnixSignals

/// The whole server in this process: SQLite store, registry and queue, API, worker, and the sandbox emulators
/// it sends through. `richpush serve` runs it until a signal; `richpush demo` starts one and talks to it.
struct LocalServer {
    /// Where the providers are: emulators started in this process, or a `richpush sandbox` already running.
    enum Providers {
        case inProcessSandbox(directory: String)
        case externalSandbox(directory: String, apnsPort: Int, fcmPort: Int)
    }

    let sandbox: Sandbox?
    let apns: APNsClient
    let fcm: FCMClient
    let application: Application<RouterResponder<BasicRequestContext>>

    static func make(db: String, host: String, port: Int, adminKey: String, providers: Providers, lease: TimeInterval = 60, rateLimit: Double = 200, logLevel: Logger.Level = .info, onRunning: @escaping @Sendable (_ port: Int, _ sandboxAdminPort: Int) -> Void) async throws -> LocalServer {
        let pool = try SQLiteDeliveryQueue.openPool(path: db)
        let queue = try SQLiteDeliveryQueue(pool: pool)
        let registry = try SQLiteDeviceRegistry(pool: pool)
        let store = try ServerStore(pool: pool)
        let sandbox: Sandbox?
        let creds: SandboxCredentials
        let apnsPort: Int, fcmPort: Int
        let serviceAccountFile: URL
        switch providers {
        case .inProcessSandbox(let dir):
            let s = try await Sandbox.start(directory: URL(fileURLWithPath: dir, isDirectory: true), threads: 1)
            (sandbox, creds, apnsPort, fcmPort) = (s, s.credentials, s.apns.port, s.fcm.port)
            serviceAccountFile = s.files["service-account"]!
        case let .externalSandbox(dir, a, f):
            sandbox = nil
            creds = try SandboxCredentials.read(from: URL(fileURLWithPath: dir, isDirectory: true))
            (apnsPort, fcmPort) = (a, f)
            serviceAccountFile = URL(fileURLWithPath: dir).appendingPathComponent("service-account.json")
        }
        let apns = APNsClient(configuration: .init(
            endpoint: .custom(host: "127.0.0.1", port: apnsPort),
            authentication: .token(try APNsSigningKey(p8: creds.apnsKeyPEM, keyID: creds.apnsKeyID, teamID: creds.apnsTeamID)),
            trust: .certificateAuthority(pem: creds.caCertificatePEM)))
        let account = try ServiceAccount(contentsOf: serviceAccountFile)
        let fcm = FCMClient(configuration: .init(serviceAccount: account, endpoint: .custom(host: "127.0.0.1", port: fcmPort), trust: .certificateAuthority(pem: creds.caCertificatePEM)))
        let sender = ProviderDeliverySender(
            app: { id in
                guard let app = try? await store.app(id: id) else { return nil }
                return .init(apns: apns, bundleID: app.bundleID, fcm: fcm, fcmProjectID: account.projectID)
            },
            message: { id in try? await store.message(id: id) })
        let metrics = ServerMetrics()
        let worker = DeliveryWorker(configuration: .init(lease: lease), queue: queue, sender: sender, metrics: metrics, prune: { d, _ in _ = try? await registry.prune(appID: d.appID, token: d.target, invalidSince: nil) })
        // Media in the sandbox is often on loopback over http: allowed here.
        let api = RichPushAPI(store: store, registry: registry, queue: queue, adminKey: adminKey, validation: .init(allowInsecureMedia: true, requireTargets: false), metrics: metrics, limiter: RateLimiter(rate: rateLimit, burst: rateLimit * 2))
        var logger = Logger(label: "richpush")
        logger.logLevel = logLevel
        let application = Application(
            router: api.router(), configuration: .init(address: .hostname(host, port: port), serverName: "richpush"),
            services: [WorkerService(worker: worker)],
            onServerRunning: { [adminPort = sandbox?.adminPort ?? 0] channel in onRunning(channel.localAddress?.port ?? 0, adminPort) }, logger: logger)
        return LocalServer(sandbox: sandbox, apns: apns, fcm: fcm, application: application)
    }

    /// Runs until the signals (or the task's cancellation) stop it.
    func run(signals: [UnixSignal]) async throws {
        try await application.runService(gracefulShutdownSignals: signals)
        await apns.shutdown()
        await fcm.shutdown()
        await sandbox?.stop()
    }
}
