import ArgumentParser
import Foundation
import Hummingbird
import Logging
import RichPushServer
import UnixSignals

struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract:
            "Run the RichPush server: HTTP API, device registry, durable queue (one SQLite file, or PostgreSQL shared by several nodes) and delivery workers.",
        discussion: """
            Settings come from --config (a JSON file), then RICHPUSH_* environment variables, then flags. With none, the \
            server uses richpush.sqlite and sandbox mode: the APNs and FCM emulators run in this process and every send goes \
            to them. Turn sandbox mode off ("sandbox": {"enabled": false} or RICHPUSH_SANDBOX=0) to send to Apple and \
            Google with each app's own credentials. The admin key comes from the file, RICHPUSH_ADMIN_KEY or --admin-key; \
            without one, a key is generated and printed once.
            """
    )

    @Option(help: "A JSON configuration file.") var config: String?
    @Option(
        name: [.customLong("database"), .customLong("db")],
        help: "An SQLite file, or postgres://USER:PASSWORD@HOST:PORT/DB for several nodes on one PostgreSQL."
    )
    var db: String?
    @Option(
        name: .customLong("node-id"),
        help: "This node's id among the nodes of one PostgreSQL (default: host, process id and a random part)."
    )
    var nodeID: String?
    @Option(help: "Address to listen on.") var host: String?
    @Option(help: "Port (0: any free port).") var port: Int?
    @Option(name: .customLong("admin-key"), help: "The admin API key (16 characters or more).") var adminKey: String?
    @Option(name: .customLong("public-url"), help: "The address devices reach this server at (hosted media).")
    var publicURL: String?
    @Option(name: .customLong("sandbox-dir"), help: "Folder for the sandbox credentials.") var sandboxDir: String?
    @Option(
        name: .customLong("external-apns-port"),
        help: "Use a running `richpush sandbox` (its --dir is --sandbox-dir): its APNs port."
    ) var externalAPNsPort: Int?
    @Option(name: .customLong("external-fcm-port"), help: "The running sandbox's FCM port.") var externalFCMPort: Int?
    @Option(help: "Seconds a worker holds claimed deliveries; after a crash they are sent again once it runs out.")
    var lease: Double?
    @Option(name: .customLong("rate-limit"), help: "Requests a second per API key (bursts of twice that).")
    var rateLimit: Double?
    @Option(
        name: .customLong("public-rate-per-client"),
        help:
            "Requests a second one client address may make with an app's public (register) key (bursts of ten times that)."
    )
    var publicRatePerClient: Double?
    @Option(
        name: .customLong("log-level"),
        help: "trace, debug, info (the default), notice, warning, error or critical (also RICHPUSH_LOG_LEVEL)."
    )
    var logLevel: String?
    @Flag(name: .customLong("sandbox-public"), help: "Let sandbox mode listen on an address other machines reach.")
    var sandboxPublic = false

    /// File, then environment, then flags.
    func resolved() throws -> ServerConfiguration {
        var c = ServerConfiguration()
        if let path = config {
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw ValidationError("cannot read the configuration file \(path)")
            }
            try c.apply(json: text, checking: false)
        }
        // Each source's values are checked as read; how they combine, once every one is applied (below).
        try c.apply(environment: ProcessInfo.processInfo.environment, checking: false)
        if let v = db { c.database = v }
        if let v = nodeID { c.nodeID = v }
        if let v = host { c.host = v }
        if let v = port { c.port = v }
        if let v = adminKey { c.adminKey = v }
        if let v = publicURL { c.publicURL = v }
        if let v = sandboxDir { c.sandboxDirectory = v }
        if let v = externalAPNsPort { c.externalSandboxAPNsPort = v }
        if let v = externalFCMPort { c.externalSandboxFCMPort = v }
        if let v = lease { c.leaseSeconds = v }
        if let v = rateLimit { c.rateLimit = v }
        if let v = publicRatePerClient { c.publicRatePerClient = v }
        c.sandboxPublic = sandboxPublic
        try c.check()
        return c
    }

    func run() async throws {
        let c: ServerConfiguration
        do { c = try resolved() } catch let p as ServerConfiguration.Problem { throw ValidationError(p.description) }
        let admin = c.adminKey ?? APIKeys.newKey()
        let generated = c.adminKey == nil
        let announce: @Sendable (String) -> Void = { FileHandle.standardOutput.write(Data(($0 + "\n").utf8)) }
        let levelName = logLevel ?? ProcessInfo.processInfo.environment["RICHPUSH_LOG_LEVEL"] ?? "info"
        guard let level = Logger.Level(rawValue: levelName.lowercased()) else {
            throw ValidationError(
                "--log-level is one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", "))"
            )
        }
        var logger = Logger(label: "richpush")
        logger.logLevel = level
        // Every connection takes a descriptor: the soft limit (often 1,024) up to the hard one before anything opens.
        let descriptors = DescriptorLimit.raise()
        logger.debug("descriptor limit", metadata: ["limit": "\(descriptors)"])
        let server = try await buildApplication(c, adminKey: admin, logger: logger) { port, sandboxAdmin, mediaBase in
            let database =
                c.isPostgres ? ((try? PostgresSettings(url: c.database))?.redacted ?? "postgres") : c.database
            var line: JSONValueLine = [
                "listening": "http://\(c.host):\(port)", "database": database, "sandbox": c.sandbox ? "on" : "off",
                "admin_key_source": generated ? "generated" : "configured", "media": mediaBase + "/media/",
                "console": "http://\(c.host):\(port)/console",
            ]
            if sandboxAdmin > 0 {
                // What a newcomer reaches for next: what the emulators received, a browser's subscription, and
                // the file that names every endpoint and credential (`richpush send --sandbox` reads it).
                line["sandbox_admin"] = "http://127.0.0.1:\(sandboxAdmin)"
                line["sandbox_received"] = "http://127.0.0.1:\(sandboxAdmin)/apns/notifications"
                line["webpush_subscribe"] = "http://127.0.0.1:\(sandboxAdmin)/webpush/subscriptions"
                line["sandbox_file"] =
                    URL(fileURLWithPath: c.sandboxDirectory).appendingPathComponent("sandbox.json").path
            }
            announce(line.text)
            if generated { announce("admin key (shown once): \(admin)") }
        }
        try await server.run(gracefulShutdownSignals: [.sigterm, .sigint])
    }
}

/// One line of JSON with string values, for the announcements.
typealias JSONValueLine = [String: String]
extension Dictionary where Key == String, Value == String {
    var text: String {
        "{"
            + keys.sorted().map { k in
                "\"\(k)\":\"\(self[k]!.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\""))\""
            }.joined(separator: ",") + "}"
    }
}
