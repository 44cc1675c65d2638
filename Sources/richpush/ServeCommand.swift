import ArgumentParser
import Foundation
import Hummingbird
import RichPushAPNs
import RichPushCore
import RichPushFCM
import RichPushSandbox
import RichPushServer

struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the RichPush server: HTTP API, device registry and durable queue in one SQLite file, and delivery workers.",
        discussion: """
            This version sends through the built-in sandbox (APNs and FCM emulators started in this process); uploading real
            provider credentials per app is still to come. The admin key comes from --admin-key or RICHPUSH_ADMIN_KEY; without
            either, one is generated and printed once.
            """
    )

    @Option(help: "The SQLite database file.") var db = "richpush.sqlite"
    @Option(help: "Address to listen on.") var host = "127.0.0.1"
    @Option(help: "Port (0: any free port).") var port = 8080
    @Option(name: .customLong("admin-key"), help: "The admin API key.") var adminKey: String?
    @Option(name: .customLong("sandbox-dir"), help: "Folder for the sandbox credentials.") var sandboxDir = ".richpush-sandbox"

    func run() async throws {
        let admin = adminKey ?? ProcessInfo.processInfo.environment["RICHPUSH_ADMIN_KEY"] ?? ServerStore.newKey()
        let pool = try SQLiteDeliveryQueue.openPool(path: db)
        let queue = try SQLiteDeliveryQueue(pool: pool)
        let registry = try SQLiteDeviceRegistry(pool: pool)
        let store = try ServerStore(pool: pool)

        let sandbox = try await Sandbox.start(directory: URL(fileURLWithPath: sandboxDir, isDirectory: true), threads: 1)
        let creds = sandbox.credentials
        let apns = APNsClient(configuration: .init(
            endpoint: .custom(host: "127.0.0.1", port: sandbox.apns.port),
            authentication: .token(try APNsSigningKey(p8: creds.apnsKeyPEM, keyID: creds.apnsKeyID, teamID: creds.apnsTeamID)),
            trust: .certificateAuthority(pem: creds.caCertificatePEM)))
        let account = try ServiceAccount(contentsOf: sandbox.files["service-account"]!)
        let fcm = FCMClient(configuration: .init(serviceAccount: account, endpoint: .custom(host: "127.0.0.1", port: sandbox.fcm.port), trust: .certificateAuthority(pem: creds.caCertificatePEM)))
        let sender = ProviderDeliverySender(
            app: { id in
                guard let app = try? await store.app(id: id) else { return nil }
                return .init(apns: apns, bundleID: app.bundleID, fcm: fcm, fcmProjectID: account.projectID)
            },
            message: { id in try? await store.message(id: id) })
        let metrics = ServerMetrics()
        let worker = DeliveryWorker(queue: queue, sender: sender, metrics: metrics, prune: { d, _ in _ = try? await registry.prune(appID: d.appID, token: d.target, invalidSince: nil) })

        // Media in tests and the demo is often on loopback over http: the sandbox allows it.
        let api = RichPushAPI(store: store, registry: registry, queue: queue, adminKey: admin, validation: .init(allowInsecureMedia: true, requireTargets: false), metrics: metrics)
        let announce: @Sendable (String) -> Void = { FileHandle.standardOutput.write(Data(($0 + "\n").utf8)) }
        let app = Application(
            router: api.router(), configuration: .init(address: .hostname(host, port: port), serverName: "richpush"),
            services: [WorkerService(worker: worker)],
            onServerRunning: { channel in
                announce(#"{"listening":"http://\#(host):\#(channel.localAddress?.port ?? 0)","database":"\#(db)","admin_key_source":"\#(adminKey != nil ? "flag" : ProcessInfo.processInfo.environment["RICHPUSH_ADMIN_KEY"] != nil ? "environment" : "generated")","sandbox_admin":"http://127.0.0.1:\#(sandbox.adminPort)"}"#)
                if adminKey == nil && ProcessInfo.processInfo.environment["RICHPUSH_ADMIN_KEY"] == nil { announce("admin key (shown once): \(admin)") }
            })
        try await app.runService()
        await apns.shutdown()
        await fcm.shutdown()
        await sandbox.stop()
    }
}
