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

    func run() async throws {
        let environmentKey = ProcessInfo.processInfo.environment["RICHPUSH_ADMIN_KEY"]
        let admin = adminKey ?? environmentKey ?? ServerStore.newKey()
        let source = adminKey != nil ? "flag" : environmentKey != nil ? "environment" : "generated"
        let (host, db) = (self.host, self.db)
        let announce: @Sendable (String) -> Void = { FileHandle.standardOutput.write(Data(($0 + "\n").utf8)) }
        let server = try await LocalServer.make(db: db, host: host, port: port, adminKey: admin, sandboxDir: sandboxDir) { port, sandboxAdmin in
            announce(#"{"listening":"http://\#(host):\#(port)","database":"\#(db)","admin_key_source":"\#(source)","sandbox_admin":"http://127.0.0.1:\#(sandboxAdmin)"}"#)
            if source == "generated" { announce("admin key (shown once): \(admin)") }
        }
        try await server.run(signals: [.sigterm, .sigint])
    }
}
