import ArgumentParser

@main
struct RichPushCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "richpush",
        abstract: "Rich push notifications: render, validate, simulate and send.",
        subcommands: [DemoCommand.self, ServeCommand.self, PayloadCommand.self, ValidateCommand.self, ChartCommand.self, SimulateCommand.self, SandboxCommand.self]
    )
}
