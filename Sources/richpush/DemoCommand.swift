import ArgumentParser
import Foundation
import Logging
import RichPushCharts
import RichPushCore
import RichPushMedia
import RichPushSandbox
import RichPushServer

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract:
            "One rich push end to end on this machine, through the server: register devices, send, watch the outcome, and see what the device shows.",
        discussion:
            "Starts the server (embedded SQLite), its sandbox APNs and FCM emulators and a media server on loopback: no network and no Apple or Google account needed."
    )

    @Option(help: "Folder for the database, the sandbox credentials and the staged attachments.")
    var dir = ".richpush-demo"

    @Flag(help: "Print the full JSON of each step.")
    var verbose = false

    func run() async throws {
        let root = URL(fileURLWithPath: dir, isDirectory: true)
        try? FileManager.default.removeItem(at: root.appendingPathComponent("richpush.sqlite"))
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)

        // The picture the push carries: a PNG drawn by the chart renderer, served over HTTP on loopback.
        let media = MediaTestServer(routes: ["/banner": .bytes(Self.banner(), contentType: "application/octet-stream")])
        let mediaPort = try await media.start()
        let admin = APIKeys.newKey()
        let (server, running, port) = try await startServer(in: root, adminKey: admin)
        defer { running.cancel() }
        let http = HTTPClient(base: "http://127.0.0.1:\(port)")

        let (_, created) = try await http.call(
            "POST",
            "/v1/apps",
            key: admin,
            ["name": "Demo", "bundle_id": "com.example.app"]
        )
        guard let app = created["app"]?["id"]?.stringValue, let key = created["api_key"]?.stringValue else {
            throw ExitCode(1)
        }
        print("1. server on http://127.0.0.1:\(port), app \(app) created; its API key is stored only as a hash")
        let iosToken = String(repeating: "a1", count: 32)
        try await registerDevices(http, app: app, key: key, iosToken: iosToken)
        let id = try await send(http, app: app, key: key, mediaPort: mediaPort)
        try await printOutcome(http, app: app, key: key, id: id)
        let shown = try await showOnThePhones(server, iosToken: iosToken, root: root)
        let final = try await http.call("GET", "/v1/apps/\(app)/notifications/\(id)", key: key).1
        print(
            "6. the iPhone's receipt, \(shown.report.receipt?.description ?? "none"); the server's receipts: \(final["receipts"]?.jsonString ?? "?")"
        )
        if verbose { print(final.prettyPrinted()) }
        print(
            "next: `richpush serve` and open http://127.0.0.1:8080/console to compose one yourself and see what each device shows"
        )
        try? await media.shutdown()
        running.cancel()
        _ = try? await running.value
        let delivered = final["counts"]?["delivered"]?.intValue ?? 0
        guard delivered == 2, shown.attachments.count == 2, final["receipts"]?["count"] == 1 else { throw ExitCode(1) }
    }

    /// The banner: an area chart drawn by the chart renderer, as PNG bytes.
    static func banner() -> [UInt8] {
        ChartRenderer.render(
            ChartSpec(
                kind: .area,
                series: [.init(values: [3, 5, 4, 7, 6, 9, 8, 12])],
                title: "Weekly active",
                value: "12,408",
                change: "▲ 18%"
            )
        ).png
    }

    /// The server on a free loopback port with its sandbox, running; its port once it listens.
    func startServer(
        in root: URL,
        adminKey: String
    ) async throws -> (RichPushApplication, Task<Void, Error>, Int) {
        let (ports, portSink) = AsyncStream<Int>.makeStream()
        var serverConfig = ServerConfiguration()
        serverConfig.database = root.appendingPathComponent("richpush.sqlite").path
        serverConfig.port = 0
        serverConfig.sandboxDirectory = root.appendingPathComponent("sandbox").path
        serverConfig.mediaDirectory = root.appendingPathComponent("media").path
        var logger = Logger(label: "richpush")
        logger.logLevel = .critical
        let server = try await buildApplication(serverConfig, adminKey: adminKey, logger: logger) { port, _, _ in
            portSink.yield(port)
        }
        let running = Task { try await server.run() }
        var port = 0
        for await p in ports {
            port = p
            break
        }
        return (server, running, port)
    }

    /// An iPhone (APNs) and an Android phone (FCM), tagged 'weekly'.
    func registerDevices(_ http: HTTPClient, app: String, key: String, iosToken: String) async throws {
        _ = try await http.call(
            "POST",
            "/v1/apps/\(app)/devices",
            key: key,
            ["token": .string(iosToken), "platform": "ios", "tags": ["weekly"]]
        )
        _ = try await http.call(
            "POST",
            "/v1/apps/\(app)/devices",
            key: key,
            ["token": "demo-android:APA91b-sandbox", "platform": "android", "tags": ["weekly"]]
        )
        print("2. two devices registered (iOS through APNs, Android through FCM), tagged 'weekly'")
    }

    /// The rich push to the tag: a picture, a chart and what the phone shows once its extension ran; its id.
    func send(_ http: HTTPClient, app: String, key: String, mediaPort: Int) async throws -> String {
        let message: JSONValue = [
            "title": "Your week in numbers", "body": "12,408 active users, up 18%",
            "media": [["url": .string("http://127.0.0.1:\(mediaPort)/banner"), "kind": "image"]],
            "chart": [
                "type": "bar", "values": [1200, 1450, 1320, 1800, 1760, 2100, 2778],
                "labels": ["M", "T", "W", "T", "F", "S", "S"], "title": "Signups",
            ],
            "content_override": ["body": "12,408 active users (+18%), 2,778 signups on Sunday"],
            "audience": ["tag": "weekly"],
        ]
        let (status, accepted) = try await http.call(
            "POST",
            "/v1/apps/\(app)/notifications",
            key: key,
            message,
            idempotencyKey: "demo-1"
        )
        guard status == 202, let id = accepted["id"]?.stringValue else {
            print("send refused (\(status)): \(accepted.prettyPrinted())")
            throw ExitCode(1)
        }
        print("3. notification accepted (202) as \(id)")
        for w in accepted["warnings"]?.arrayValue ?? [] where w["rule"] == "rehosted" {
            print("   preflight: \(w["message"]?.stringValue ?? "")")
        }
        return id
    }

    /// Waits (up to 5 s) until the notification is over (``ServerSend/isOver(_:)``), and prints each delivery.
    func printOutcome(_ http: HTTPClient, app: String, key: String, id: String) async throws {
        var outcome: JSONValue = .null
        for _ in 0..<100 {
            outcome = try await http.call("GET", "/v1/apps/\(app)/notifications/\(id)", key: key).1
            if ServerSend.isOver(outcome) && !(outcome["counts"]?.objectValue ?? [:]).isEmpty { break }
            try await Task.sleep(nanoseconds: 50_000_000)
        }
        print("4. outcome: \(outcome["counts"]?.jsonString ?? "?")")
        for d in outcome["deliveries"]?.arrayValue ?? [] {
            print(
                "   \(d["provider"]?.stringValue ?? "") \(d["state"]?.stringValue ?? "") \(d["provider_id"]?.stringValue ?? d["reason"]?.stringValue ?? "")"
            )
        }
    }

    /// The iPhone: what the APNs emulator delivered, through the service-extension pipeline (which posts its report
    /// to the receipt address in the payload, with no API key on the device); and what the Android phone got.
    func showOnThePhones(
        _ server: RichPushApplication,
        iosToken: String,
        root: URL
    ) async throws -> EnrichedNotification {
        guard let received = server.sandbox?.apns.recorded(token: iosToken).last?.payloadJSON else { throw ExitCode(1) }
        var config = RichNotificationProcessor.Configuration(fetch: FetchPolicy(allowInsecureHTTP: true))
        config.stagingDirectory = root.appendingPathComponent("staged")
        config.receipts = ReceiptPolicy(deviceID: iosToken)
        let shown = await RichNotificationProcessor(configuration: config).process(payload: received)
        print("5. the iPhone shows: \"\(shown.text.title)\" — \"\(shown.text.body)\"")
        for a in shown.attachments {
            print("   attachment \(a.identifier): \(a.type.displayName), \(a.bytes) bytes, \(a.file.path)")
        }
        for s in shown.report.skipped { print("   skipped \(s.url): \(s.reason)") }
        if let android = server.sandbox?.fcm.recorded().last?.message {
            print(
                "   the Android phone gets the image \(android["android"]?["notification"]?["image"]?.stringValue ?? "(none)") (the chart as a PNG hosted by the server: \(android["apns"]?["payload"]?["rp"] != nil ? "in" : "not in") the FCM request's APNs part)"
            )
        }
        return shown
    }
}

/// A few JSON calls to the server.
/// Calls a RichPush server's API with a key. Redirects are never followed: the 3xx answer is returned as it is, so
/// the key goes to `base` and to no other address.
struct HTTPClient {
    let base: String

    private final class NoRedirects: NSObject, URLSessionTaskDelegate, Sendable {
        func urlSession(
            _ session: URLSession,
            task: URLSessionTask,
            willPerformHTTPRedirection response: HTTPURLResponse,
            newRequest request: URLRequest,
            completionHandler: @escaping @Sendable (URLRequest?) -> Void
        ) {
            completionHandler(nil)
        }
    }

    private static let session = URLSession(
        configuration: .ephemeral,
        delegate: NoRedirects(),
        delegateQueue: nil
    )

    func call(
        _ method: String,
        _ path: String,
        key: String,
        _ body: JSONValue? = nil,
        idempotencyKey: String? = nil
    ) async throws -> (Int, JSONValue) {
        var request = URLRequest(url: URL(string: base + path)!)
        request.httpMethod = method
        request.setValue("Bearer \(key)", forHTTPHeaderField: "Authorization")
        if let idempotencyKey { request.setValue(idempotencyKey, forHTTPHeaderField: "Idempotency-Key") }
        if let body { request.httpBody = Data(body.serialized()) }
        let (data, response) = try await Self.session.data(for: request)
        // A body that is not JSON (an error page in front of the server) reads as null; the status still tells.
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, (try? JSONValue.parse(data)) ?? .null)
    }
}
