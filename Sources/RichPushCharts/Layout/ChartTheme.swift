import RichPushCore

/// The colours a chart is drawn with: the theme's, with the spec's overrides on top.
struct ChartPalette {
    var background: RGBAColor
    var text: RGBAColor
    var secondaryText: RGBAColor
    var grid: RGBAColor
    var up: RGBAColor
    var down: RGBAColor
    var series: [RGBAColor]

    init(spec: ChartSpec) {
        switch spec.theme {
        case .light:
            background = RGBAColor(r: 0xFF, g: 0xFF, b: 0xFF)
            text = RGBAColor(r: 0x1C, g: 0x1C, b: 0x1E)
            secondaryText = RGBAColor(r: 0x6C, g: 0x6C, b: 0x70)
            grid = RGBAColor(r: 0xE3, g: 0xE3, b: 0xE8)
            up = RGBAColor(r: 0x1F, g: 0x9D, b: 0x4A)
            down = RGBAColor(r: 0xE0, g: 0x35, b: 0x2B)
            series = [0x0A7AFF, 0xFF8A00, 0x1F9D4A, 0xAF52DE, 0xFF2D55, 0x32ADE6, 0xC9A200, 0x8E8E93].map(Self.rgb)
        case .dark:
            background = RGBAColor(r: 0x1C, g: 0x1C, b: 0x1E)
            text = RGBAColor(r: 0xF2, g: 0xF2, b: 0xF7)
            secondaryText = RGBAColor(r: 0xA1, g: 0xA1, b: 0xA6)
            grid = RGBAColor(r: 0x3A, g: 0x3A, b: 0x3C)
            up = RGBAColor(r: 0x30, g: 0xD1, b: 0x58)
            down = RGBAColor(r: 0xFF, g: 0x45, b: 0x3A)
            series = [0x0A84FF, 0xFF9F0A, 0x30D158, 0xBF5AF2, 0xFF375F, 0x64D2FF, 0xFFD60A, 0x98989D].map(Self.rgb)
        }
        if let c = spec.colors {
            if let v = c.background { background = RGBAColor(r: v.r, g: v.g, b: v.b) }  // the image is opaque
            if let v = c.text { text = v }
            if let v = c.grid { grid = v }
            if let v = c.up { up = v }
            if let v = c.down { down = v }
        }
    }

    static func rgb(_ v: Int) -> RGBAColor {
        RGBAColor(r: UInt8(v >> 16 & 0xFF), g: UInt8(v >> 8 & 0xFF), b: UInt8(v & 0xFF))
    }

    func trendColor(_ trend: ChartSpec.Trend) -> RGBAColor {
        switch trend {
        case .up: return up
        case .down: return down
        case .flat: return secondaryText
        }
    }

    /// A series' colour: its own, else (for a lone series with a trend) the trend's, else the palette's.
    func color(forSeries i: Int, in spec: ChartSpec) -> RGBAColor {
        if let c = spec.series[i].color { return c }
        if spec.series.count == 1 && spec.change != nil && spec.effectiveTrend != .flat {
            return trendColor(spec.effectiveTrend)
        }
        return series[i % series.count]
    }
}
