import ArgumentParser
@_spi(Benchmark) import RichPushCharts

/// Hidden: where the chart's time goes (drawing, indexing and filtering, compressing).
struct ChartProfile: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "chart-profile", shouldDisplay: false)

    func run() throws {
        let spec = BenchChart.spec(scale: 2)
        var draw: [Double] = []
        var filter: [Double] = []
        var deflate: [Double] = []
        for _ in 0..<100 {
            let t0 = Measure.now()
            var b = ChartRenderer.draw(spec)
            let t1 = Measure.now()
            let (_, count) = PNGEncoder.prepareRows(&b)
            let t2 = Measure.now()
            _ = b.withRawRows { Deflate.zlib(UnsafeBufferPointer(rebasing: $0[0..<count])) }
            let t3 = Measure.now()
            draw.append(Measure.milliseconds(t0, t1))
            filter.append(Measure.milliseconds(t1, t2))
            deflate.append(Measure.milliseconds(t2, t3))
        }
        print(
            "draw \(Measure.median(draw)) ms, index and filter \(Measure.median(filter)) ms, deflate \(Measure.median(deflate)) ms"
        )
    }
}
