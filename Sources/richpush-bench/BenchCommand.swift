import ArgumentParser

@main
struct BenchCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "richpush-bench",
        abstract: "RichPush benchmarks. Run them in a release build: swift run -c release richpush-bench …",
        subcommands: [ChartBench.self, ChartMemoryProbe.self, ChartProfile.self]
    )
}
