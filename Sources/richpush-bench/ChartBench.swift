import ArgumentParser
import Foundation
import RichPushCharts
import RichPushCore

/// The chart the benchmark draws: 100 points of a random walk, with a title, a headline and a grid.
enum BenchChart {
    static func values(count: Int = 100) -> [Double] {
        var v: [Double] = []
        var x = 180.0
        var state: UInt64 = 12345
        for _ in 0..<count {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            x += Double(Int(state >> 33) % 200 - 95) / 40
            v.append((x * 100).rounded() / 100)
        }
        return v
    }

    static func spec(scale: Int) -> ChartSpec {
        ChartSpec(
            kind: .line,
            series: [.init(values: values())],
            title: "ACME · 1D",
            value: "$184.20",
            change: "▲ 2.3%",
            labels: ["9:30", "12:00", "16:00"],
            width: 320,
            height: 320,
            scale: scale
        )
    }
}

struct ChartBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "chart",
        abstract:
            "Time a 100-point line chart at 320x320 pt, scale 2; the renderer's peak memory at scale 3; the PNG size; and matplotlib's Agg on the same chart."
    )

    @Option(help: "Timed renders.")
    var runs = 200

    @Flag(name: .customLong("no-peer"), help: "Skip the matplotlib comparison.")
    var noPeer = false

    func run() throws {
        let spec = BenchChart.spec(scale: 2)
        _ = ChartRenderer.render(spec)  // warm-up
        var times: [Double] = []
        var size = 0
        for _ in 0..<runs {
            let t0 = Measure.now()
            let r = ChartRenderer.render(spec)
            times.append(Measure.milliseconds(t0, Measure.now()))
            size = r.png.count
        }
        let median = Measure.median(times)
        print("chart: 100-point line, 320x320 pt @2x (640x640 px)")
        print(
            String(
                format: "  render + encode: median %.2f ms, p90 %.2f ms, min %.2f ms over %d runs",
                median,
                Measure.percentile(times, 0.9),
                times.min() ?? 0,
                runs
            )
        )
        print("  PNG: \(size) bytes (\(String(format: "%.1f", Double(size) / 1024)) KiB)")

        // Memory in a fresh process, so that nothing else in this one inflates the peak.
        let probe = try Measure.runSelf(["chart-memory-probe"])
        print(
            "  peak memory of one render at scale 3 (960x960 px): "
                + probe.trimmingCharacters(in: .whitespacesAndNewlines)
        )

        guard !noPeer else { return }
        let cfg = FileManager.default.temporaryDirectory.appendingPathComponent("richpush-chart-bench.json")
        let json: JSONValue = [
            "values": .array(BenchChart.values().map(JSONValue.double)), "width": 320, "height": 320, "scale": 2,
            "runs": .int(Int64(min(runs, 50))), "title": "ACME · 1D", "value": "$184.20", "change": "▲ 2.3%",
        ]
        try Data(json.serialized()).write(to: cfg)
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent(
            "../../Benchmarks/chart_matplotlib.py"
        ).standardized.path
        let (status, out) = try Measure.runProcess("python3", [script, cfg.path])
        guard status == 0, let peer = try? JSONValue.parse(out), let peerMedian = peer["median_ms"]?.doubleValue else {
            print("  matplotlib: not run (python3 -m pip install matplotlib)")
            throw ExitCode(1)
        }
        print(
            String(
                format: "  matplotlib Agg, same chart and pixel size: median %.2f ms, PNG %d bytes",
                peerMedian,
                Int(peer["png_bytes"]?.intValue ?? 0)
            )
        )
        print(String(format: "  ratio: RichPush is %.1fx faster", peerMedian / median))
    }
}

/// Hidden: renders once at scale 3 and prints how much the process's peak memory grew.
struct ChartMemoryProbe: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "chart-memory-probe", shouldDisplay: false)

    func run() throws {
        let spec = BenchChart.spec(scale: 3)
        let before = Measure.peakResidentBytes()
        let r = ChartRenderer.render(spec)
        let after = Measure.peakResidentBytes()
        print("\(Measure.mb(after - before)) above a baseline of \(Measure.mb(before)) (PNG \(r.png.count) bytes)")
    }
}
