import Foundation

/// A chart carried in a Live Activity's content state, decoded on the device into plain values a widget draws.
///
/// The server puts a message's `chart` under `content-state.chart` in the form of `docs/payload-format.md`.
/// Declare it in the app's `ContentState` and draw ``points`` with a SwiftUI `Path`:
///
/// ```swift
/// struct ContentState: Codable, Hashable {
///     var score: String
///     var chart: LiveActivityChart?
/// }
/// // in the widget: for (i, line) in state.chart?.points.enumerated() … Path { p in p.addLines(line.map { … }) }
/// ```
///
/// A chart that breaks a rule decodes as an error naming it, so the app can show its content without it.
public struct LiveActivityChart: Codable, Sendable, Hashable {
    /// The chart as sent.
    public let spec: ChartSpec
    /// The y range the points are placed in: the spec's, else fitted to the data (a flat series gets a band around
    /// it, ±1 for everyday values).
    public let yRange: ClosedRange<Double>
    /// Each series' values placed in the unit square: x from 0 (first value) to 1 (last), y from 0 (bottom)
    /// to 1 (top), clamped. A series of one value sits in the middle.
    public let points: [[UnitPoint]]

    public struct UnitPoint: Sendable, Hashable, Codable {
        public var x: Double
        public var y: Double
    }

    public init(_ spec: ChartSpec) {
        self.spec = spec
        let values = spec.series.flatMap(\.values).filter(\.isFinite)
        var low = spec.yMin ?? values.min() ?? 0
        var high = spec.yMax ?? values.max() ?? 1
        if !(low < high) {
            // A flat series: a band around it (wide enough to exist at any magnitude).
            let pad = Swift.max(1, abs(low) * 1e-9)
            (low, high) = (low - pad, low + pad)
        }
        if !(low <= high) { high = low }
        yRange = low...high
        let span = high - low
        points = spec.series.map { series in
            let n = series.values.count
            return series.values.enumerated().map { i, v in
                let x = n > 1 ? Double(i) / Double(n - 1) : 0.5
                // Out of range, not finite, or a span too wide to measure: clamped, or the middle.
                let q = span.isFinite && span > 0 ? (v - low) / span : 0.5
                return UnitPoint(x: x, y: q.isNaN ? 0.5 : Swift.min(Swift.max(q, 0), 1))
            }
        }
    }

    public init(from decoder: any Decoder) throws {
        let json = try JSONValue(from: decoder)
        do {
            let spec = try ChartSpec.decode(json)
            let report = spec.validate(at: LiveActivity.chartKey)
            guard report.isValid else { throw report }
            self.init(spec)
        } catch {
            throw DecodingError.dataCorrupted(
                .init(codingPath: decoder.codingPath, debugDescription: "chart ignored: \(error)")
            )
        }
    }

    public func encode(to encoder: any Encoder) throws { try spec.json.encode(to: encoder) }
}
