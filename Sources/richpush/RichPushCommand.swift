import ArgumentParser
import Foundation

@main
struct RichPushCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "richpush",
        abstract: "Rich push notifications: render, validate, simulate and send.",
        subcommands: [
            DemoCommand.self, ServeCommand.self, SendCommand.self, PayloadCommand.self, ValidateCommand.self,
            ChartCommand.self,
            SimulateCommand.self, SandboxCommand.self, MigrateCommand.self, IdentityCommand.self,
        ]
    )

    /// As the argument parser's own, except that a usage error ends with status 2 (the convention of every
    /// command here: 1 when the work found problems, 2 when it could not be done as asked).
    static func main() async {
        do {
            var command = try parseAsRoot()
            if var async = command as? AsyncParsableCommand {
                try await async.run()
            } else {
                try command.run()
            }
        } catch {
            if exitCode(for: error) == .validationFailure {
                FileHandle.standardError.write(Data((fullMessage(for: error) + "\n").utf8))
                Foundation.exit(2)
            }
            exit(withError: error)
        }
    }
}
