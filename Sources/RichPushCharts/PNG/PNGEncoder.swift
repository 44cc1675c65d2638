/// Writes a ``Bitmap`` as a PNG: RGB, 8 bits, one IDAT, rows filtered with the filter that suits each best.
public enum PNGEncoder {
    static let signature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]

    /// Encodes the bitmap. The bitmap's rows are filtered in place, so it is consumed.
    ///
    /// `pixelsPerPoint` is written as the physical size (72 dpi × scale) so that viewers show it at its size
    /// in points.
    public static func encode(_ bitmap: consuming Bitmap, pixelsPerPoint: Int = 1) -> [UInt8] {
        var bitmap = bitmap
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
    static func filterRowsInPlace(_ bitmap: inout Bitmap) {
        let rowStride = bitmap.stride, rowBytes = rowStride - 1, h = bitmap.height
        bitmap.storage.withUnsafeMutableBufferPointer { buf in
            for y in stride(from: h - 1, through: 0, by: -1) {
                let row = y * rowStride + 1
                let up = y > 0 ? (y - 1) * rowStride + 1 : -1
                @inline(__always) func a(_ i: Int) -> Int { i >= 3 ? Int(buf[row + i - 3]) : 0 }
                @inline(__always) func b(_ i: Int) -> Int { up >= 0 ? Int(buf[up + i]) : 0 }
                @inline(__always) func c(_ i: Int) -> Int { up >= 0 && i >= 3 ? Int(buf[up + i - 3]) : 0 }
                @inline(__always) func paeth(_ a: Int, _ b: Int, _ c: Int) -> Int {
                    let p = a + b - c
                    let pa = abs(p - a), pb = abs(p - b), pc = abs(p - c)
                    return pa <= pb && pa <= pc ? a : (pb <= pc ? b : c)
                }
                @inline(__always) func cost(_ v: Int) -> Int { let s = Int(Int8(truncatingIfNeeded: v)); return s < 0 ? -s : s }
                var sums = [0, 0, 0, 0, 0]
                for i in 0..<rowBytes {
                    let x = Int(buf[row + i])
                    sums[0] += cost(x)
                    sums[1] += cost(x - a(i))
                    sums[2] += cost(x - b(i))
                    sums[3] += cost(x - (a(i) + b(i)) / 2)
                    sums[4] += cost(x - paeth(a(i), b(i), c(i)))
                }
                var best = 0
                for f in 1..<5 where sums[f] < sums[best] { best = f }
                if best != 0 {
                    for i in stride(from: rowBytes - 1, through: 0, by: -1) {
                        let x = Int(buf[row + i])
                        let predicted: Int
                        switch best {
                        case 1: predicted = a(i)
                        case 2: predicted = b(i)
                        case 3: predicted = (a(i) + b(i)) / 2
                        default: predicted = paeth(a(i), b(i), c(i))
                        }
                        buf[row + i] = UInt8(truncatingIfNeeded: x - predicted)
                    }
                }
                buf[row - 1] = UInt8(best)
            }
        }
    }
}
