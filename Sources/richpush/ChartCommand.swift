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

    func run() throws {
        let value: JSONValue
        do { value = try MessageFile.readJSON(spec) } catch {
            printError("error: \(error)")
            throw ExitCode(2)
        }
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
        let rendered = ChartRenderer.render(chart, scale: scale)
        do { try Data(rendered.png).write(to: URL(fileURLWithPath: out)) } catch {
            printError("error: cannot write \(out): \(error.localizedDescription)")
            throw ExitCode(2)
        }
        print("\(out): \(rendered.width)x\(rendered.height) px, \(rendered.png.count) bytes")
    }
}
