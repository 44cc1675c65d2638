import ArgumentParser
import Foundation
import RichPushCore

struct ValidateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "validate",
        abstract:
            "Check a message against APNs, FCM and attachment rules; exit 1 if anything stops it from being sent.",
        discussion: "Every problem is listed at once, with its field path and rule. Warnings do not fail the check."
    )

    @Argument(help: "The message JSON file, or - for standard input.")
    var message: String

    @Flag(help: "Print the report as JSON.")
    var json = false

    @Flag(name: .customLong("allow-http"), help: "Accept http: media URLs.")
    var allowHTTP = false

    @Flag(name: .customLong("no-targets"), help: "Do not require targets (the server adds them).")
    var noTargets = false

    func run() throws {
        let value = try MessageFile.readJSONOrExit(message)
        let validator = MessageValidator(options: .init(allowInsecureMedia: allowHTTP, requireTargets: !noTargets))
        let report = validator.validate(json: value)
        if json {
            print(report.json.prettyPrinted())
        } else if report.issues.isEmpty {
            print("ok: \(message) is valid")
        } else {
            for issue in report.issues { print(issue) }
            print("\(report.errors.count) error(s), \(report.warnings.count) warning(s)")
        }
        if !report.isValid { throw ExitCode(1) }
    }
}
