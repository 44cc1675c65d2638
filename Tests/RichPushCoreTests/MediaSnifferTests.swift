import RichPushTestSupport
import Testing

@testable import RichPushCore

@Suite struct MediaSnifferTests {
    typealias S = MediaSamples

    @Test(arguments: [0xE0, 0xE1, 0xE2, 0xE3, 0xE8, 0xED, 0xEE, 0xDB, 0xC0, 0xC4, 0xFE] as [UInt8])
    func jpegWithAnyLeadingMarker(_ marker: UInt8) {
        #expect(MediaSniffer.sniff(S.jpeg(marker: marker)) == .jpeg)
    }

    @Test(
        arguments: [
            (S.png, MediaType.png), (S.gif87, .gif), (S.gif89, .gif), (S.riff("WEBP"), .webp), (S.riff("WAVE"), .wav),
            (S.riff("AVI "), .avi), (S.aiff("AIFF"), .aiff), (S.aiff("AIFC"), .aiff),
            (S.ftyp("heic", ["mif1", "heic"]), .heic), (S.ftyp("heix"), .heic), (S.ftyp("mif1", ["heic"]), .heic),
            (S.ftyp("mif1", ["miaf"]), .heif), (S.ftyp("avif", ["mif1", "miaf"]), .avif),
            (S.ftyp("isom", ["iso2", "avc1", "mp41"]), .mp4),
            (S.ftyp("mp42", ["isom"]), .mp4), (S.ftyp("M4A ", ["M4A ", "mp42", "isom"]), .m4a),
            (S.ftyp("M4V ", ["M4V "]), .mp4),
            (S.ftyp("qt  ", ["qt  "]), .quickTime), (S.ftyp("3gp5", ["3gp5", "isom"]), .mp4),
            (S.ftyp("zzzz", ["M4A ", "isom"]), .m4a),
            (S.be32(8) + S.ascii("wide") + S.be32(100) + S.ascii("mdat"), .quickTime),
            (S.mp3Raw, .mp3), (S.id3(then: S.mp3Frame), .mp3), (S.id3(then: [], tagSize: 5000), .mp3),
            (S.id3(then: S.adts), .aac),
            (S.adts, .aac), (S.mpeg1PS, .mpeg), (S.mpeg2PS, .mpeg2Video), (S.mpegVideoES, .mpeg),
            (S.transportStream, .mpegTransportStream),
            (S.ascii("fLaC") + [0, 0, 0, 34], .flac), (S.ascii("OggS") + [0, 2], .ogg),
            ([0x1A, 0x45, 0xDF, 0xA3, 0x9F, 0x42, 0x86, 0x81], .webm),
            (S.ascii("%PDF-1.7\n"), .pdf), (S.ascii("\u{FEFF}  <!DOCTYPE html><html>"), .html),
            (S.ascii("<HTML><body>404"), .html),
            (S.ascii("\n<?xml version=\"1.0\"?><svg xmlns=\"\">"), .svg),
            (S.ascii("<?xml version=\"1.0\"?><rss>"), .xml),
            (S.ascii("{\"error\":\"not found\"}"), .json), (S.bmp, .bmp),
            ([0x49, 0x49, 0x2A, 0x00, 8, 0, 0, 0], .tiff),
            ([0x4D, 0x4D, 0x00, 0x2A, 0, 0, 0, 8], .tiff),
        ] as [([UInt8], MediaType)]
    )
    func recognisesTheRealType(_ bytes: [UInt8], _ expected: MediaType) {
        #expect(MediaSniffer.sniff(bytes) == expected)
    }

    @Test(
        arguments: [
            [], [0xFF], [0xFF, 0xD8], [0xFF, 0xD8, 0xFF, 0xFF], S.ascii("hello world"),
            S.ascii("RIFF") + S.le32(4) + S.ascii("XXXX"),
            // a frame sync not followed by a second frame
            [0xFF, 0xFB, 0x90, 0x00, 1, 2, 3] + Array(repeating: 9, count: 500),
            [0xFF, 0xFF, 0xFF, 0xFF], S.ftyp("zzzz", ["yyyy"]), Array(repeating: 0, count: 64),
        ] as [[UInt8]]
    )
    func unknownBytesAreNotGuessed(_ bytes: [UInt8]) {
        #expect(MediaSniffer.sniff(bytes) == nil)
    }

    @Test func theSniffedTypeMapsToUTIAndExtension() {
        #expect(MediaType.jpeg.uti == "public.jpeg" && MediaType.jpeg.fileExtension == "jpg")
        #expect(MediaType.gif.uti == "com.compuserve.gif")
        #expect(MediaType.wav.uti == "com.microsoft.waveform-audio")
        #expect(MediaType.aiff.uti == "public.aiff-audio")
        #expect(MediaType.m4a.uti == "public.mpeg-4-audio" && MediaType.m4a.fileExtension == "m4a")
        #expect(MediaType.mp4.uti == "public.mpeg-4")
        #expect(MediaType.avi.uti == "public.avi")
        #expect(MediaType.mpeg2Video.uti == "public.mpeg-2-video")
        for t in MediaType.allCases {
            #expect(!t.fileExtension.isEmpty && !t.fileExtension.contains("/") && !t.fileExtension.contains("."))
            #expect(MediaType(fileExtension: t.fileExtension) != nil || t == .mpeg2Video, "\(t)")
        }
    }

    @Test func appleAttachesOnlyItsTableAndNamesTheRest() {
        let attachable = MediaType.allCases.filter(\.isAppleAttachable)
        #expect(Set(attachable) == [.jpeg, .png, .gif, .mp3, .wav, .aiff, .m4a, .mp4, .mpeg, .mpeg2Video, .avi])
        #expect(MediaRules.appleDecision(type: .webp, size: 10) == .refused(.unsupportedType(.webp)))
        #expect(MediaRules.appleDecision(type: .heic, size: 10) == .refused(.unsupportedType(.heic)))
        #expect(MediaRules.appleDecision(type: .html, size: 10) == .refused(.unsupportedType(.html)))
        #expect(MediaRules.appleDecision(type: .webp, size: 10).refusalText.contains("WebP"))
    }

    @Test(arguments: [
        (MediaType.jpeg, 10_000_000, true), (.jpeg, 10_000_001, false), (.gif, 10_000_001, false),
        (.mp3, 5_000_000, true),
        (.mp3, 5_000_001, false), (.m4a, 6_000_000, false), (.mp4, 50_000_000, true), (.mp4, 50_000_001, false),
        (.avi, 49_000_000, true),
    ])
    func appleSizeLimitsPerKind(_ type: MediaType, _ size: Int, _ accepted: Bool) {
        #expect((MediaRules.appleDecision(type: type, size: size) == .accepted(type)) == accepted)
    }

    @Test func androidImageLimit() {
        #expect(MediaRules.androidDecision(type: .png, size: 1_000_000) == .accepted(.png))
        #expect(
            MediaRules.androidDecision(type: .png, size: 1_000_001)
                == .refused(.tooLarge(kind: .image, size: 1_000_001, limit: 1_000_000))
        )
        #expect(MediaRules.androidDecision(type: .mp4, size: 10) == .refused(.unsupportedType(.mp4)))
    }

    @Test(arguments: [
        ("https://x.test/a.JPG", MediaType.jpeg), ("https://x.test/a.jpeg?w=200#top", .jpeg),
        ("https://x.test/dir.v2/clip.MP4", .mp4),
        ("https://x.test/image?filename=photo.png", .png), ("https://x.test/get?id=1&file=song.mp3", .mp3),
        ("https://x.test/a%2Ejpg", .jpeg), ("https://x.test/a.webp", .webp), ("https://x.test/a.tar.gif", .gif),
    ])
    func typeFromURL(_ url: String, _ expected: MediaType) {
        #expect(MediaType(urlString: url) == expected)
    }

    @Test(arguments: [
        "https://x.test/", "https://x.test/image", "https://x.test/.jpg", "https://x.test/a.unknownext",
        "https://cdn.test.png", "not a url",
    ])
    func noTypeFromURL(_ url: String) {
        #expect(MediaType(urlString: url) == nil)
    }

    @Test func typeFromContentTypeIgnoresParametersAndCase() {
        #expect(MediaType(mimeType: "Image/JPEG; charset=binary") == .jpeg)
        #expect(MediaType(mimeType: " audio/x-m4a ") == .m4a)
        #expect(MediaType(mimeType: "text/html;charset=utf-8") == .html)
        #expect(MediaType(mimeType: "application/octet-stream") == nil)
    }
}

extension MediaVerdict {
    var refusalText: String {
        if case .refused(let r) = self { return r.description }
        return ""
    }
}
