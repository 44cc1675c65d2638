/// Real file headers, built byte by byte from each format's specification, for tests and benchmarks.
public enum MediaSamples {
    public static func be32(_ v: Int) -> [UInt8] {
        [UInt8(v >> 24 & 0xFF), UInt8(v >> 16 & 0xFF), UInt8(v >> 8 & 0xFF), UInt8(v & 0xFF)]
    }
    public static func le32(_ v: Int) -> [UInt8] {
        [UInt8(v & 0xFF), UInt8(v >> 8 & 0xFF), UInt8(v >> 16 & 0xFF), UInt8(v >> 24 & 0xFF)]
    }
    public static func ascii(_ s: String) -> [UInt8] { Array(s.utf8) }

    public static func jpeg(marker: UInt8) -> [UInt8] {
        switch marker {
        case 0xE1:  // EXIF: APP1 "Exif\0\0" then a TIFF header
            return [0xFF, 0xD8, 0xFF, 0xE1, 0x00, 0x16] + ascii("Exif") + [0, 0] + [
                0x49, 0x49, 0x2A, 0x00, 0x08, 0, 0, 0,
            ] + [0, 0] + Array(repeating: 0, count: 6)
        case 0xE0:  // JFIF
            return [0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10] + ascii("JFIF") + [0, 1, 1, 0, 0, 1, 0, 1, 0, 0]
        default:
            return [0xFF, 0xD8, 0xFF, marker, 0x00, 0x43] + Array(repeating: 1, count: 20)
        }
    }

    public static let png: [UInt8] =
        [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + be32(13) + ascii("IHDR") + be32(1) + be32(1) + [
            8, 6, 0, 0, 0,
        ]
    public static let gif87 = ascii("GIF87a") + [1, 0, 1, 0, 0, 0, 0]
    public static let gif89 = ascii("GIF89a") + [1, 0, 1, 0, 0x80, 0, 0]
    public static func riff(_ form: String) -> [UInt8] {
        ascii("RIFF") + le32(1000) + ascii(form) + ascii(form == "WAVE" ? "fmt " : form == "AVI " ? "LIST" : "VP8 ")
            + le32(16)
    }
    public static func aiff(_ form: String) -> [UInt8] {
        ascii("FORM") + be32(1000) + ascii(form) + ascii("COMM") + be32(18)
    }

    /// An ISO base media `ftyp` box with its major brand and compatible brands.
    public static func ftyp(_ major: String, _ compatible: [String] = []) -> [UInt8] {
        let size = 16 + 4 * compatible.count
        return be32(size) + ascii("ftyp") + ascii(major) + be32(0) + compatible.flatMap(ascii) + be32(8) + ascii("free")
    }

    /// An MPEG-1 Layer III frame header at 128 kbit/s, 44.1 kHz: frames are 417 bytes long.
    public static let mp3Frame: [UInt8] = [0xFF, 0xFB, 0x90, 0x00] + Array(repeating: 0, count: 413)
    public static var mp3Raw: [UInt8] { mp3Frame + mp3Frame + mp3Frame }
    public static func id3(then tail: [UInt8], tagSize: Int = 20) -> [UInt8] {
        let s = tagSize
        let syncsafe: [UInt8] = [UInt8(s >> 21 & 0x7F), UInt8(s >> 14 & 0x7F), UInt8(s >> 7 & 0x7F), UInt8(s & 0x7F)]
        return ascii("ID3") + [4, 0, 0] + syncsafe + Array(repeating: 0x41, count: s) + tail
    }
    public static let adts: [UInt8] = [0xFF, 0xF1, 0x50, 0x80, 0x02, 0x1F, 0xFC] + Array(repeating: 0, count: 10)
    public static let mpeg1PS: [UInt8] = [0, 0, 1, 0xBA, 0x21, 0, 1, 0, 1, 0x80, 0, 1]
    public static let mpeg2PS: [UInt8] = [0, 0, 1, 0xBA, 0x44, 0, 4, 0, 4, 1, 1, 0x89, 0xC3, 0xF8]
    public static let mpegVideoES: [UInt8] = [0, 0, 1, 0xB3, 0x14, 0x00, 0xF0, 0x13]
    public static var transportStream: [UInt8] {
        var b: [UInt8] = []
        for _ in 0..<3 { b += [0x47, 0x40, 0x00, 0x10] + Array(repeating: 0xFF, count: 184) }
        return b
    }
    public static let bmp: [UInt8] = ascii("BM") + le32(70) + [0, 0, 0, 0] + le32(54) + le32(40) + le32(1) + le32(1)
}

extension MediaSamples {
    /// A file of `size` bytes that starts with `header` (the rest is filler the sniffer never reads).
    public static func file(_ header: [UInt8], size: Int) -> [UInt8] {
        header + [UInt8](repeating: 0x5A, count: max(0, size - header.count))
    }

    /// An MP3 of about `size` bytes: frame after frame.
    public static func mp3(size: Int) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(size + mp3Frame.count)
        while out.count < size { out += mp3Frame }
        return out
    }
}
