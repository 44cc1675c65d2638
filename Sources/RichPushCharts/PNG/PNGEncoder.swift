import Foundation

/// Writes a ``Bitmap`` as a PNG: 8 bits, one IDAT; indexed colour when the chart has at most 256 colours (one
/// byte a pixel instead of three), RGB otherwise; the same pixels either way.
///
/// Rows are not filtered, except that a row equal to the one above is written as zeros (Up). Measured on every
/// chart in the gallery and the benchmark chart, unfiltered rows deflate about a fifth smaller than rows filtered by
/// the usual smallest-sum choice: a drawn chart is flat colour with anti-aliased edges, which the matcher finds
/// as repeats of earlier pixels, while Sub, Average and Paeth turn those edges into residuals that repeat less.
public enum PNGEncoder {
    static let signature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]

    /// Encodes the bitmap. Its storage is reused for the rows to compress, so it is consumed.
    ///
    /// `pixelsPerPoint` is written as the physical size (72 dpi × scale) so that viewers show it at its size
    /// in points.
    public static func encode(_ bitmap: consuming Bitmap, pixelsPerPoint: Int = 1) -> [UInt8] {
        // Prepared in the caller's storage: a `var` copy here would duplicate every pixel (copy on write).
        let (palette, count) = prepareRows(&bitmap)
        var out = signature
        var ihdr: [UInt8] = []
        ihdr += be32(bitmap.width) + be32(bitmap.height)
        // 8 bits, RGB or indexed, deflate, adaptive filtering, no interlace
        ihdr += [8, palette == nil ? 2 : 3, 0, 0, 0]
        chunk("IHDR", ihdr, into: &out)
        if let palette { chunk("PLTE", palette, into: &out) }
        let perMeter = 2835 * max(1, pixelsPerPoint)  // 72 dpi is 2834.6 pixels per metre
        chunk("pHYs", be32(perMeter) + be32(perMeter) + [1], into: &out)
        let compressed = bitmap.storage.withUnsafeBufferPointer {
            Deflate.zlib(UnsafeBufferPointer(rebasing: $0[0..<count]))
        }
        chunk("IDAT", compressed, into: &out)
        chunk("IEND", [], into: &out)
        return out
    }

    static func be32(_ v: Int) -> [UInt8] {
        [UInt8(v >> 24 & 0xFF), UInt8(v >> 16 & 0xFF), UInt8(v >> 8 & 0xFF), UInt8(v & 0xFF)]
    }

    static func chunk(_ type: String, _ data: [UInt8], into out: inout [UInt8]) {
        out += be32(data.count)
        let typeBytes = Array(type.utf8)
        out += typeBytes
        out += data
        let crc = CRC32.checksum(data, initial: CRC32.checksum(typeBytes))
        out += be32(Int(crc))
    }

    /// Turns the bitmap's storage into the rows deflate compresses, each led by its filter byte: indexed (the
    /// palette's R, G, B triples are returned, in order of first use) or RGB. `count` is how many leading bytes
    /// of the storage those rows take.
    @_spi(Benchmark) public static func prepareRows(_ bitmap: inout Bitmap) -> (palette: [UInt8]?, count: Int) {
        let w = bitmap.width
        let h = bitmap.height
        let rgbStride = bitmap.stride
        var table = ColorTable()
        let indexed = bitmap.storage.withUnsafeBufferPointer { buf -> Bool in
            let base = buf.baseAddress!
            for y in 0..<h {
                var p = base + y * rgbStride + 1
                for _ in 0..<w {
                    if table.index(p[0], p[1], p[2]) == nil { return false }
                    p += 3
                }
            }
            return true
        }
        let rowBytes: Int
        if indexed {
            // Each row's indices are written over the start of its own pixels, front to back: the write position
            // never passes the read position (one byte a pixel against three).
            rowBytes = w
            bitmap.storage.withUnsafeMutableBufferPointer { buf in
                let base = buf.baseAddress!
                var out = base
                for y in 0..<h {
                    var p = base + y * rgbStride + 1
                    out[0] = 0
                    out += 1
                    for _ in 0..<w {
                        out[0] = table.index(p[0], p[1], p[2])!
                        out += 1
                        p += 3
                    }
                }
            }
        } else {
            rowBytes = 3 * w
        }
        let rowStride = rowBytes + 1
        // A row equal to the one above becomes zeros under Up; bottom to top, so that the row above is unchanged.
        bitmap.storage.withUnsafeMutableBufferPointer { buf in
            let base = buf.baseAddress!
            base[0] = 0
            for y in stride(from: h - 1, to: 0, by: -1) {
                let row = base + y * rowStride
                if memcmp(row + 1, row + 1 - rowStride, rowBytes) == 0 {
                    row[0] = 2
                    (row + 1).update(repeating: 0, count: rowBytes)
                } else {
                    row[0] = 0
                }
            }
        }
        return (indexed ? table.palette : nil, rowStride * h)
    }

    /// At most 256 colours, each with its palette index, found by open addressing.
    struct ColorTable {
        static let slots = 1024
        var keys = [UInt32](repeating: .max, count: slots)
        var values = [UInt8](repeating: 0, count: slots)
        var palette: [UInt8] = []
        var lastKey: UInt32 = .max
        var lastIndex: UInt8 = 0

        /// The colour's index, added if new; nil once a 257th colour is seen.
        @inline(__always)
        mutating func index(_ r: UInt8, _ g: UInt8, _ b: UInt8) -> UInt8? {
            let key = UInt32(r) << 16 | UInt32(g) << 8 | UInt32(b)
            if key == lastKey { return lastIndex }
            var slot = Int((key &* 0x9E37_79B1) >> 22)
            while true {
                let k = keys[slot]
                if k == key { break }
                if k == .max {
                    guard palette.count < 256 * 3 else { return nil }
                    keys[slot] = key
                    values[slot] = UInt8(palette.count / 3)
                    palette += [r, g, b]
                    break
                }
                slot = (slot + 1) & (Self.slots - 1)
            }
            lastKey = key
            lastIndex = values[slot]
            return lastIndex
        }
    }
}
