import NIOCore

/// How long an emulator waits before it answers each request, as a provider a real round trip away would: a fixed
/// delay plus a uniform jitter in `0...jitter`. The wait is a timer on the connection's event loop, so every other
/// stream and connection goes on meanwhile; a client's requests in flight pile up exactly as they do against a
/// service 100 ms away.
public struct ResponseDelay: Sendable, Equatable {
    /// The longest delay taken; larger values are cut to it.
    public static let maximumMilliseconds = 60_000.0
    public static let none = ResponseDelay(milliseconds: 0)

    public private(set) var milliseconds: Double
    public private(set) var jitterMilliseconds: Double

    /// Negative, NaN and infinite values count as 0; values above a minute as a minute.
    public init(milliseconds: Double, jitterMilliseconds: Double = 0) {
        self.milliseconds = Self.clamp(milliseconds)
        self.jitterMilliseconds = Self.clamp(jitterMilliseconds)
    }

    public var isZero: Bool { milliseconds == 0 && jitterMilliseconds == 0 }

    /// One request's delay, or nil to answer at once.
    func sample() -> TimeAmount? {
        guard !isZero else { return nil }
        let ms = milliseconds + (jitterMilliseconds > 0 ? Double.random(in: 0...jitterMilliseconds) : 0)
        let nanos = (ms * 1_000_000).rounded()
        return nanos >= 1 ? .nanoseconds(Int64(nanos)) : nil
    }

    private static func clamp(_ v: Double) -> Double {
        guard v.isFinite, v > 0 else { return 0 }
        return min(v, maximumMilliseconds)
    }
}
