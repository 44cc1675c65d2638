import ArgumentParser

@main
struct RichPushCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "richpush",
        abstract: "Rich push notifications: render, validate, simulate and send.",
        subcommands: [PayloadCommand.self, ValidateCommand.self, ChartCommand.self]
    )
}
