import RichPushSandbox

/// A small deterministic generator (splitmix64), so that "random" inputs are the same on every run and a failure
/// names its seed.
public struct SeededRandom: RandomNumberGenerator {
    var mix: SplitMix
    public init(seed: UInt64) { mix = SplitMix(seed: seed &+ 0x9E37_79B9_7F4A_7C15) }
    public mutating func next() -> UInt64 { mix.next() }
}
