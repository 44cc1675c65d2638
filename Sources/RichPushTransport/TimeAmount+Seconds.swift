import NIOCore

extension TimeAmount {
    /// `seconds` as a time amount, held to `range` first: a configured number that is infinite, or so large that
    /// its nanoseconds overflow 64 bits, would trap in the conversion. Not a number gives `otherwise`.
    public static func seconds(
        held seconds: Double,
        to range: ClosedRange<Double>,
        otherwise: Double
    ) -> TimeAmount {
        let held = seconds.isNaN ? otherwise : min(max(seconds, range.lowerBound), range.upperBound)
        return .nanoseconds(Int64(held * 1e9))
    }
}
