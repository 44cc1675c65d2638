import RichPushCore

/// A rendered chart: the PNG bytes and their size in pixels.
public struct RenderedChart: Sendable {
    public var png: [UInt8]
    public var width: Int
    public var height: Int
}

/// Draws a ``ChartSpec`` into a PNG, identically on every platform.
///
/// The device's service extension and the server call this same code, so the picture an Android user sees
/// (rendered by the server) is byte for byte the one an iPhone draws for itself.
///
/// ```swift
/// let spec = try ChartSpec.decode(JSONValue.parse(json))
/// let chart = ChartRenderer.render(spec)          // chart.png is the file's bytes
/// ```
public enum ChartRenderer {
    /// Renders to PNG. `scale` overrides the spec's scale.
    /// Renders to PNG. `scale` overrides the spec's scale; either is lowered to fit ``ChartSpec/maxPixels``.
    public static func render(_ spec: ChartSpec, scale: Int? = nil) -> RenderedChart {
        let s = ChartSpec.drawnScale(width: spec.width, height: spec.height, requested: scale ?? spec.scale)
        let bitmap = draw(spec, scale: s)
        let (w, h) = (bitmap.width, bitmap.height)
        // Handed over, not shared: the encoder filters the pixels in place.
        return RenderedChart(png: PNGEncoder.encode(consume bitmap, pixelsPerPoint: s), width: w, height: h)
    }

    /// Draws into a bitmap without encoding it (tests look at its pixels).
    ///
    /// Whatever the spec holds (it may come straight from a payload), the size is clamped to
    /// ``ChartSpec/sizeRange``, the pixels to ``ChartSpec/maxPixels``, and values a chart cannot place are left
    /// out like gaps.
    public static func draw(_ spec: ChartSpec, scale: Int? = nil) -> Bitmap {
        let s = Double(ChartSpec.drawnScale(width: spec.width, height: spec.height, requested: scale ?? spec.scale))
        let width = min(max(spec.width, ChartSpec.sizeRange.lowerBound), ChartSpec.sizeRange.upperBound)
        let height = min(max(spec.height, ChartSpec.sizeRange.lowerBound), ChartSpec.sizeRange.upperBound)
        let spec = spec.placeable
        let palette = ChartPalette(spec: spec)
        var bitmap = Bitmap(width: width * Int(s), height: height * Int(s), background: palette.background)
        var layout = ChartLayout(spec: spec, width: Double(width), height: Double(height))
        layout.scale = s
        layout.drawHeader(on: &bitmap, palette: palette)
        layout.drawPlot(on: &bitmap, palette: palette)
        return bitmap
    }
}

extension ChartSpec {
    /// The spec with what a chart cannot draw taken out: values past ``ChartSpec/maxMagnitude`` become gaps, an
    /// unusable `y` range is fitted to the data instead, counts and widths are held to the validator's ranges.
    var placeable: ChartSpec {
        var spec = self
        spec.series = Array(series.prefix(ChartSpec.maxSeries)).map { s in
            var s = s
            s.values = s.values.prefix(ChartSpec.maxValuesPerSeries).map { ChartSpec.isPlaceable($0) ? $0 : .nan }
            return s
        }
        if let lo = yMin, let hi = yMax, !(lo < hi && ChartSpec.isPlaceable(lo) && ChartSpec.isPlaceable(hi)) {
            spec.yMin = nil
            spec.yMax = nil
        }
        spec.labels = Array(labels.prefix(ChartSpec.maxLabels))
        spec.gridLines = min(max(gridLines, ChartSpec.gridRange.lowerBound), ChartSpec.gridRange.upperBound)
        spec.lineWidth = lineWidth > 0 && lineWidth <= ChartSpec.maxLineWidth ? lineWidth : 2
        return spec
    }
}

/// Where each part of a chart goes, in points; drawing multiplies by the scale.
struct ChartLayout {
    let spec: ChartSpec
    let width: Double
    let height: Double
    var scale = 1.0

    static let titleSize = 12.0
    static let valueSize = 22.0
    static let changeSize = 13.0
    static let labelSize = 9.5

    var isSparkline: Bool { spec.kind == .sparkline }
    var padding: Double { isSparkline ? 4 : 12 }
    var hasTitle: Bool { spec.title != nil }
    var hasValueRow: Bool { spec.value != nil || (spec.change != nil && spec.title == nil) }
    var headerHeight: Double {
        var h = 0.0
        if hasTitle { h += 16 }
        if hasValueRow { h += 28 }
        return h > 0 ? h + 6 : 0
    }
    var footerHeight: Double { spec.labels.isEmpty || isSparkline ? 0 : 15 }

    /// The plot rectangle in points. A chart too small for its header drops the header.
    var plot: (x0: Double, y0: Double, x1: Double, y1: Double) {
        var top = padding + headerHeight
        if height - top - padding - footerHeight < 12 { top = padding }
        return (padding, top, width - padding - gutter, height - padding - footerHeight)
    }

    var showsGrid: Bool { !isSparkline && spec.gridLines > 0 }

    /// The axis of the chart's values (computed once per layout).
    let axis: AxisScale

    init(spec: ChartSpec, width: Double, height: Double) {
        self.spec = spec
        self.width = width
        self.height = height
        axis = AxisScale(
            values: spec.series.flatMap(\.values),
            explicitMin: spec.yMin,
            explicitMax: spec.yMax,
            tickCount: spec.kind == .sparkline ? 2 : max(spec.gridLines, 2),
            includeZero: spec.kind == .bar
        )
    }

    /// Room on the right for the y labels, measured on the widest one.
    var gutter: Double {
        guard showsGrid else { return 0 }
        let widest =
            axis.ticks.map { StrokeFont.width(of: AxisScale.format($0, decimals: axis.decimals), size: Self.labelSize) }
            .max() ?? 0
        return widest + 6
    }

    func drawHeader(on bitmap: inout Bitmap, palette: ChartPalette) {
        guard plot.y0 > padding else { return }
        let s = scale
        var y = padding
        if let title = spec.title {
            y += 12
            bitmap.draw(
                text: title,
                x: padding * s,
                baseline: y * s,
                size: Self.titleSize * s,
                color: palette.secondaryText
            )
            if spec.value == nil, let change = spec.change, hasTitle {
                bitmap.draw(
                    text: change,
                    x: (width - padding) * s,
                    baseline: y * s,
                    size: Self.titleSize * s,
                    weight: .bold,
                    align: .right,
                    color: palette.trendColor(spec.effectiveTrend)
                )
            }
            y += 4
        }
        drawLegend(on: &bitmap, palette: palette, baseline: padding + 12)
        if hasValueRow {
            y += 22
            var x = padding
            if let value = spec.value {
                x +=
                    bitmap.draw(
                        text: value,
                        x: x * s,
                        baseline: y * s,
                        size: Self.valueSize * s,
                        weight: .bold,
                        color: palette.text
                    ) / s + 8
            }
            if let change = spec.change, spec.value != nil || !hasTitle {
                bitmap.draw(
                    text: change,
                    x: x * s,
                    baseline: y * s,
                    size: Self.changeSize * s,
                    weight: .bold,
                    color: palette.trendColor(spec.effectiveTrend)
                )
            }
        }
    }

    /// Names of the series with their colours, right-aligned on the title row.
    func drawLegend(on bitmap: inout Bitmap, palette: ChartPalette, baseline: Double) {
        guard hasTitle, spec.value == nil || spec.change == nil, spec.series.contains(where: { $0.name != nil }) else {
            return
        }
        let s = scale
        var x = (width - padding) * s
        for (i, series) in spec.series.enumerated().reversed() {
            guard let name = series.name else { continue }
            let w = bitmap.draw(
                text: name,
                x: x,
                baseline: baseline * s,
                size: Self.labelSize * s,
                align: .right,
                color: palette.secondaryText
            )
            x -= w + 4 * s
            bitmap.stroke(
                [(x - 3 * s, (baseline - 3.2) * s)],
                lineWidth: 6 * s,
                color: palette.color(forSeries: i, in: spec)
            )
            x -= 16 * s
        }
    }

    func drawPlot(on bitmap: inout Bitmap, palette: ChartPalette) {
        let s = scale
        let p = plot
        let range = axis.max - axis.min
        func py(_ v: Double) -> Double { (p.y1 - (v - axis.min) / range * (p.y1 - p.y0)) * s }

        // Grid and y labels.
        if showsGrid {
            let hair = max(1, s * 0.5)
            for tick in axis.ticks {
                let y = py(tick)
                bitmap.fill(x0: p.x0 * s, y0: y - hair / 2, x1: p.x1 * s, y1: y + hair / 2, color: palette.grid)
                bitmap.draw(
                    text: AxisScale.format(tick, decimals: axis.decimals),
                    x: (width - padding) * s,
                    baseline: y + Self.labelSize * 0.35 * s,
                    size: Self.labelSize * s,
                    align: .right,
                    color: palette.secondaryText
                )
            }
        }

        // X labels, spread evenly.
        if !spec.labels.isEmpty && !isSparkline {
            let n = spec.labels.count
            let barCount = spec.series.map(\.values.count).max() ?? 0
            // Under bars, one label per bar sits centred on it; otherwise labels spread from edge to edge.
            let perBar = spec.kind == .bar && n == barCount
            for (i, label) in spec.labels.enumerated() {
                let t = perBar ? (Double(i) + 0.5) / Double(n) : (n == 1 ? 0.5 : Double(i) / Double(n - 1))
                let x = (p.x0 + (p.x1 - p.x0) * t) * s
                let align: Bitmap.TextAlignment =
                    perBar || n == 1 ? .center : (i == 0 ? .left : (i == n - 1 ? .right : .center))
                bitmap.draw(
                    text: label,
                    x: x,
                    baseline: (p.y1 + 12.5) * s,
                    size: Self.labelSize * s,
                    align: align,
                    color: palette.secondaryText
                )
            }
        }

        switch spec.kind {
        case .bar: drawBars(on: &bitmap, palette: palette, axis: axis, py: py)
        case .line, .area, .sparkline: drawLines(on: &bitmap, palette: palette, axis: axis, py: py)
        }
    }

    func drawLines(on bitmap: inout Bitmap, palette: ChartPalette, axis: AxisScale, py: (Double) -> Double) {
        let s = scale
        let p = plot
        let lineWidth = spec.lineWidth * s
        // Keep the round caps and the end dot inside the plot.
        let inset = lineWidth * 1.6
        for (index, series) in spec.series.enumerated() {
            let color = palette.color(forSeries: index, in: spec)
            let n = series.values.count
            func px(_ i: Int) -> Double {
                n == 1
                    ? (p.x0 + p.x1) / 2 * s
                    : p.x0 * s + inset + (p.x1 * s - p.x0 * s - 2 * inset) * Double(i) / Double(n - 1)
            }
            // Gaps (null values) split the line into runs.
            var runs: [[(Double, Double)]] = [[]]
            for (i, v) in series.values.enumerated() {
                if v.isNaN {
                    if !runs[runs.count - 1].isEmpty { runs.append([]) }
                } else {
                    runs[runs.count - 1].append((px(i), py(v)))
                }
            }
            runs = runs.filter { !$0.isEmpty }
            if spec.kind == .area {
                let base = py(min(max(0, axis.min), axis.max))
                for run in runs where run.count >= 2 {
                    let color = RGBAColor(r: color.r, g: color.g, b: color.b, a: color.a)
                    if spec.gradient {
                        bitmap.fillUnder(
                            run,
                            baseline: base,
                            gradientTop: p.y0 * s,
                            color: color,
                            topAlpha: 0.42,
                            bottomAlpha: 0.03
                        )
                    } else {
                        bitmap.fillUnder(
                            run,
                            baseline: base,
                            gradientTop: p.y0 * s,
                            color: color,
                            topAlpha: 0.25,
                            bottomAlpha: 0.25
                        )
                    }
                }
            }
            for run in runs { bitmap.stroke(run, lineWidth: lineWidth, color: color) }
            // A dot on the latest value, ringed in the background colour.
            if let last = runs.last?.last, index == 0 || spec.series.count == 1 {
                bitmap.stroke([last], lineWidth: lineWidth * 3.2, color: palette.background)
                bitmap.stroke([last], lineWidth: lineWidth * 2.0, color: color)
            }
        }
    }

    func drawBars(on bitmap: inout Bitmap, palette: ChartPalette, axis: AxisScale, py: (Double) -> Double) {
        let s = scale
        let p = plot
        let count = spec.series.map(\.values.count).max() ?? 0
        guard count > 0 else { return }
        let groups = Double(spec.series.count)
        let slot = (p.x1 - p.x0) * s / Double(count)
        let groupWidth = slot * 0.72
        let barWidth = groupWidth / groups
        let radius = min(barWidth / 2, 3 * s)
        let zero = py(min(max(0, axis.min), axis.max))
        for (index, series) in spec.series.enumerated() {
            let color = palette.color(forSeries: index, in: spec)
            for (i, v) in series.values.enumerated() where !v.isNaN {
                let x0 = p.x0 * s + slot * Double(i) + (slot - groupWidth) / 2 + barWidth * Double(index)
                let x1 = x0 + barWidth - (groups > 1 ? max(1, s) : 0)
                let y = py(v)
                if y <= zero {
                    // Rounded at the top, standing square on the baseline.
                    bitmap.fillRoundedRect(
                        x0: x0,
                        y0: y,
                        x1: x1,
                        y1: zero + radius,
                        radius: radius,
                        clipY0: y,
                        clipY1: zero,
                        color: color
                    )
                } else {
                    bitmap.fillRoundedRect(
                        x0: x0,
                        y0: zero - radius,
                        x1: x1,
                        y1: y,
                        radius: radius,
                        clipY0: zero,
                        clipY1: y,
                        color: color
                    )
                }
            }
        }
    }
}
