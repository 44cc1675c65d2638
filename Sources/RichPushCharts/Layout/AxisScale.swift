/// The y range of a chart and its grid values, chosen from "nice" steps (1, 2, 2.5, 5 × 10ⁿ).
///
/// Only exact arithmetic on doubles (no logarithms), so every platform picks the same ticks.
struct AxisScale {
    var min: Double
    var max: Double
    var ticks: [Double]
    var decimals: Int

    init(values: [Double], explicitMin: Double?, explicitMax: Double?, tickCount: Int, includeZero: Bool) {
        let finite = values.filter { $0.isFinite }
        var lo = finite.min() ?? 0
        var hi = finite.max() ?? 1
        if includeZero {
            lo = Swift.min(lo, 0)
            hi = Swift.max(hi, 0)
        }
        if let a = explicitMin, let b = explicitMax, a < b, a.isFinite, b.isFinite {
            min = a
            max = b
            let n = Swift.max(tickCount, 2)
            ticks = (0..<n).map { a + (b - a) * Double($0) / Double(n - 1) }
            decimals = AxisScale.decimals(forStep: (b - a) / Double(n - 1))
            return
        }
        if hi == lo {
            let pad = lo == 0 ? 1 : abs(lo) * 0.05
            lo -= pad
            hi += pad
        }
        let intervals = Swift.max(tickCount - 1, 1)
        var step = AxisScale.niceStep((hi - lo) / Double(intervals))
        var start = (lo / step).rounded(.down) * step
        // Widen the step until the ticks cover the data.
        var guardCount = 0
        while start + step * Double(intervals) < hi && guardCount < 8 {
            step = AxisScale.niceStep(step * 1.0001)
            start = (lo / step).rounded(.down) * step
            guardCount += 1
        }
        guard step > 0, step.isNormal, start.isFinite, (start + step * Double(intervals)).isFinite else {
            // Spans too small or too large for nice steps (only reached by values a spec cannot carry).
            min = lo
            max = hi > lo ? hi : lo + 1
            ticks = [min, max]
            decimals = 0
            return
        }
        min = start
        max = start + step * Double(intervals)
        ticks = (0...intervals).map { start + step * Double($0) }
        decimals = AxisScale.decimals(forStep: step)
    }

    /// The smallest of 1, 2, 2.5, 5, 10 × 10ⁿ that is at least `x`.
    static func niceStep(_ x: Double) -> Double {
        guard x > 0, x.isFinite else { return 1 }
        var magnitude = 1.0
        while magnitude * 10 <= x { magnitude *= 10 }
        while magnitude > x { magnitude /= 10 }
        for m in [1.0, 2.0, 2.5, 5.0, 10.0] where m * magnitude >= x { return m * magnitude }
        return 10 * magnitude
    }

    static func decimals(forStep step: Double) -> Int {
        var d = 0
        var s = abs(step)
        while d < 6 && abs(s - s.rounded()) > 1e-9 * Swift.max(1, s) {
            s *= 10
            d += 1
        }
        return d
    }

    /// Formats a value with a fixed number of decimals and no locale: "1,234.5" → "1234.5", large values
    /// with K/M.
    static func format(_ v: Double, decimals: Int) -> String {
        let a = abs(v)
        // Past what a spec may carry there is no honest label (and Int64 below would overflow).
        guard v.isFinite, a <= 1e15 else { return "" }
        if a >= 10_000_000 {
            return format(
                v / 1_000_000,
                decimals: a >= 100_000_000 || a.truncatingRemainder(dividingBy: 1_000_000) == 0 ? 0 : 1
            ) + "M"
        }
        if a >= 10_000 {
            return format(v / 1000, decimals: a >= 100_000 || a.truncatingRemainder(dividingBy: 1000) == 0 ? 0 : 1)
                + "K"
        }
        var factor = 1.0
        for _ in 0..<decimals { factor *= 10 }
        let scaled = Int64((abs(v) * factor).rounded())
        var digits = String(scaled)
        if decimals > 0 {
            while digits.count <= decimals { digits = "0" + digits }
            digits.insert(".", at: digits.index(digits.endIndex, offsetBy: -decimals))
        }
        return (v < 0 && scaled != 0 ? "-" : "") + digits
    }
}
