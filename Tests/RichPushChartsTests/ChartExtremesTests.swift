import Foundation
import Testing

@_spi(Benchmark) @testable import RichPushCharts
@testable import RichPushCore

/// Charts straight from a payload, whatever numbers it holds: nothing traps, and the picture stays within the
/// device's pixel budget.
@Suite struct ChartExtremesTests {
    static let hostileValues: [(String, [Double])] = [
        ("near the double limit", [1e308, -1e308, 1.7976931348623157e308]),
        ("infinities", [.infinity, -.infinity, 1]),
        ("only NaN and one value", [.nan, .nan, 2]),
        ("subnormal span", [5e-324, 1e-323, 0]),
        ("tiny span around a huge value", [1e15, 1e15 + 0.125, 1e15]),
        ("past the placeable range", [1e16, 2e16, -3e17]),
        ("mixed extremes", [-1e308, 0, 1e-300, 1e300, .nan]),
    ]

    @Test(arguments: hostileValues)
    func extremeValuesDrawWithoutATrap(_ name: String, _ values: [Double]) {
        for kind in ChartSpec.Kind.allCases {
            for yRange in [nil, (1e308, -1e308), (-1e308, 1e308), (Double.nan, 1.0), (0.0, 1e-320)]
                as [(Double, Double)?]
            {
                let spec = ChartSpec(
                    kind: kind,
                    series: [.init(values: values), .init(values: values.reversed())],
                    title: name,
                    value: "1",
                    change: "+1",
                    labels: ["a", "b", "c"],
                    yMin: yRange?.0,
                    yMax: yRange?.1,
                    scale: 1
                )
                let chart = ChartRenderer.render(spec)
                #expect(chart.png.starts(with: PNGEncoder.signature))
            }
        }
    }

    @Test func theValidatorRefusesWhatAChartCannotPlace() {
        let tooBig = ChartSpec(series: [.init(values: [1, 1e308])]).validate()
        #expect(tooBig.errors.map(\.rule) == ["range"])
        let y = ChartSpec(series: [.init(values: [1, 2])], yMin: -1e300, yMax: 1e300).validate()
        #expect(y.errors.map(\.rule) == ["range"])
        #expect(ChartSpec(series: [.init(values: [1e15, -1e15, .nan])]).validate().isValid)
        // The same through the JSON a sender writes.
        #expect(throws: ValidationReport.self) { try ChartSpec.decode(["values": [1, 1e308]]) }
    }

    @Test func theRasterNeverTrapsOnAnyCoordinate() {
        var b = Bitmap(width: 8, height: 8, background: RGBAColor(r: 255, g: 255, b: 255))
        let hostile: [Double] = [.nan, .infinity, -.infinity, 1e308, -1e308, 9.3e18, -9.3e18, 4]
        let red = RGBAColor(r: 255, g: 0, b: 0)
        for a in hostile {
            for c in hostile {
                b.fill(x0: a, y0: c, x1: c, y1: a, color: red)
                b.fillRoundedRect(x0: a, y0: 0, x1: c, y1: 8, radius: a, clipY0: c, clipY1: a, color: red)
                b.stroke([(a, c), (c, a), (1, 1)], lineWidth: 2, color: red)
                b.stroke([(1, 1), (6, 6)], lineWidth: a, color: red)
                b.stroke(paths: [[(a, 0), (0, c)]], lineWidth: 1, color: red)
                b.fillUnder([(0, a), (8, c)], baseline: 8, gradientTop: 0, color: red, topAlpha: 1, bottomAlpha: 0)
                _ = b.draw(text: "x", x: a, baseline: c, size: 9, color: red)
            }
        }
        #expect(AxisScale.format(.nan, decimals: 2) == "" && AxisScale.format(1e300, decimals: 0) == "")
    }

    @Test func everySizeAndScaleFitsThePixelBudget() {
        for (w, h) in [(1024, 1024), (1024, 16), (400, 400), (640, 360), (320, 180)] {
            for requested in [1, 2, 3, 7, -4, Int.max, Int.min] {
                let s = ChartSpec.drawnScale(width: w, height: h, requested: requested)
                #expect((1...3).contains(s))
                #expect(w * h * s * s <= ChartSpec.maxPixels)
            }
        }
        // The common sizes keep their scale.
        #expect(ChartSpec.drawnScale(width: 320, height: 180, requested: 3) == 3)
        #expect(ChartSpec.drawnScale(width: 360, height: 360, requested: 3) == 3)
        let big = ChartRenderer.render(
            ChartSpec(series: [.init(values: [1, 2, 3])], width: 1024, height: 1024, scale: 3)
        )
        #expect(big.width == 1024 && big.height == 1024)
        // A spec built in code with an out-of-range size and scale is clamped, never trusted.
        let odd = ChartRenderer.draw(
            ChartSpec(series: [.init(values: [1])], width: Int.max, height: -5, scale: Int.max)
        )
        #expect(odd.width * odd.height <= ChartSpec.maxPixels)
        let warned = ChartSpec(series: [.init(values: [1, 2])], width: 1024, height: 1024, scale: 3).validate()
        #expect(warned.isValid && warned.warnings.map(\.rule) == ["pixel-budget"])
    }

    @Test func thousandsOfEntriesAndLongStrings() {
        let long = String(repeating: "W", count: 5_000)
        let values = (0..<50_000).map { Double($0 % 17) }
        let spec = ChartSpec(
            kind: .bar,
            series: Array(repeating: .init(values: values, name: long), count: 40),
            title: long,
            value: long,
            change: long,
            labels: Array(repeating: long, count: 500),
            gridLines: 1_000,
            lineWidth: 1e9
        )
        #expect(!spec.validate().isValid)
        let chart = ChartRenderer.render(spec)
        #expect(chart.png.starts(with: PNGEncoder.signature))
    }
}
