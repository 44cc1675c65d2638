import Foundation

/// A chart described by its data, small enough to travel inside a push payload.
///
/// The device draws it in the service extension; the server draws the very same PNG for platforms that
/// cannot. The JSON form is documented in `docs/payload-format.md`.
public struct ChartSpec: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        case line, area, bar, sparkline
    }

    public enum Theme: String, Sendable, Hashable, CaseIterable {
        case light, dark
    }

    public enum Trend: String, Sendable, Hashable, CaseIterable {
        case up, down, flat
    }

    public struct Series: Sendable, Hashable {
        public var values: [Double]
        public var color: RGBAColor?
        public var name: String?

        public init(values: [Double], color: RGBAColor? = nil, name: String? = nil) {
            self.values = values
            self.color = color
            self.name = name
        }
    }

    /// Colours that replace the theme's.
    public struct Colors: Sendable, Hashable {
        public var background: RGBAColor?
        public var text: RGBAColor?
        public var grid: RGBAColor?
        public var up: RGBAColor?
        public var down: RGBAColor?

        public init(
            background: RGBAColor? = nil,
            text: RGBAColor? = nil,
            grid: RGBAColor? = nil,
            up: RGBAColor? = nil,
            down: RGBAColor? = nil
        ) {
            self.background = background
            self.text = text
            self.grid = grid
            self.up = up
            self.down = down
        }
    }

    public var kind: Kind
    public var series: [Series]
    public var title: String?
    /// The headline figure, such as `$1,234.50`.
    public var value: String?
    /// The change label beside it, such as `▲ 2.3%`.
    public var change: String?
    /// Colours the change label; when absent it is read from the label's first character (▲ ▼ + -).
    public var trend: Trend?
    /// Labels spread evenly under the x axis (first, middle, last…).
    public var labels: [String]
    /// The y range; when absent it is fitted to the data.
    public var yMin: Double?
    public var yMax: Double?
    /// Size in points.
    public var width: Int
    public var height: Int
    /// Pixels per point: 1, 2 or 3.
    public var scale: Int
    public var theme: Theme
    public var colors: Colors?
    /// Horizontal grid lines; 0 for none.
    public var gridLines: Int
    /// Line width in points.
    public var lineWidth: Double
    /// For area charts: the fill fades towards the baseline (true) or is flat (false).
    public var gradient: Bool

    public static let defaultWidth = 320
    public static let defaultHeight = 180
    public static let sizeRange = 16...1024
    public static let maxValuesPerSeries = 1000
    public static let maxSeries = 8
    public static let maxLabels = 12
    public static let gridRange = 0...20
    /// Line width in points: more than 0, at most the upper bound.
    public static let maxLineWidth = 20.0
    /// The largest magnitude of a value or a `y` bound: past it a chart can neither place nor label a value
    /// (spans and ticks overflow), so the validator refuses it and the renderer leaves such a value out.
    public static let maxMagnitude = 1e15
    /// The most pixels a chart is drawn with, so that drawing and encoding stay within about 6 MB on the device
    /// (3 bytes a pixel, filtered in place, plus the compressor's tables). A larger size × scale is drawn at the
    /// highest scale that fits; every size in ``sizeRange`` fits at scale 1.
    public static let maxPixels = 1_200_000

    /// The scale a chart is drawn at: the requested one (1...3), lowered until the pixels fit ``maxPixels``.
    public static func drawnScale(width: Int, height: Int, requested: Int) -> Int {
        let w = min(max(width, sizeRange.lowerBound), sizeRange.upperBound)
        let h = min(max(height, sizeRange.lowerBound), sizeRange.upperBound)
        var s = min(max(requested, 1), 3)
        while s > 1 && w * h * s * s > maxPixels { s -= 1 }
        return s
    }

    /// True for a value the chart can place: finite and within ``maxMagnitude``.
    public static func isPlaceable(_ v: Double) -> Bool { v.isFinite && abs(v) <= maxMagnitude }

    public init(
        kind: Kind = .line,
        series: [Series],
        title: String? = nil,
        value: String? = nil,
        change: String? = nil,
        trend: Trend? = nil,
        labels: [String] = [],
        yMin: Double? = nil,
        yMax: Double? = nil,
        width: Int = ChartSpec.defaultWidth,
        height: Int = ChartSpec.defaultHeight,
        scale: Int = 2,
        theme: Theme = .light,
        colors: Colors? = nil,
        gridLines: Int = 3,
        lineWidth: Double = 2,
        gradient: Bool = true
    ) {
        self.kind = kind
        self.series = series
        self.title = title
        self.value = value
        self.change = change
        self.trend = trend
        self.labels = labels
        self.yMin = yMin
        self.yMax = yMax
        self.width = width
        self.height = height
        self.scale = scale
        self.theme = theme
        self.colors = colors
        self.gridLines = gridLines
        self.lineWidth = lineWidth
        self.gradient = gradient
    }

    /// The trend to colour the change label with: the explicit one, or the label's leading symbol.
    public var effectiveTrend: Trend {
        if let trend { return trend }
        guard let first = change?.trimmingCharacters(in: .whitespaces).first else { return .flat }
        switch first {
        case "▲", "↑", "+": return .up
        case "▼", "↓", "-", "−": return .down
        default: return .flat
        }
    }
}

/// A colour written as `#RGB`, `#RRGGBB` or `#RRGGBBAA`.
public struct RGBAColor: Sendable, Hashable, CustomStringConvertible {
    public var r: UInt8
    public var g: UInt8
    public var b: UInt8
    public var a: UInt8

    public init(r: UInt8, g: UInt8, b: UInt8, a: UInt8 = 255) {
        self.r = r
        self.g = g
        self.b = b
        self.a = a
    }

    public init?(hex: String) {
        guard hex.hasPrefix("#") else { return nil }
        let digits = Array(hex.dropFirst())
        func nibble(_ c: Character) -> UInt8? { c.hexDigitValue.map { UInt8($0) } }
        let values = digits.compactMap(nibble)
        guard values.count == digits.count else { return nil }
        switch values.count {
        case 3: self.init(r: values[0] * 17, g: values[1] * 17, b: values[2] * 17)
        case 6: self.init(r: values[0] << 4 | values[1], g: values[2] << 4 | values[3], b: values[4] << 4 | values[5])
        case 8:
            self.init(
                r: values[0] << 4 | values[1],
                g: values[2] << 4 | values[3],
                b: values[4] << 4 | values[5],
                a: values[6] << 4 | values[7]
            )
        default: return nil
        }
    }

    public var description: String {
        let hex = [r, g, b] + (a == 255 ? [] : [a])
        return "#"
            + hex.map { byte in
                let s = String(byte, radix: 16, uppercase: true)
                return s.count == 1 ? "0" + s : s
            }.joined()
    }
}
