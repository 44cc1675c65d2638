@_spi(Benchmark) import RichPushCharts

/// Bodies encoded as a server sends them with `Content-Encoding: gzip` (RFC 1952) or `deflate` (a zlib stream,
/// RFC 1950), so that tests can serve compressed media.
public enum ContentCoding {
    /// The zlib stream HTTP calls `deflate`.
    public static func deflate(_ bytes: [UInt8]) -> [UInt8] {
        bytes.withUnsafeBufferPointer { Deflate.zlib($0) }
    }

    /// A gzip member: a fixed header, the raw deflate data, then CRC-32 and the size modulo 2³².
    public static func gzip(_ bytes: [UInt8]) -> [UInt8] {
        let zlib = deflate(bytes)
        let raw = zlib[2..<(zlib.count - 4)]
        let header: [UInt8] = [0x1F, 0x8B, 8, 0, 0, 0, 0, 0, 0, 0xFF]
        return header + raw + MediaSamples.le32(Int(crc32(bytes))) + MediaSamples.le32(bytes.count & 0xFFFF_FFFF)
    }

    static func crc32(_ bytes: [UInt8]) -> UInt32 {
        var c: UInt32 = 0xFFFF_FFFF
        for b in bytes {
            c ^= UInt32(b)
            for _ in 0..<8 { c = (c & 1) != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
        }
        return ~c
    }
}
