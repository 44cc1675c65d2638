import Foundation
import Logging
import RichPushCore
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
        #expect(app["api_key"]?.stringValue != nil)
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
}
