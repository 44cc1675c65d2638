import ArgumentParser
import Foundation
import RichPushCore
import RichPushTransport

/// `richpush send --tokens FILE` against the APNs emulator, beside the bare client (`richpush-bench apns`'s
/// measurement) against the same emulator in the same run.
struct SendBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "send",
        abstract:
            "`richpush send` of a token file to the APNs emulator vs RichPushAPNs alone on the same emulator; ratio."
    )

    @Option(help: "Tokens in the file (and sends the bare client makes).") var count = 100_000
    @Option(help: "Requests in flight (the same for both).") var concurrency = 200
    @Option(help: "The most connections (the same for both).") var connections = HTTP2PoolDefaults.connections
    @Option(help: "Rounds, alternating the two (the figures of each round are printed).") var rounds = 2

    func run() async throws {
        let binary = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
            .deletingLastPathComponent().appendingPathComponent("richpush")
        guard FileManager.default.isExecutableFile(atPath: binary.path) else {
            print("send: no richpush next to richpush-bench (\(binary.path)): build it first (swift build -c release)")
            throw ExitCode(1)
        }
        let sandbox = try SandboxProcess(threads: 1)
        defer { sandbox.stop() }
        let work = sandbox.directory.appendingPathComponent("send-bench")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        let tokens = work.appendingPathComponent("tokens.txt")
        try Data((0..<count).map { String(format: "%064x", $0 + 1) }.joined(separator: "\n").utf8).write(to: tokens)
        let message = work.appendingPathComponent("message.json")
        try Data(
            #"{"title":"Flash sale","body":"40% off until midnight","media":"https://cdn.example.com/sale.jpg"}"#.utf8
        ).write(to: message)
        print(
            "send: \(count) tokens from a file, \(concurrency) in flight, \(connections) connections, the APNs emulator on 1 thread in another process"
        )
        var ratios: [Double] = []
        for round in 1...max(1, rounds) {
            let (client, _, clientFailures, _) = try await APNsBench.measureClient(
                sandbox: sandbox,
                count: count,
                concurrency: concurrency,
                connections: connections,
                clientThreads: 1
            )
            let report = work.appendingPathComponent("report-\(round).csv")
            let args = [
                "send", message.path, "--sandbox", sandbox.directory.path, "--tokens", tokens.path, "--report",
                report.path,
                "--concurrency", String(concurrency), "--connections", String(connections), "--progress", "none",
                "--no-preflight", "--json",
            ]
            let start = Measure.now()
            let (status, out) = try Measure.runProcess(binary.path, args)
            let seconds = Double(Measure.now() - start) / 1e9
            let result = (try? JSONValue.parse(out)) ?? .null
            let delivered = Int(result["delivered"]?.intValue ?? 0)
            let cli = Double(count) / seconds
            print(
                String(
                    format:
                        "  round %d: RichPushAPNs alone %.0f/s (%@ failed); richpush send %.0f/s from launch to exit (%.2f s, %d delivered, exit %d; its own figure %.0f/s)",
                    round,
                    client,
                    clientFailures.description,
                    cli,
                    seconds,
                    delivered,
                    status,
                    result["rate"]?.doubleValue ?? 0
                )
            )
            ratios.append(cli / client)
        }
        print(
            String(
                format: "  ratio richpush send / RichPushAPNs alone: %@ (best %.2f)",
                ratios.map { String(format: "%.2f", $0) }.joined(separator: ", "),
                ratios.max() ?? 0
            )
        )
    }
}
