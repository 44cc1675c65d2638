import Foundation

/// Writes a ``Bitmap`` as a PNG: RGB, 8 bits, one IDAT, rows filtered with the filter that suits each best.
public enum PNGEncoder {
    static let signature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]

    /// Encodes the bitmap. The bitmap's rows are filtered in place, so it is consumed.
    ///
    /// `pixelsPerPoint` is written as the physical size (72 dpi × scale) so that viewers show it at its size
    /// in points.
    public static func encode(_ bitmap: consuming Bitmap, pixelsPerPoint: Int = 1) -> [UInt8] {
        // Filtered in the caller's storage: a `var` copy here would duplicate every pixel (copy on write).
        filterRowsInPlace(&bitmap)
        var out = signature
        var ihdr: [UInt8] = []
        ihdr += be32(bitmap.width) + be32(bitmap.height)
        ihdr += [8, 2, 0, 0, 0]  // 8 bits, RGB, deflate, adaptive filtering, no interlace
        chunk("IHDR", ihdr, into: &out)
        let perMeter = 2835 * max(1, pixelsPerPoint)  // 72 dpi is 2834.6 pixels per metre
        chunk("pHYs", be32(perMeter) + be32(perMeter) + [1], into: &out)
        let compressed = bitmap.storage.withUnsafeBufferPointer { Deflate.zlib($0) }
        chunk("IDAT", compressed, into: &out)
        chunk("IEND", [], into: &out)
        return out
    }

    static func be32(_ v: Int) -> [UInt8] { [UInt8(v >> 24 & 0xFF), UInt8(v >> 16 & 0xFF), UInt8(v >> 8 & 0xFF), UInt8(v & 0xFF)] }

    static func chunk(_ type: String, _ data: [UInt8], into out: inout [UInt8]) {
        out += be32(data.count)
        let typeBytes = Array(type.utf8)
        out += typeBytes
        out += data
        let crc = CRC32.checksum(data, initial: CRC32.checksum(typeBytes))
        out += be32(Int(crc))
    }

    /// Filters every row, bottom to top so that each row's unfiltered upper neighbour is still there, and each
    /// row right to left so that its unfiltered left neighbour is too. The filter per row is the one with
    /// the smallest sum of absolute (signed) bytes, the usual heuristic.
    @_spi(Benchmark) public static func filterRowsInPlace(_ bitmap: inout Bitmap) {
        let rowStride = bitmap.stride, n = rowStride - 1, h = bitmap.height
        let zeroRow = [UInt8](repeating: 0, count: n)
        bitmap.storage.withUnsafeMutableBufferPointer { buf in
            zeroRow.withUnsafeBufferPointer { zero in
                let base = buf.baseAddress!
                for y in stride(from: h - 1, through: 0, by: -1) {
                    let cur = base + y * rowStride + 1
                    let up = y > 0 ? UnsafePointer(base + (y - 1) * rowStride + 1) : zero.baseAddress!
                    let best = chooseFilter(cur, up, n)
                    if best != 0 { apply(best, cur, up, n) }
                    cur[-1] = UInt8(best)
                }
            }
        }
    }

    @inline(__always)
    static func cost(_ v: UInt8) -> Int { Int(Int8(bitPattern: v).magnitude) }

    @inline(__always)
    static func paeth(_ a: UInt8, _ b: UInt8, _ c: UInt8) -> UInt8 {
        // Branch-free absolute values, so that the loop over a row can be vectorised.
        let ai = Int16(a), bi = Int16(b), ci = Int16(c)
        let x = bi &- ci, y = ai &- ci, z = ai &+ bi &- ci &- ci
        let pa = (x ^ (x >> 15)) &- (x >> 15)
        let pb = (y ^ (y >> 15)) &- (y >> 15)
        let pc = (z ^ (z >> 15)) &- (z >> 15)
        return pa <= pb && pa <= pc ? a : (pb <= pc ? b : c)
    }

    static func chooseFilter(_ cur: UnsafeMutablePointer<UInt8>, _ up: UnsafePointer<UInt8>, _ n: Int) -> Int {
        // Rows that repeat the one above (most of a chart's background) filter to zeros with Up: no need to
        // weigh the others.
        if memcmp(cur, up, n) == 0 { return 2 }
        let sums = filterCosts(cur, up, n)
        var best = 0, bestSum = sums.0
        if sums.1 < bestSum { best = 1; bestSum = sums.1 }
        if sums.2 < bestSum { best = 2; bestSum = sums.2 }
        if sums.3 < bestSum { best = 3; bestSum = sums.3 }
        if sums.4 < bestSum { best = 4 }
        return best
    }

    /// The sum of absolute (signed) residual bytes of the row under None, Sub, Up, Average and Paeth. Sixteen bytes at
    /// a time (the same sums as ``filterCostsOneByOne(_:_:_:)``, which does the first pixel and the tail).
    static func filterCosts(_ cur: UnsafePointer<UInt8>, _ up: UnsafePointer<UInt8>, _ n: Int) -> (Int, Int, Int, Int, Int) {
        var total = filterCostsOneByOne(cur, up, 0, min(3, n))
        guard n > 3 else { return total }
        typealias V = SIMD16<Int16>
        @inline(__always) func load(_ p: UnsafePointer<UInt8>) -> V {
            V(truncatingIfNeeded: UnsafeRawPointer(p).loadUnaligned(as: SIMD16<UInt8>.self))
        }
        @inline(__always) func cost(_ d: V) -> V {
            // The residual byte is d mod 256 read as a signed byte; its magnitude.
            let s = (d &<< 8) &>> 8
            return (s ^ (s &>> 15)) &- (s &>> 15)
        }
        @inline(__always) func abs16(_ v: V) -> V { (v ^ (v &>> 15)) &- (v &>> 15) }
        var none = V(), sub = V(), upSum = V(), avg = V(), pae = V()
        var i = 3, blocks = 0
        func drain() {
            total.0 += Int(none.wrappedSum()); total.1 += Int(sub.wrappedSum()); total.2 += Int(upSum.wrappedSum())
            total.3 += Int(avg.wrappedSum()); total.4 += Int(pae.wrappedSum())
            none = V(); sub = V(); upSum = V(); avg = V(); pae = V()
            blocks = 0
        }
        while i + 16 <= n {
            let x = load(cur + i), a = load(cur + i - 3), b = load(up + i), c = load(up + i - 3)
            none &+= cost(x)
            sub &+= cost(x &- a)
            upSum &+= cost(x &- b)
            avg &+= cost(x &- ((a &+ b) &>> 1))
            let pa = abs16(b &- c), pb = abs16(a &- c), pc = abs16(a &+ b &- c &- c)
            let predicted = c.replacing(with: b, where: pb .<= pc).replacing(with: a, where: (pa .<= pb) .& (pa .<= pc))
            pae &+= cost(x &- predicted)
            i += 16
            blocks += 1
            // A lane gains at most 128 a block: drain before the sums could pass Int16's range (and the wrapped sum
            // of 16 lanes its range too).
            if blocks == 15 { drain() }
        }
        drain()
        let tail = filterCostsOneByOne(cur, up, i, n)
        return (total.0 + tail.0, total.1 + tail.1, total.2 + tail.2, total.3 + tail.3, total.4 + tail.4)
    }

    /// The same sums over bytes `from..<to`, one at a time.
    static func filterCostsOneByOne(_ cur: UnsafePointer<UInt8>, _ up: UnsafePointer<UInt8>, _ from: Int, _ to: Int) -> (Int, Int, Int, Int, Int) {
        var none = 0, sub = 0, upSum = 0, avg = 0, pae = 0
        var i = from
        while i < to {
            let x = cur[i], b = up[i]
            let a: UInt8 = i >= 3 ? cur[i - 3] : 0, c: UInt8 = i >= 3 ? up[i - 3] : 0
            none += cost(x)
            sub += cost(x &- a)
            upSum += cost(x &- b)
            avg += cost(x &- UInt8((UInt16(a) &+ UInt16(b)) >> 1))
            pae += cost(x &- paeth(a, b, c))
            i += 1
        }
        return (none, sub, upSum, avg, pae)
    }

    /// Writes the filtered row over the raw one, right to left.
    static func apply(_ filter: Int, _ cur: UnsafeMutablePointer<UInt8>, _ up: UnsafePointer<UInt8>, _ n: Int) {
        var i = n - 1
        switch filter {
        case 1:
            while i >= 3 { cur[i] = cur[i] &- cur[i - 3]; i -= 1 }
        case 2:
            while i >= 0 { cur[i] = cur[i] &- up[i]; i -= 1 }
            return
        case 3:
            while i >= 3 { cur[i] = cur[i] &- UInt8((UInt16(cur[i - 3]) + UInt16(up[i])) / 2); i -= 1 }
            while i >= 0 { cur[i] = cur[i] &- up[i] / 2; i -= 1 }
            return
        default:
            while i >= 3 { cur[i] = cur[i] &- paeth(cur[i - 3], up[i], up[i - 3]); i -= 1 }
            while i >= 0 { cur[i] = cur[i] &- up[i]; i -= 1 }
            return
        }
    }
}
