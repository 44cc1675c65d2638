import ArgumentParser
import Foundation
import RichPushAPNs
import RichPushCharts
import RichPushCore
import RichPushFCM
import RichPushMedia
import RichPushSandbox

struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "One rich push end to end on this machine: validate, send to the APNs and FCM emulators, and show what the device displays.",
        discussion: "Starts the sandbox and a media server on loopback, so it needs no network and no Apple or Google account."
    )

    @Option(help: "Folder for the sandbox credentials and the staged attachments.")
    var dir = ".richpush-demo"

    @Flag(help: "Print the full JSON of each step.")
    var verbose = false

    func run() async throws {
        let root = URL(fileURLWithPath: dir, isDirectory: true)
        let sandbox = try await Sandbox.start(directory: root.appendingPathComponent("sandbox"), threads: 1)
        defer { Task { await sandbox.stop() } }
        // The picture the push carries: a PNG drawn by the chart renderer, served over HTTP on loopback.
        let banner = ChartRenderer.render(ChartSpec(kind: .area, series: [.init(values: [3, 5, 4, 7, 6, 9, 8, 12])], title: "Weekly active", value: "12,408", change: "▲ 18%"))
        let media = MediaTestServer(routes: ["/banner": .bytes(banner.png, contentType: "application/octet-stream")])
        let mediaPort = try await media.start()
        defer { Task { try? await media.shutdown() } }

        let apnsToken = String(repeating: "a1", count: 32)
        let fcmToken = "demo-device:APA91b-sandbox-token"
        let messageJSON: JSONValue = [
            "title": "Your week in numbers", "body": "12,408 active users, up 18%",
            "media": [["url": .string("http://127.0.0.1:\(mediaPort)/banner"), "kind": "image"]],
            "chart": ["type": "bar", "values": [1200, 1450, 1320, 1800, 1760, 2100, 2778], "labels": ["M", "T", "W", "T", "F", "S", "S"], "title": "Signups"],
            "content_override": ["body": "12,408 active users (+18%), 2,778 signups on Sunday"],
            "targets": ["apns_tokens": [.string(apnsToken)], "fcm_tokens": [.string(fcmToken)]],
        ]
        print("1. message: \(messageJSON.serializedSize) bytes of JSON")
        let report = MessageValidator(options: .init(allowInsecureMedia: true)).validate(json: messageJSON)
        print("2. validation: \(report.errors.count) errors, \(report.warnings.count) warnings")
        for issue in report.issues { print("   \(issue)") }
        guard report.isValid else { throw ExitCode(1) }
        let message = try PushMessage.decode(messageJSON)

        let creds = sandbox.credentials
        let apns = APNsClient(configuration: .init(
            endpoint: .custom(host: "127.0.0.1", port: sandbox.apns.port),
            authentication: .token(try APNsSigningKey(p8: creds.apnsKeyPEM, keyID: creds.apnsKeyID, teamID: creds.apnsTeamID)),
            trust: .certificateAuthority(pem: creds.caCertificatePEM)))
        let request = APNsRenderer(bundleID: "com.example.app").render(message, deviceToken: apnsToken)
        do {
            let delivery = try await apns.send(request)
            print("3. APNs: accepted, apns-id \(delivery.apnsID ?? "-"), payload \(request.body.count) bytes")
        } catch {
            print("3. APNs: \(error) (\(error.retry.label))")
        }
        await apns.shutdown()

        let account = try ServiceAccount(contentsOf: sandbox.files["service-account"]!)
        let fcm = FCMClient(configuration: .init(serviceAccount: account, endpoint: .custom(host: "127.0.0.1", port: sandbox.fcm.port), trust: .certificateAuthority(pem: creds.caCertificatePEM)))
        let fcmRequest = FCMRenderer(projectID: account.projectID).render(message, to: .token(fcmToken))
        do {
            let name = try await fcm.send(fcmRequest)
            print("4. FCM: accepted as \(name)")
        } catch {
            print("4. FCM: \(error) (\(error.retry.label))")
        }
        await fcm.shutdown()
        if verbose { print(fcmRequest.body.prettyPrinted()) }

        // The device: what the APNs emulator delivered, through the service-extension pipeline.
        guard let received = sandbox.apns.recorded(token: apnsToken).last?.payloadJSON else { throw ExitCode(1) }
        var config = RichNotificationProcessor.Configuration(fetch: FetchPolicy(allowInsecureHTTP: true))
        config.stagingDirectory = root.appendingPathComponent("staged")
        let shown = await RichNotificationProcessor(configuration: config).process(payload: received)
        print("5. device shows: \"\(shown.text.title)\" — \"\(shown.text.body)\"")
        for a in shown.attachments {
            print("   attachment \(a.identifier): \(a.type.displayName), \(a.bytes) bytes, \(a.uti), \(a.file.path)")
        }
        for s in shown.report.skipped { print("   skipped \(s.url): \(s.reason)") }
        print("   in \(shown.report.elapsedMilliseconds) ms, deadline hit: \(shown.report.deadlineHit)")
        if verbose { print(shown.report.json.prettyPrinted()) }
        guard shown.attachments.count == 2 else { throw ExitCode(1) }
    }
}
