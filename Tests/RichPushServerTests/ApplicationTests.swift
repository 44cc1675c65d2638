import Foundation
import Logging
import RichPushCore
import RichPushSandbox
import RichPushServer
import ServiceLifecycle
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The library builds the whole server from a configuration (what `richpush serve` and `richpush demo` call),
/// and one service group runs it and stops it.
@Suite struct ApplicationTests {
    static func configuration(in folder: URL) -> ServerConfiguration {
        var config = ServerConfiguration()
        config.database = folder.appendingPathComponent("richpush.sqlite").path
        config.port = 0
        config.sandboxDirectory = folder.appendingPathComponent("sandbox").path
        config.mediaDirectory = folder.appendingPathComponent("media").path
        // Inside the test's folder on every database (on PostgreSQL the default is the working folder's).
        config.credentialsKeyFile = folder.appendingPathComponent("credentials.key").path
        return config
    }

    static func call(
        _ method: String,
        _ url: String,
        key: String? = nil,
        body: JSONValue? = nil
    ) async throws -> (
        Int, JSONValue
    ) {
        var request = URLRequest(url: URL(string: url)!)
        request.httpMethod = method
        if let key { request.setValue("Bearer \(key)", forHTTPHeaderField: "Authorization") }
        if let body {
            request.httpBody = Data(body.serialized())
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        let (data, response) = try await URLSession.shared.data(for: request)
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        return (status, (try? JSONValue.parse(Array(data))) ?? .null)
    }

    @Test func theLibraryBuildsAServerThatServesAndStops() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("richpush-app-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let admin = APIKeys.newKey()
        let (ports, portSink) = AsyncStream<Int>.makeStream()
        var logger = Logger(label: "richpush-test")
        logger.logLevel = .warning
        let server = try await buildApplication(Self.configuration(in: folder), adminKey: admin, logger: logger) {
            port,
            sandboxAdmin,
            _ in
            #expect(sandboxAdmin > 0)
            portSink.yield(port)
        }
        let group = ServiceGroup(services: [server], logger: logger)
        let running = Task { try await group.run() }
        var port = 0
        for await p in ports {
            port = p
            break
        }
        let base = "http://127.0.0.1:\(port)"

        #expect(try await Self.call("GET", base + "/health/ready").0 == 200)
        let (created, app) = try await Self.call(
            "POST",
            base + "/v1/apps",
            key: admin,
            body: ["name": "Library", "bundle_id": "com.example.library"]
        )
        #expect(created == 201)
        let key = try #require(app["api_key"]?.stringValue)
        let appID = try #require(app["app"]?["id"]?.stringValue)
        // A registry fan-out runs as a child of the group's fan-out service.
        #expect(server.api.fanOuts.isServiceRunning)
        for i in 1...3 {
            let (registered, _) = try await Self.call(
                "POST",
                base + "/v1/apps/\(appID)/devices",
                key: key,
                body: ["token": .string(String(format: "%064x", i)), "platform": "ios", "tags": ["t"]]
            )
            #expect(registered == 200)
        }
        let (sent, accepted) = try await Self.call(
            "POST",
            base + "/v1/apps/\(appID)/notifications",
            key: key,
            body: ["title": "Fan-out", "audience": ["tag": "t"]]
        )
        let id = try #require(accepted["id"]?.stringValue, "\(sent) \(accepted)")
        var total: Int64 = 0
        let asked = Date()
        while total < 3, Date().timeIntervalSince(asked) < 20 {
            total =
                try await Self.call("GET", base + "/v1/apps/\(appID)/notifications/\(id)", key: key).1["total"]?
                .intValue ?? 0
            try await Task.sleep(nanoseconds: 20_000_000)
        }
        #expect(total == 3)
        // Unknown media is answered on the connection, before the router: the fast path went in front of the
        // HTTP/1 codec on every connection (a pipeline it does not expect is counted as a miss, and logged).
        let (missing, error) = try await Self.call(
            "GET",
            base + "/media/" + String(repeating: "ab", count: 32) + ".png"
        )
        #expect(missing == 404)
        #expect(error["error"]?["code"]?.stringValue == "not-found")
        #expect(server.mediaFastPath.installed >= 1)
        #expect(server.mediaFastPath.missed == 0)

        // A graceful shutdown stops the listener, the workers, the sandbox and the database, and the group ends.
        await group.triggerGracefulShutdown()
        try await running.value
        await #expect(throws: (any Error).self) { try await Self.call("GET", base + "/health/live") }
    }

    /// SIGTERM's order, in process: the listener stops, the workers finish the sends they hold (the emulator
    /// answers each after 1.5 s), and only then do the providers, the sandbox and the database close: every
    /// delivery is sent and settled as delivered. With the closers listed last (so stopped first), the sends fail
    /// on closed clients and the deliveries end as failed: the test was seen to fail so. On PostgreSQL the
    /// database's client and health probe are the group's first service: they stop last, and then for good.
    @Test(arguments: ["sqlite", "postgres"])
    func aGracefulShutdownDrainsInFlightSendsBeforeClosingTheDatabase(database: String) async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
            "richpush-drain-\(UUID().uuidString)"
        )
        defer { try? FileManager.default.removeItem(at: folder) }
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let sandbox = try await Sandbox.start(
            directory: folder.appendingPathComponent("sandbox"),
            apnsConfiguration: .init(responseDelay: .init(milliseconds: 1500)),
            threads: 1
        )
        var config = Self.configuration(in: folder)
        if database == "postgres" { config.database = try await PostgresFixture.url() }
        config.externalSandboxAPNsPort = sandbox.apns.port
        config.externalSandboxFCMPort = sandbox.fcm.port
        let admin = APIKeys.newKey()
        let server = try await TestServer.start(config, adminKey: admin)
        let base = "http://127.0.0.1:\(server.port)"
        let (_, app) = try await Self.call(
            "POST",
            base + "/v1/apps",
            key: admin,
            body: ["name": "Drain", "bundle_id": "com.example.app"]
        )
        let appID = try #require(app["app"]?["id"]?.stringValue)
        let key = try #require(app["api_key"]?.stringValue)
        let tokens = (1...20).map { JSONValue.string(String(format: "%064x", $0)) }
        let (status, accepted) = try await Self.call(
            "POST",
            base + "/v1/apps/\(appID)/notifications",
            key: key,
            body: ["title": "Drain", "audience": ["apns_tokens": .array(tokens)]]
        )
        #expect(status == 202)
        let id = try #require(accepted["id"]?.stringValue)
        // The sends are out (the emulator holds each for 1.5 s) when the shutdown begins.
        let started = Date()
        while Date().timeIntervalSince(started) < 10 {
            let counts = try await server.application.backend.queue.counts(notificationID: id)
            if counts[.leased, default: 0] == 20 { break }
            try await Task.sleep(nanoseconds: 20_000_000)
        }
        try await server.stop()
        #expect(sandbox.apns.acceptedCount == 20)
        let reopened: any StorageBackend =
            database == "postgres"
            ? try await PostgresBackend.open(url: config.database, sealer: nil, timeout: .seconds(60))
            : try SQLiteBackend(path: config.database)
        let states = try await reopened.queue.deliveries(notificationID: id).map(\.state)
        #expect(states == Array(repeating: .delivered, count: 20))
        await reopened.close()
        await sandbox.stop()
        if let stopped = server.application.backend as? PostgresBackend {
            // The server's own client ended with the group: nothing more goes through it.
            await #expect(throws: (any Error).self) { try await stopped.database.rows("SELECT 1") }
        }
    }
}
