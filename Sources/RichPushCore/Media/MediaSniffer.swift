/// Decides a file's real type from its first bytes, never from its name.
///
/// Needs no more than ``MediaSniffer/preferredPrefixLength`` bytes; it never decodes an image.
///
/// ```swift
/// MediaSniffer.sniff(firstBytes) // .jpeg for an EXIF photo served as "photo.png"
/// ```
public enum MediaSniffer {
    /// How many leading bytes to collect before sniffing (enough to see past a typical ID3 tag's header,
    /// an ISO media `ftyp` box with its brands, and a few MPEG transport packets).
    public static let preferredPrefixLength = 1024

    public static func sniff(_ data: some Collection<UInt8>) -> MediaType? {
        let b = Array(data.prefix(preferredPrefixLength * 4))
        guard b.count >= 2 else { return nil }

        // JPEG: SOI followed by any marker (APP0 JFIF, APP1 EXIF, APP2 ICC, DQT, SOF, COM...).
        if b.count >= 4, b[0] == 0xFF, b[1] == 0xD8, b[2] == 0xFF, b[3] >= 0xC0, b[3] != 0xFF { return .jpeg }
        if b.starts(with: [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) { return .png }
        if b.starts(with: Array("GIF87a".utf8)) || b.starts(with: Array("GIF89a".utf8)) { return .gif }
        if let riff = riffType(b) { return riff }
        if b.count >= 12, ascii(b, 0, 4) == "FORM", ["AIFF", "AIFC"].contains(ascii(b, 8, 4)) { return .aiff }
        if let iso = isoMediaType(b) { return iso }
        if b.starts(with: Array("fLaC".utf8)) { return .flac }
        if b.starts(with: Array("OggS".utf8)) { return .ogg }
        if b.starts(with: [0x1A, 0x45, 0xDF, 0xA3]) { return .webm }
        if b.starts(with: Array("%PDF-".utf8)) { return .pdf }
        if b.starts(with: [0x49, 0x49, 0x2A, 0x00]) || b.starts(with: [0x4D, 0x4D, 0x00, 0x2A]) { return .tiff }
        if b.count >= 14, b[0] == 0x42, b[1] == 0x4D, isPlausibleBMP(b) { return .bmp }
        if let mpeg = mpegType(b) { return mpeg }
        if let audio = mpegAudioType(b) { return audio }
        return textType(b)
    }

    // MARK: - Containers

    private static func riffType(_ b: [UInt8]) -> MediaType? {
        guard b.count >= 12 else { return nil }
        let tag = ascii(b, 0, 4)
        guard tag == "RIFF" || tag == "RF64" else { return nil }
        switch ascii(b, 8, 4) {
        case "WEBP": return .webp
        case "WAVE": return .wav
        case "AVI ": return .avi
        default: return nil
        }
    }

    /// ISO base media (MP4, M4A, QuickTime, HEIF, AVIF): read the `ftyp` box's major and compatible brands.
    private static func isoMediaType(_ b: [UInt8]) -> MediaType? {
        guard b.count >= 8 else { return nil }
        let boxType = ascii(b, 4, 4)
        if boxType != "ftyp" {
            // Old QuickTime files start straight with a movie, data or padding atom.
            return ["moov", "mdat", "wide", "free", "skip", "pnot"].contains(boxType) && b.count >= 8 ? .quickTime : nil
        }
        guard b.count >= 12 else { return nil }
        let declared = Int(b[0]) << 24 | Int(b[1]) << 16 | Int(b[2]) << 8 | Int(b[3])
        let end = min(max(declared, 16), b.count)
        var brands = [ascii(b, 8, 4)]
        var i = 16
        while i + 4 <= end {
            brands.append(ascii(b, i, 4))
            i += 4
        }
        let major = brands[0]
        // A generic image-file brand (mif1) says little: a compatible brand such as heic or avif says more.
        if let t = brandType(major), t != .heif { return t }
        for brand in brands.dropFirst() {
            if let t = brandType(brand), [.heic, .avif].contains(t) { return t }
        }
        if let t = brandType(major) { return t }
        // An unfamiliar major brand: the compatible brands say what a reader may treat it as.
        for brand in brands.dropFirst() { if let t = brandType(brand), t != .mp4 { return t } }
        for brand in brands.dropFirst() { if let t = brandType(brand) { return t } }
        return nil
    }

    private static func brandType(_ brand: String) -> MediaType? {
        switch brand {
        case "heic", "heix", "hevc", "hevx", "heim", "heis", "hevm", "hevs": return .heic
        case "mif1", "msf1", "mif2": return .heif
        case "avif", "avis": return .avif
        case "M4A ", "M4B ", "M4P ", "F4A ", "F4B ": return .m4a
        case "qt  ": return .quickTime
        case "isom", "iso2", "iso3", "iso4", "iso5", "iso6", "iso7", "iso8", "iso9", "mp41", "mp42", "mp71", "avc1",
            "dash", "M4V ", "M4VH", "M4VP", "mmp4", "MSNV", "NDAS", "f4v ", "3gp4", "3gp5", "3gp6", "3g2a", "3ge6",
            "3gg6":
            return .mp4
        default: return nil
        }
    }

    // MARK: - MPEG video and audio

    private static func mpegType(_ b: [UInt8]) -> MediaType? {
        // Program stream pack header: 00 00 01 BA; MPEG-2 sets the top bits of the next byte to 01.
        if b.count >= 5, b[0] == 0, b[1] == 0, b[2] == 1, b[3] == 0xBA {
            return (b[4] & 0xC0) == 0x40 ? .mpeg2Video : .mpeg
        }
        // Video elementary stream: sequence header 00 00 01 B3.
        if b.count >= 4, b[0] == 0, b[1] == 0, b[2] == 1, b[3] == 0xB3 { return .mpeg }
        // Transport stream: a sync byte 0x47 every 188 bytes (192 for M2TS with a 4-byte prefix).
        for (offset, stride) in [(0, 188), (4, 192)] {
            let packets = (b.count - offset) / stride
            if packets >= 2 {
                var all = true
                for p in 0..<min(packets, 4) where b[offset + p * stride] != 0x47 { all = false }
                if all { return .mpegTransportStream }
            } else if packets == 1, b.count == offset + stride, b[offset] == 0x47 {
                return .mpegTransportStream
            }
        }
        return nil
    }

    private static func mpegAudioType(_ b: [UInt8]) -> MediaType? {
        var start = 0
        if b.count >= 10, ascii(b, 0, 3) == "ID3" {
            // An ID3v2 tag: a syncsafe size, then the audio frames. A tag longer than what we were given is
            // taken as MP3, which carries ID3 far more often than anything else.
            let size = Int(b[6] & 0x7F) << 21 | Int(b[7] & 0x7F) << 14 | Int(b[8] & 0x7F) << 7 | Int(b[9] & 0x7F)
            let footer = (b[5] & 0x10) != 0 ? 10 : 0
            start = 10 + size + footer
            if start + 4 > b.count { return .mp3 }
            while start < b.count, b[start] == 0 { start += 1 }  // padding
            if start + 4 > b.count { return .mp3 }
            if b.starts(with: Array("fLaC".utf8), at: start) { return .flac }
            return frameType(b, at: start) ?? .mp3
        }
        guard let first = frameType(b, at: 0) else { return nil }
        // Without a tag, two bytes of frame sync could be chance: insist on a second frame header where the
        // first says the next one starts, when there are enough bytes to see it.
        if first == .mp3, let length = mp3FrameLength(b, at: 0), length + 4 <= b.count {
            return frameType(b, at: length) == .mp3 ? .mp3 : nil
        }
        return first
    }

    private static func frameType(_ b: [UInt8], at i: Int) -> MediaType? {
        guard i + 4 <= b.count, b[i] == 0xFF, (b[i + 1] & 0xE0) == 0xE0 else { return nil }
        let version = (b[i + 1] >> 3) & 0x3
        let layer = (b[i + 1] >> 1) & 0x3
        if layer == 0 { return (b[i + 1] & 0xF6) == 0xF0 ? .aac : nil }  // ADTS: MPEG-4 audio without a container
        guard version != 1, layer == 1 else { return nil }  // Layer III, not the reserved version
        let bitrate = b[i + 2] >> 4
        let rate = (b[i + 2] >> 2) & 0x3
        guard bitrate != 0xF, rate != 0x3 else { return nil }
        return .mp3
    }

    private static func mp3FrameLength(_ b: [UInt8], at i: Int) -> Int? {
        let version = (b[i + 1] >> 3) & 0x3  // 3 = MPEG-1, 2 = MPEG-2, 0 = MPEG-2.5
        let bitrateIndex = Int(b[i + 2] >> 4)
        let rateIndex = Int((b[i + 2] >> 2) & 0x3)
        let padding = Int((b[i + 2] >> 1) & 0x1)
        guard bitrateIndex > 0 else { return nil }  // free format: length unknown
        let v1 = [0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320]
        let v2 = [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160]
        let rates: [Int] =
            version == 3 ? [44100, 48000, 32000] : version == 2 ? [22050, 24000, 16000] : [11025, 12000, 8000]
        let kbps = version == 3 ? v1[bitrateIndex] : v2[bitrateIndex]
        let samples = version == 3 ? 144 : 72
        return samples * kbps * 1000 / rates[rateIndex] + padding
    }

    // MARK: - Text

    private static func textType(_ b: [UInt8]) -> MediaType? {
        var i = 0
        if b.starts(with: [0xEF, 0xBB, 0xBF]) { i = 3 }
        while i < b.count, [0x20, 0x09, 0x0A, 0x0D].contains(b[i]) { i += 1 }
        guard i < b.count else { return nil }
        let head = String(decoding: b[i..<min(b.count, i + 256)], as: UTF8.self).lowercased()
        if head.hasPrefix("{") || head.hasPrefix("[") { return .json }
        for tag in ["<!doctype html", "<html", "<head", "<body", "<script", "<title", "<div", "<p>", "<h1", "<!--"]
        where head.hasPrefix(tag) { return .html }
        if head.hasPrefix("<svg") { return .svg }
        if head.hasPrefix("<?xml") { return head.contains("<svg") ? .svg : .xml }
        return nil
    }

    private static func isPlausibleBMP(_ b: [UInt8]) -> Bool {
        // The DIB header size at offset 14 is one of a few known values.
        guard b.count >= 18 else { return true }
        let dib = Int(b[14]) | Int(b[15]) << 8 | Int(b[16]) << 16 | Int(b[17]) << 24
        return [12, 40, 52, 56, 64, 108, 124].contains(dib)
    }

    private static func ascii(_ b: [UInt8], _ start: Int, _ count: Int) -> String {
        guard start + count <= b.count else { return "" }
        return String(decoding: b[start..<start + count], as: UTF8.self)
    }
}

extension Array where Element == UInt8 {
    fileprivate func starts(with prefix: [UInt8], at offset: Int) -> Bool {
        guard offset + prefix.count <= count else { return false }
        return Array(self[offset..<offset + prefix.count]) == prefix
    }
}
