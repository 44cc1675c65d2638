import Foundation
import RichPushCore
import RichPushMedia
import RichPushSandbox

/// The console's simulated iPhone: the device library (the same pipeline a Notification Service Extension runs) on
/// the payload the sandbox's APNs emulator received for a notification, in a scratch folder removed afterwards.
public enum SimulatedIPhone {
    public static func run(sandbox: Sandbox, notificationID: String) async -> JSONValue? {
        guard
            let received = sandbox.apns.recorded().last(where: { $0.apnsID.lowercased() == notificationID.lowercased() }
            ),
            let payload = received.payloadJSON
        else { return nil }
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
            "richpush-simulated-\(UUID().uuidString)"
        )
        // Cleanup of a scratch folder in the temporary directory; nothing to report.
        defer { try? FileManager.default.removeItem(at: folder) }
        // The sandbox's media may be plain http on loopback; the receipt is posted like a device's.
        var config = RichNotificationProcessor.Configuration(fetch: FetchPolicy(allowInsecureHTTP: true))
        config.stagingDirectory = folder
        config.receipts = ReceiptPolicy(enabled: true, deviceID: "simulated-iphone")
        let result = await RichNotificationProcessor(configuration: config).process(payload: payload, deadline: nil)
        guard case .object(var report) = result.report.json else { return nil }
        report["title"] = .string(result.text.title)
        report["subtitle"] = .string(result.text.subtitle)
        report["body"] = .string(result.text.body)
        report["token"] = .string(received.deviceToken)
        report["payload"] = payload
        return .object(report)
    }
}
