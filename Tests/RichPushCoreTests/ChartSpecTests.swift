import Testing

@testable import RichPushCore

@Suite struct ChartSpecTests {
    @Test func aSixtyPointLineChartWithATitleFitsInSixHundredBytes() throws {
        var values: [Double] = []
        var price = 182.4
        for i in 0..<60 {
            price += Double((i * 37) % 11 - 5) / 10
            values.append((price * 10).rounded() / 10)
        }
        let spec = ChartSpec(
            kind: .line,
            series: [.init(values: values)],
            title: "AAPL · 1D",
            value: "$189.20",
            change: "▲ 2.3%"
        )
        let bytes = spec.json.serializedSize
        #expect(bytes < 600, "\(bytes) bytes")
        #expect(try ChartSpec.decode(spec.json) == spec)
    }

    @Test func fullSpecRoundTrips() throws {
        let spec = ChartSpec(
            kind: .area,
            series: [
                .init(values: [1, .nan, 3], color: RGBAColor(hex: "#34C759"), name: "a"), .init(values: [2, 2, 2]),
            ],
            title: "t",
            value: "v",
            change: "-1%",
            trend: .down,
            labels: ["a", "b"],
            yMin: 0,
            yMax: 10,
            width: 300,
            height: 100,
            scale: 3,
            theme: .dark,
            colors: .init(background: RGBAColor(hex: "#000"), text: RGBAColor(hex: "#FFFFFF80")),
            gridLines: 0,
            lineWidth: 3.5,
            gradient: false
        )
        let back = try ChartSpec.decode(spec.json)
        #expect(back.series[0].values[1].isNaN)
        #expect(
            back.series[1] == spec.series[1] && back.colors == spec.colors && back.yMax == 10 && back.scale == 3
                && back.theme == .dark
        )
        #expect(back.lineWidth == 3.5 && back.gradient == false && back.gridLines == 0 && back.labels == ["a", "b"])
    }

    @Test func trendIsReadFromTheChangeLabel() {
        #expect(ChartSpec(series: [], change: "▲ 2.3%").effectiveTrend == .up)
        #expect(ChartSpec(series: [], change: "-0.4%").effectiveTrend == .down)
        #expect(ChartSpec(series: [], change: "0%").effectiveTrend == .flat)
        #expect(ChartSpec(series: [], change: "▲", trend: .down).effectiveTrend == .down)
    }

    @Test func colors() {
        #expect(RGBAColor(hex: "#fff") == RGBAColor(r: 255, g: 255, b: 255))
        #expect(RGBAColor(hex: "#0A141E") == RGBAColor(r: 10, g: 20, b: 30))
        #expect(RGBAColor(hex: "#0A141E80")?.a == 128)
        #expect(RGBAColor(hex: "0A141E") == nil && RGBAColor(hex: "#GGG") == nil && RGBAColor(hex: "#12345") == nil)
        #expect(RGBAColor(r: 10, g: 20, b: 30).description == "#0A141E")
    }

    @Test func everyProblemIsReported() throws {
        let json = try JSONValue.parse(
            #"{"type":"pie","values":[1,"x"],"scale":5,"theme":"neon","unknown":1,"size":[1,1]}"#
        )
        do {
            _ = try ChartSpec.decode(json)
            Issue.record("should fail")
        } catch {
            #expect(Set(error.issues.map(\.rule)).isSuperset(of: ["enum", "type", "unknown-field", "range"]))
            #expect(error.issues.count >= 5)
        }
    }
}
