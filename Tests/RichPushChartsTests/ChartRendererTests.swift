import Foundation
import Testing

@_spi(Benchmark) @testable import RichPushCharts
@testable import RichPushCore

@Suite struct ChartRendererTests {
    static let examplesDir = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent(
        "../../examples/charts"
    ).standardized

    static func exampleSpecs() throws -> [(String, ChartSpec)] {
        let files = try FileManager.default.contentsOfDirectory(atPath: examplesDir.path).filter {
            $0.hasSuffix(".json")
        }.sorted()
        return try files.map { name in
            (name, try ChartSpec.decode(JSONValue.parse(Data(contentsOf: examplesDir.appendingPathComponent(name)))))
        }
    }

    /// Odd specs that must still give a valid picture.
    static let edgeSpecs: [(String, ChartSpec)] = [
        ("tiny", ChartSpec(series: [.init(values: [1, 2])], width: 16, height: 16, scale: 1)),
        ("single-value", ChartSpec(series: [.init(values: [5])], title: "One")),
        ("flat", ChartSpec(kind: .area, series: [.init(values: [3, 3, 3, 3])])),
        ("all-gaps-but-one", ChartSpec(series: [.init(values: [.nan, 4, .nan])])),
        (
            "negative-bars",
            ChartSpec(kind: .bar, series: [.init(values: [-3, 2, -1, 4])], labels: ["a", "b", "c", "d"])
        ),
        (
            "grouped-bars",
            ChartSpec(
                kind: .bar,
                series: [.init(values: [1, 2, 3]), .init(values: [2, 1, 3]), .init(values: [3, 3, 1])]
            )
        ),
        ("huge-values", ChartSpec(series: [.init(values: [1e12, 3e12, 2e12])], value: "$3T")),
        (
            "tall-scale-3",
            ChartSpec(kind: .sparkline, series: [.init(values: [1, 3, 2])], width: 40, height: 600, scale: 3)
        ),
        ("missing-glyphs", ChartSpec(series: [.init(values: [1, 2])], title: "日本 ✓ ok")),
    ]

    @Test func everyPNGPassesPngcheckAndDecodesInPillowToOurPixels() async throws {
        try await ExternalTools.requirePngcheck()
        try await ExternalTools.requirePillow()
        let dir = try ExternalTools.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        var expected: [String] = []
        var colourTypes: Set<UInt8> = []
        for (name, spec) in try Self.exampleSpecs() + Self.edgeSpecs {
            for scale in [1, 2, 3] {
                let bitmap = ChartRenderer.draw(spec, scale: scale)
                var raw: [UInt8] = []
                raw.reserveCapacity(bitmap.width * bitmap.height * 3)
                for y in 0..<bitmap.height {
                    let start = y * bitmap.stride + 1
                    raw += bitmap.storage[start..<start + bitmap.width * 3]
                }
                let png = PNGEncoder.encode(bitmap, pixelsPerPoint: scale)
                colourTypes.insert(png[25])  // IHDR's colour type: 2 RGB, 3 indexed
                let base = dir.appendingPathComponent("\(name)@\(scale)")
                try Data(png).write(to: base.appendingPathExtension("png"))
                try Data(raw).write(to: base.appendingPathExtension("rgb"))
                expected.append("\(base.lastPathComponent) \(spec.width * scale)x\(spec.height * scale)")
            }
        }
        #expect(colourTypes == [2, 3], "both encodings are checked: \(colourTypes)")
        let pngcheck = try await ExternalTools.run("sh", ["-c", "pngcheck -q \(dir.path)/*.png; echo exit=$?"])
        #expect(pngcheck.output.hasSuffix("exit=0\n"), "\(pngcheck.output)")
        let check = """
            import sys, os
            from PIL import Image
            d = sys.argv[1]
            for line in sys.argv[2:]:
                name, size = line.split(' ')
                w, h = map(int, size.split('x'))
                im = Image.open(os.path.join(d, name + '.png'))
                im.load()
                if im.mode == 'P': im = im.convert('RGB')  # indexed: a chart of at most 256 colours
                if im.size != (w, h): print(name, 'size', im.size)
                elif im.mode != 'RGB': print(name, 'mode', im.mode)
                elif im.tobytes() != open(os.path.join(d, name + '.rgb'), 'rb').read(): print(name, 'pixels differ')
            print('done')
            """
        let r = try await ExternalTools.python(check, [dir.path] + expected)
        #expect(r.status == 0 && r.output == "done\n", "\(r.output)")
    }

    /// The gallery's committed PNGs were written by this renderer; they must still be what it writes.
    @Test func galleryPNGsMatchTheRenderer() async throws {
        let docs = Self.examplesDir.appendingPathComponent("../../docs/charts").standardized
        for (name, spec) in try Self.exampleSpecs() {
            let file = docs.appendingPathComponent(name.replacingOccurrences(of: ".json", with: ".png"))
            let committed = try [UInt8](Data(contentsOf: file))
            #expect(committed == ChartRenderer.render(spec).png, "\(name): run Scripts/render-gallery.sh")
        }
    }

    @Test func theSameSpecGivesTheSameBytesEveryTime() async throws {
        for (_, spec) in try Self.exampleSpecs() {
            let a = ChartRenderer.render(spec).png
            let b = ChartRenderer.render(spec).png
            #expect(a == b)
        }
    }

    /// A fixed chart's PNG checksum: any change in geometry, colour, font or compression shows up here,
    /// and a platform that rounds differently fails it.
    @Test func goldenChecksum() {
        let spec = ChartSpec(
            kind: .area,
            series: [.init(values: [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5])],
            title: "π digits",
            value: "3.14159",
            change: "▲ 0.1%",
            labels: ["a", "b"]
        )
        let png = ChartRenderer.render(spec).png
        #expect(png.count > 1000)
        #expect(
            String(CRC32.checksum(png), radix: 16) == Self.golden,
            "update Self.golden only after looking at the new picture"
        )
    }

    static let golden = "a7c86cef"

    @Test func backgroundIsTheThemeColour() {
        let light = ChartRenderer.draw(ChartSpec(series: [.init(values: [1, 2])], gridLines: 0), scale: 1)
        #expect(light.pixel(x: 1, y: 1) == RGBAColor(r: 255, g: 255, b: 255))
        let dark = ChartRenderer.draw(ChartSpec(series: [.init(values: [1, 2])], theme: .dark, gridLines: 0), scale: 1)
        #expect(dark.pixel(x: 1, y: 1) == RGBAColor(r: 0x1C, g: 0x1C, b: 0x1E))
        let custom = ChartRenderer.draw(
            ChartSpec(series: [.init(values: [1, 2])], colors: .init(background: RGBAColor(hex: "#102030"))),
            scale: 2
        )
        #expect(custom.pixel(x: 0, y: custom.height - 1) == RGBAColor(r: 0x10, g: 0x20, b: 0x30))
    }

    @Test func theLinePassesWhereTheDataSays() {
        // No header, no grid, no labels: the plot is the canvas less the 12-point padding. The axis for 0...10
        // with two ticks is exactly 0...10, so value v sits at y = 188 - v / 10 × 176 at scale 1 on 200 points.
        let red = RGBAColor(hex: "#FF0000")!
        let spec = ChartSpec(
            series: [.init(values: [0, 10, 5, 5], color: red)],
            width: 300,
            height: 200,
            scale: 1,
            gridLines: 0,
            lineWidth: 4
        )
        let b = ChartRenderer.draw(spec, scale: 1)
        func isRed(_ x: Int, _ y: Int) -> Bool {
            let p = b.pixel(x: x, y: y)
            return p.r > 200 && p.g < 60 && p.b < 60
        }
        func isWhite(_ x: Int, _ y: Int) -> Bool { b.pixel(x: x, y: y) == RGBAColor(r: 255, g: 255, b: 255) }
        // Points are spread between the inset ends; the flat last segment is at value 5 → y = 100.
        let inset = 4 * 1.6
        let x0 = 12 + inset
        let x3 = 288 - inset
        let xAt = { (i: Double) in x0 + (x3 - x0) * i / 3 }
        let midFlat = Int((xAt(2) + xAt(3)) / 2)
        #expect(isRed(midFlat, 100))
        #expect(isWhite(midFlat, 90) && isWhite(midFlat, 110))
        // The peak (value 10) is at the top of the plot, y = 12.
        #expect(isRed(Int(xAt(1)), 13))
        #expect(isWhite(Int(xAt(1)), 4))
        // Halfway up the first segment: x midway between points 0 and 1, value 5.
        #expect(isRed(Int((xAt(0) + xAt(1)) / 2), 100))
    }

    @Test func textIsDrawnWhereItIsPlaced() {
        let with = ChartRenderer.draw(
            ChartSpec(series: [.init(values: [1, 2])], title: "Revenue", gridLines: 0),
            scale: 2
        )
        let without = ChartRenderer.draw(
            ChartSpec(series: [.init(values: [1, 2])], title: " ", gridLines: 0),
            scale: 2
        )
        // The title's box: from the left padding, cap height above the 24-point baseline.
        var inked = 0
        var differs = 0
        for y in (24 - 9) * 2..<(24 + 1) * 2 {
            for x in 12 * 2..<70 * 2 {
                if with.pixel(x: x, y: y) != with.pixel(x: 0, y: 0) { inked += 1 }
                if with.pixel(x: x, y: y) != without.pixel(x: x, y: y) { differs += 1 }
            }
        }
        #expect(inked > 300 && differs == inked)
        // The same text measured and drawn: right-aligned text ends at the x it was given.
        var canvas = Bitmap(width: 200, height: 40, background: RGBAColor(r: 255, g: 255, b: 255))
        let w = canvas.draw(
            text: "12:00",
            x: 190,
            baseline: 30,
            size: 20,
            align: .right,
            color: RGBAColor(r: 0, g: 0, b: 0)
        )
        var rightmost = 0
        for y in 0..<40 { for x in 0..<200 where canvas.pixel(x: x, y: y).r < 128 { rightmost = max(rightmost, x) } }
        #expect(abs(Double(rightmost) - 190) <= 2)
        #expect(w > 40 && w < 80)
    }

    @Test func barsStandOnTheBaselineWithTheirHeights() {
        let blue = RGBAColor(hex: "#0000FF")!
        let spec = ChartSpec(
            kind: .bar,
            series: [.init(values: [10, 5], color: blue)],
            width: 200,
            height: 200,
            scale: 1,
            gridLines: 0
        )
        let b = ChartRenderer.draw(spec, scale: 1)
        // Axis 0...10; plot y from 12 to 188. Bar 1 (value 10) spans the full height; bar 2 half of it.
        let slot = 176.0 / 2
        let c1 = Int(12 + slot * 0.5)
        let c2 = Int(12 + slot * 1.5)
        #expect(b.pixel(x: c1, y: 20) == blue && b.pixel(x: c1, y: 186) == blue)
        #expect(b.pixel(x: c2, y: 110) == blue && b.pixel(x: c2, y: 90) == RGBAColor(r: 255, g: 255, b: 255))
    }

    @Test(arguments: [1, 2, 3])
    func sizeIsPointsTimesScale(_ scale: Int) throws {
        let r = ChartRenderer.render(
            ChartSpec(series: [.init(values: [1, 2, 3])], width: 320, height: 180),
            scale: scale
        )
        #expect(r.width == 320 * scale && r.height == 180 * scale)
        #expect(Array(r.png.prefix(8)) == PNGEncoder.signature)
    }

    @Test func axisTicksAreNiceAndFormattedWithoutLocale() {
        let a = AxisScale(values: [226.1, 231.4], explicitMin: nil, explicitMax: nil, tickCount: 3, includeZero: false)
        #expect(a.ticks == [225, 230, 235] && a.decimals == 0)
        let b = AxisScale(values: [0.12, 0.31], explicitMin: nil, explicitMax: nil, tickCount: 4, includeZero: false)
        #expect(b.ticks.first! <= 0.12 && b.ticks.last! >= 0.31 && b.decimals == 1)
        #expect(AxisScale.format(1234.5, decimals: 1) == "1234.5")
        #expect(AxisScale.format(-0.25, decimals: 2) == "-0.25")
        #expect(AxisScale.format(-0.001, decimals: 1) == "0.0")
        #expect(AxisScale.format(25_000, decimals: 0) == "25K")
        #expect(AxisScale.format(12_500_000, decimals: 0) == "12.5M")
        #expect(AxisScale.niceStep(0.7) == 1 && AxisScale.niceStep(2.2) == 2.5 && AxisScale.niceStep(430) == 500)
    }
}
