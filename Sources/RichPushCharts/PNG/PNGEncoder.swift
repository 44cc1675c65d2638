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
        var none = 0, sub = 0, upSum = 0, avg = 0, pae = 0
        for i in 0..<min(3, n) {
            let x = cur[i], b = up[i]
            none += cost(x)
            sub += cost(x)
            upSum += cost(x &- b)
            avg += cost(x &- b / 2)
            pae += cost(x &- b)  // Paeth with a = c = 0 predicts b
        }
        var i = 3
        while i < n {
            let x = cur[i], a = cur[i - 3], b = up[i], c = up[i - 3]
            none += cost(x)
            sub += cost(x &- a)
            upSum += cost(x &- b)
            avg += cost(x &- UInt8((UInt16(a) &+ UInt16(b)) >> 1))
            pae += cost(x &- paeth(a, b, c))
            i += 1
        }
        var best = 0, bestSum = none
        if sub < bestSum { best = 1; bestSum = sub }
        if upSum < bestSum { best = 2; bestSum = upSum }
        if avg < bestSum { best = 3; bestSum = avg }
        if pae < bestSum { best = 4 }
        return best
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
