import ArgumentParser
import Foundation
import RichPushCore
import RichPushSandbox

struct SandboxCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sandbox",
        abstract:
            "Run local APNs and FCM emulators with their own CA, APNs key and FCM service account, until stopped.",
        discussion: """
            Credentials are written to --dir (and reused on the next start); while it runs, --dir/sandbox.json \
            names every endpoint. Point clients at the printed endpoints and trust ca.pem. The admin API lists \
            what was received and injects faults (docs/sandbox.md lists every route):
              GET  /apns/notifications?token=…   GET /apns/stats
              GET  /fcm/messages                 GET /fcm/stats
              POST /apns/faults {"kind":"status","status":503,"count":2}
              POST /fcm/faults  {"kind":"quota","retry_after":30,"rate":0.1}
              POST /apns/devices/unregister {"token":"…"}
              POST /fcm/devices/unregister {"token":"…"}
              POST /webpush/subscriptions {"application_server_key":"…"}
              GET  /webpush/notifications
              POST /webpush/mode {"mode":"silent"}: TLS accepted, nothing answered

            """
    )

    @Option(help: "Folder for the generated credentials.")
    var dir = ".richpush-sandbox"

    @Option(name: .customLong("apns-port"), help: "APNs emulator port (0: any free port).")
    var apnsPort = 0

    @Option(name: .customLong("fcm-port"), help: "FCM emulator port (0: any free port).")
    var fcmPort = 0

    @Option(name: .customLong("admin-port"), help: "Admin API port (0: any free port).")
    var adminPort = 0

    @Option(name: .customLong("max-streams"), help: "APNs stream limit after the first verified token.")
    var maxStreams = 1000

    @Option(help: "Event-loop threads.")
    var threads = 2

    @Option(
        name: .customLong("latency-ms"),
        help: "Milliseconds both emulators wait before each answer, as a service a round trip away would (0 to 60000)."
    )
    var latencyMs = 0.0

    @Option(name: .customLong("jitter-ms"), help: "Up to this many milliseconds more, drawn per request.")
    var jitterMs = 0.0

    @Flag(
        name: .customLong("webpush-http1-only"),
        help: "The Web Push service offers and speaks HTTP/1.1 only (ALPN http/1.1), as some push services do."
    )
    var webPushHTTP1Only = false

    @Flag(
        name: .customLong("record-limit-small"),
        help: "Keep only the last 10,000 notifications (for long load tests)."
    )
    var smallRecords = false

    func run() async throws {
        // Signals are caught before anything is announced, so that a stop right after start is clean too.
        let signals = StopSignals()
        let ports = Sandbox.Ports(apns: apnsPort, fcm: fcmPort, admin: adminPort)
        let limit = smallRecords ? 10_000 : 100_000
        for (name, value) in [("--latency-ms", latencyMs), ("--jitter-ms", jitterMs)]
        where !(value.isFinite && value >= 0 && value <= ResponseDelay.maximumMilliseconds) {
            throw ValidationError(
                "\(name) must be a number of milliseconds from 0 to \(Int(ResponseDelay.maximumMilliseconds))."
            )
        }
        let delay = ResponseDelay(milliseconds: latencyMs, jitterMilliseconds: jitterMs)
        let sandbox = try await Sandbox.start(
            directory: URL(fileURLWithPath: dir, isDirectory: true),
            ports: ports,
            apnsConfiguration: .init(maxConcurrentStreams: maxStreams, recordLimit: limit, responseDelay: delay),
            fcmConfiguration: .init(recordLimit: limit, responseDelay: delay),
            webPushConfiguration: .init(recordLimit: limit, responseDelay: delay, http1Only: webPushHTTP1Only),
            threads: threads
        )
        FileHandle.standardOutput.write(Data((sandbox.summary.prettyPrinted() + "\n").utf8))
        FileHandle.standardOutput.write(Data("sandbox: serving; stop with Ctrl-C or SIGTERM\n".utf8))
        for await _ in signals.stream { break }
        signals.cancel()
        await sandbox.stop()
    }
}
