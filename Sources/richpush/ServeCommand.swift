import ArgumentParser
import Foundation
import Hummingbird
import RichPushAPNs
import RichPushCore
import RichPushFCM
import RichPushSandbox
import RichPushServer
import UnixSignals

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
    @Option(name: .customLong("external-apns-port"), help: "Use a running `richpush sandbox` (its --dir is --sandbox-dir): its APNs port.") var externalAPNsPort: Int?
    @Option(name: .customLong("external-fcm-port"), help: "The running sandbox's FCM port.") var externalFCMPort: Int?
    @Option(help: "Seconds a worker holds claimed deliveries; after a crash they are sent again once it runs out.") var lease: Double = 60
    @Option(name: .customLong("rate-limit"), help: "Requests a second per API key (bursts of twice that).") var rateLimit: Double = 200

    func validate() throws {
        if (externalAPNsPort == nil) != (externalFCMPort == nil) { throw ValidationError("give both --external-apns-port and --external-fcm-port, or neither") }
    }

    func run() async throws {
        let environmentKey = ProcessInfo.processInfo.environment["RICHPUSH_ADMIN_KEY"]
        let admin = adminKey ?? environmentKey ?? ServerStore.newKey()
        let source = adminKey != nil ? "flag" : environmentKey != nil ? "environment" : "generated"
        let (host, db) = (self.host, self.db)
        let announce: @Sendable (String) -> Void = { FileHandle.standardOutput.write(Data(($0 + "\n").utf8)) }
        let providers: LocalServer.Providers = externalAPNsPort.map { .externalSandbox(directory: sandboxDir, apnsPort: $0, fcmPort: externalFCMPort ?? 0) } ?? .inProcessSandbox(directory: sandboxDir)
        let server = try await LocalServer.make(db: db, host: host, port: port, adminKey: admin, providers: providers, lease: lease, rateLimit: rateLimit) { port, sandboxAdmin in
            announce(#"{"listening":"http://\#(host):\#(port)","database":"\#(db)","admin_key_source":"\#(source)","sandbox_admin":"http://127.0.0.1:\#(sandboxAdmin)"}"#)
            if source == "generated" { announce("admin key (shown once): \(admin)") }
        }
        try await server.run(signals: [.sigterm, .sigint])
    }
}
