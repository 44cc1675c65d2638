import ArgumentParser
import Foundation
import RichPushCharts
import RichPushCore

struct ChartCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "chart",
        abstract: "Render a chart spec to PNG, exactly as the device and the server draw it.",
        discussion: "SPEC may be a chart spec, or a message whose 'chart' field is used."
    )

    @Argument(help: "The chart spec (or message) JSON file, or - for standard input.")
    var spec: String

    @Option(help: "Where to write the PNG.")
    var out: String

    @Option(help: "Pixels per point: 1, 2 or 3 (default: the spec's).")
    var scale: Int?

    @Flag(help: "Also print the peak memory the rendering took above the process's baseline (Linux).")
    var memory = false

    func run() throws {
        let value = try MessageFile.readJSONOrExit(spec)
        if let scale, ![1, 2, 3].contains(scale) {
            printError("error: --scale must be 1, 2 or 3")
            throw ExitCode(2)
        }
        let chartJSON = value["chart"] ?? value
        let chart: ChartSpec
        do { chart = try ChartSpec.decode(chartJSON) } catch {
            for issue in error.issues { printError(issue.description) }
            throw ExitCode(1)
        }
        let baseline = memory ? ProcessMemory.resetPeak() : 0
        let rendered = ChartRenderer.render(chart, scale: scale)
        let peak = memory ? ProcessMemory.peakResidentBytes() : 0
        do { try Data(rendered.png).write(to: URL(fileURLWithPath: out)) } catch {
            printError("error: cannot write \(out): \(error.localizedDescription)")
            throw ExitCode(2)
        }
        print("\(out): \(rendered.width)x\(rendered.height) px, \(rendered.png.count) bytes")
        if memory { print("peak memory above baseline: \(max(0, peak - baseline)) bytes") }
    }
}

/// The process's resident memory from /proc (Linux); zeros elsewhere.
enum ProcessMemory {
    /// Resets the peak (VmHWM) to the current resident size and returns that size: the baseline.
    static func resetPeak() -> Int {
        // Writing 5 to clear_refs resets the peak resident size (Linux 4.0 and later).
        if let handle = FileHandle(forWritingAtPath: "/proc/self/clear_refs") {
            handle.write(Data("5".utf8))
            try? handle.close()
        }
        return status("VmRSS")
    }

    static func peakResidentBytes() -> Int { status("VmHWM") }

    private static func status(_ field: String) -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
        for line in text.split(separator: "\n") where line.hasPrefix(field + ":") {
            let kb = line.split(separator: " ").compactMap { Int($0) }.first ?? 0
            return kb * 1024
        }
        return 0
    }
}
