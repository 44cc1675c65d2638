import ArgumentParser
import Foundation
import RichPushCore
import RichPushMedia

struct SimulateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "simulate",
        abstract: "Run the device's service-extension pipeline on a received payload and print what the device shows.",
        discussion:
            "PAYLOAD is what the device receives (the APNs body, or an FCM-delivered userInfo). Files are staged in --out."
    )

    @Argument(help: "The received payload JSON, or - for standard input.")
    var payload: String

    @Option(help: "The folder to stage attachments in.")
    var out: String

    @Option(help: "Seconds until the deadline (default: Apple's 30 s less the safety margin).")
    var deadline: Double?

    @Flag(name: .customLong("allow-http"), help: "Fetch plain http: URLs (and post receipts to them).")
    var allowHTTP = false

    @Flag(name: .customLong("no-receipt"), help: "Do not post the delivery report to the payload's receipt address.")
    var noReceipt = false

    @Option(name: .customLong("device-id"), help: "The device id a posted receipt is filed under.")
    var deviceID: String?

    func run() async throws {
        let value = try MessageFile.readJSONOrExit(payload, deepValues: .readAsNull)
        var config = RichNotificationProcessor.Configuration(fetch: FetchPolicy(allowInsecureHTTP: allowHTTP))
        config.stagingDirectory = URL(fileURLWithPath: out, isDirectory: true)
        config.receipts = ReceiptPolicy(enabled: !noReceipt, deviceID: deviceID)
        let processor = RichNotificationProcessor(configuration: config)
        let result = await processor.process(payload: value, deadline: deadline.map { Date().addingTimeInterval($0) })
        guard case .object(var report) = result.report.json else { return }
        report["title"] = .string(result.text.title)
        report["subtitle"] = .string(result.text.subtitle)
        report["body"] = .string(result.text.body)
        print(JSONValue.object(report).prettyPrinted())
    }
}
