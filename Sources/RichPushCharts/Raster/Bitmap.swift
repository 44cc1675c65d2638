import RichPushCore

/// An opaque RGB image, 8 bits per channel.
///
/// Each row starts with one spare byte so that the PNG encoder can filter the rows in place, bottom to top,
/// without a second copy of the image (the renderer's memory stays close to the size of the pixels).
public struct Bitmap: Sendable {
    public let width: Int
    public let height: Int
    /// Bytes per row: one spare byte, then `3 × width` bytes of R, G, B.
    let stride: Int
    var storage: [UInt8]

    public init(width: Int, height: Int, background: RGBAColor) {
        self.width = width
        self.height = height
        stride = 1 + 3 * width
        storage = [UInt8](repeating: 0, count: stride * height)
        guard width > 0, height > 0 else { return }
        storage.withUnsafeMutableBufferPointer { buf in
            // One row in colour, copied to the others.
            let base = buf.baseAddress!
            var i = 1
            for _ in 0..<width {
                base[i] = background.r
                base[i + 1] = background.g
                base[i + 2] = background.b
                i += 3
            }
            for y in 1..<height { (base + y * stride).update(from: base, count: stride) }
        }
    }

    /// The colour of one pixel (for tests and tools).
    public func pixel(x: Int, y: Int) -> RGBAColor {
        let i = y * stride + 1 + 3 * x
        return RGBAColor(r: storage[i], g: storage[i + 1], b: storage[i + 2])
    }

    /// Blends `color` over a run of pixels in one row with per-pixel coverage (0...255).
    @inline(__always)
    mutating func blend(row y: Int, x0: Int, coverage: UnsafeBufferPointer<UInt8>, color: RGBAColor) {
        let alpha = UInt32(color.a)
        let r = UInt32(color.r)
        let g = UInt32(color.g)
        let b = UInt32(color.b)
        let base = y * stride + 1 + 3 * x0
        storage.withUnsafeMutableBufferPointer { buf in
            var i = base
            for c in coverage {
                if c != 0 {
                    let a = (UInt32(c) * alpha + 127) / 255
                    let ia = 255 - a
                    buf[i] = UInt8((UInt32(buf[i]) * ia + r * a + 127) / 255)
                    buf[i + 1] = UInt8((UInt32(buf[i + 1]) * ia + g * a + 127) / 255)
                    buf[i + 2] = UInt8((UInt32(buf[i + 2]) * ia + b * a + 127) / 255)
                }
                i += 3
            }
        }
    }

    @inline(__always)
    mutating func blend(x: Int, y: Int, alpha a: UInt32, color: RGBAColor) {
        guard a > 0, x >= 0, y >= 0, x < width, y < height else { return }
        let i = y * stride + 1 + 3 * x
        let ia = 255 - a
        storage[i] = UInt8((UInt32(storage[i]) * ia + UInt32(color.r) * a + 127) / 255)
        storage[i + 1] = UInt8((UInt32(storage[i + 1]) * ia + UInt32(color.g) * a + 127) / 255)
        storage[i + 2] = UInt8((UInt32(storage[i + 2]) * ia + UInt32(color.b) * a + 127) / 255)
    }
}

extension Bitmap {
    /// The raw rows (each led by its spare filter byte), for the benchmark's profile of the encoder.
    @_spi(Benchmark) public func withRawRows<R>(_ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        storage.withUnsafeBufferPointer(body)
    }
}
