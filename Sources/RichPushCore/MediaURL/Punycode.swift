/// Punycode (RFC 3492, https://www.rfc-editor.org/rfc/rfc3492): the encoding of a Unicode label of a domain name
/// in letters, digits and hyphens, as its `xn--` form carries it. Written here because Foundation on Linux is not
/// guaranteed to do IDNA, and the device, the server and `richpush send` must agree on every name.
///
/// Both directions are bounded: at most ``maxScalars`` code points in or out, and every step of the integer
/// arithmetic is checked for overflow as §6.4 asks, so no input can trap or run long.
///
/// ```swift
/// Punycode.encode(Array("bücher".unicodeScalars))   // "bcher-kva"
/// ```
public enum Punycode {
    /// More than any label can hold (a DNS label is 63 octets): longer input is refused, not encoded.
    public static let maxScalars = 256

    // §5: the parameter values for Punycode.
    private static let base = 36
    private static let tMin = 1
    private static let tMax = 26
    private static let skew = 38
    private static let damp = 700
    private static let initialBias = 72
    private static let initialN = 0x80
    /// The largest value the arithmetic may reach (a 32-bit signed integer's, as in the RFC's sample).
    private static let maxInt = 0x7FFF_FFFF

    /// The label's Punycode (without `xn--`); basic code points keep their case. nil when the input is longer than
    /// ``maxScalars`` or the arithmetic would overflow.
    public static func encode(_ input: [Unicode.Scalar]) -> String? {
        guard input.count <= maxScalars else { return nil }
        var output: [UInt8] = input.filter(\.isASCII).map { UInt8($0.value) }
        let basic = output.count
        if basic > 0 { output.append(UInt8(ascii: "-")) }
        var n = initialN
        var delta = 0
        var bias = initialBias
        var handled = basic
        while handled < input.count {
            // The smallest code point not yet handled.
            guard let m = input.lazy.map({ Int($0.value) }).filter({ $0 >= n }).min() else { return nil }
            guard m - n <= (maxInt - delta) / (handled + 1) else { return nil }
            delta += (m - n) * (handled + 1)
            n = m
            for scalar in input {
                let c = Int(scalar.value)
                if c < n {
                    guard delta < maxInt else { return nil }
                    delta += 1
                }
                guard c == n else { continue }
                var q = delta
                var k = base
                while true {
                    let t = threshold(k, bias)
                    if q < t { break }
                    output.append(digit(t + (q - t) % (base - t)))
                    q = (q - t) / (base - t)
                    k += base
                }
                output.append(digit(q))
                bias = adapt(delta, points: handled + 1, first: handled == basic)
                delta = 0
                handled += 1
            }
            guard delta < maxInt else { return nil }
            delta += 1
            n += 1
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// The code points a label's Punycode (without `xn--`) stands for; nil for anything that is not valid Punycode
    /// (a character outside letters, digits and hyphens, a truncated number, overflow, a value that is not a Unicode
    /// scalar or is below 0x80, more than ``maxScalars`` code points).
    public static func decode(_ input: Substring) -> [Unicode.Scalar]? {
        let bytes = Array(input.utf8)
        guard bytes.count <= maxScalars * 4 else { return nil }
        var output: [Unicode.Scalar] = []
        // Everything before the last hyphen is basic code points, copied.
        let delimiter = bytes.lastIndex(of: UInt8(ascii: "-"))
        if let delimiter {
            for b in bytes[..<delimiter] {
                guard b < 0x80 else { return nil }
                output.append(Unicode.Scalar(b))
            }
        }
        // A delimiter in front delimits nothing: "-abc" is not Punycode (it would decode like "abc").
        var position = delimiter.map { $0 > 0 ? $0 + 1 : 0 } ?? 0
        var n = initialN
        var i = 0
        var bias = initialBias
        while position < bytes.count {
            let old = i
            var w = 1
            var k = base
            while true {
                guard position < bytes.count, let d = value(of: bytes[position]) else { return nil }
                position += 1
                guard d <= (maxInt - i) / w else { return nil }
                i += d * w
                let t = threshold(k, bias)
                if d < t { break }
                guard w <= maxInt / (base - t) else { return nil }
                w *= base - t
                k += base
            }
            let count = output.count + 1
            bias = adapt(i - old, points: count, first: old == 0)
            guard i / count <= maxInt - n else { return nil }
            n += i / count
            i %= count
            guard n >= initialN, let scalar = Unicode.Scalar(UInt32(n)), output.count < maxScalars else { return nil }
            output.insert(scalar, at: i)
            i += 1
        }
        return output
    }

    /// §6.1: the bias after each encoded integer.
    private static func adapt(_ delta: Int, points: Int, first: Bool) -> Int {
        var d = first ? delta / damp : delta / 2
        d += d / points
        var k = 0
        while d > ((base - tMin) * tMax) / 2 {
            d /= base - tMin
            k += base
        }
        return k + (base - tMin + 1) * d / (d + skew)
    }

    private static func threshold(_ k: Int, _ bias: Int) -> Int {
        k <= bias ? tMin : (k >= bias + tMax ? tMax : k - bias)
    }

    /// 0–25 as a–z, 26–35 as 0–9 (lower case, as IDNA writes it).
    private static func digit(_ d: Int) -> UInt8 { d < 26 ? UInt8(97 + d) : UInt8(22 + d) }

    private static func value(of b: UInt8) -> Int? {
        switch b {
        case UInt8(ascii: "a")...UInt8(ascii: "z"): return Int(b) - 97
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): return Int(b) - 65
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return Int(b) - 22
        default: return nil
        }
    }
}
