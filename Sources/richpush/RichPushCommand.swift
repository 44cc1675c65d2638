import ArgumentParser
import Foundation
import RichPushServer

@main
struct RichPushCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "richpush",
        abstract: "Rich push notifications: render, validate, simulate and send.",
        version: "richpush \(RichPushVersion.current)",
        subcommands: [
            DemoCommand.self, ServeCommand.self, SendCommand.self, PayloadCommand.self, ValidateCommand.self,
            ChartCommand.self,
            SimulateCommand.self, SandboxCommand.self, MigrateCommand.self, IdentityCommand.self, RotateKeyCommand.self,
        ]
    )

    /// As the argument parser's own, except that a usage error ends with status 2 (the convention of every
    /// command here: 1 when the work found problems, 2 when it could not be done as asked).
    static func main() async {
        do {
            var command = try parseAsRoot()
            do {
                if var async = command as? AsyncParsableCommand {
                    try await async.run()
                } else {
                    try command.run()
                }
            } catch let problem as ValidationError {
                // Found while running (a configuration file, a value read from the environment): the arguments
                // were well formed, so the usage line would say nothing of the cause.
                FileHandle.standardError.write(Data("error: \(problem.message)\n".utf8))
                Foundation.exit(2)
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
