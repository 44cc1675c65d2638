import Foundation
import RichPushSandbox
import RichPushTestSupport

/// The routes of the hostile media server the pipeline tests run against.
enum HostileMedia {
    typealias S = MediaSamples
    static let exifJPEG = S.file(S.jpeg(marker: 0xE1), size: 48_000)
    static let png = S.file(S.png, size: 20_000)
    static let gif = S.file(S.gif89, size: 9_000)
    static let mp4 = S.file(S.ftyp("isom", ["iso2", "avc1", "mp41"]), size: 120_000)

    static var routes: [String: MediaRoute] {
        [
            "/photo.png": .bytes(exifJPEG, contentType: "image/png"),  // an EXIF photo behind a .png name
            "/image": .bytes(exifJPEG, contentType: "image/jpeg"),  // no extension
            "/IMG_0042.JPG": .bytes(exifJPEG, contentType: "image/jpeg"),
            "/get": .bytes(png, contentType: "application/octet-stream"),  // served as ?filename=photo.png
            "/clip.mp4": .bytes(mp4, contentType: "text/plain"),  // wrong Content-Type
            "/song.mp3": .bytes(S.mp3(size: 400_000), contentType: "audio/mpeg"),
            "/big.jpg": .bytes(S.file(S.jpeg(marker: 0xE0), size: 11_000_000), contentType: "image/jpeg"),
            "/big-nolength.jpg": .bytes(
                S.file(S.jpeg(marker: 0xE0), size: 11_000_000),
                contentType: "image/jpeg",
                sendLength: false
            ),
            "/long.mp3": .bytes(S.mp3(size: 6_000_000), contentType: "audio/mpeg", sendLength: false),
            "/r1": .redirect(to: "/r2"), "/r2": .redirect(to: "/r3", status: 301),
            "/r3": .redirect(to: "/final.gif", status: 307),
            "/final.gif": .bytes(gif, contentType: "image/gif"),
            "/loop1": .redirect(to: "/loop2"), "/loop2": .redirect(to: "/loop1"),
            "/c1": .redirect(to: "/c2"), "/c2": .redirect(to: "/c3"), "/c3": .redirect(to: "/c4"),
            "/c4": .redirect(to: "/c5"),
            "/c5": .redirect(to: "/c6"), "/c6": .redirect(to: "/c7"), "/c7": .redirect(to: "/final.gif"),
            "/drip.jpg": .drip(total: 200_000, chunk: 64, interval: 0.2, contentType: "image/jpeg"),
            // Slower still: the sniffer's 1,024 bytes take 12.8 s, so a deadline test's cut comes while it drips.
            "/stall.jpg": .drip(total: 200_000, chunk: 16, interval: 0.2, contentType: "image/jpeg"),
            "/reset.jpg": .reset(
                declared: 60_000,
                sent: S.file(S.jpeg(marker: 0xE0), size: 20_000),
                contentType: "image/jpeg"
            ),
            "/photo.webp": .bytes(S.file(S.riff("WEBP"), size: 30_000), contentType: "image/webp"),
            "/photo.heic": .bytes(S.file(S.ftyp("heic", ["mif1", "heic"]), size: 30_000), contentType: "image/heic"),
            "/page.jpg": .bytes(
                Array("<!DOCTYPE html><html><body>Sign in</body></html>".utf8),
                contentType: "text/html"
            ),
            "/empty.jpg": .bytes([], contentType: "image/jpeg"),
            "/garbage.jpg": .bytes([UInt8](repeating: 0x11, count: 5000), contentType: "application/octet-stream"),
            "/to-http-elsewhere": .redirect(to: "ftp://127.0.0.1/x.jpg"),
            "/radio.mp3": .bytes(junkThenMP3, contentType: "audio/mpeg"),
            // Compressed in transit: Content-Length counts the encoded bytes, the delegate sees decoded ones.
            "/gzip.png": .bytes(
                ContentCoding.gzip(png),
                contentType: "image/png",
                headers: [("Content-Encoding", "gzip")]
            ),
            "/deflate.jpg": .bytes(
                ContentCoding.deflate(exifJPEG),
                contentType: "image/jpeg",
                headers: [("Content-Encoding", "deflate")]
            ),
            "/bomb.jpg": .bytes(gzipBomb, contentType: "image/jpeg", headers: [("Content-Encoding", "gzip")]),
        ]
    }
}

extension HostileMedia {
    /// 10.5 MB of JPEG that travels as a few kilobytes: the image limit must hold on the decoded bytes.
    static let gzipBomb = ContentCoding.gzip(S.file(S.jpeg(marker: 0xE0), size: 10_500_000))

    /// MP3 frames after 300 bytes of junk: the sniffer cannot see a signature, the label decides.
    static let junkThenMP3: [UInt8] =
        [UInt8](repeating: 0x00, count: 1) + [UInt8](repeating: 0x37, count: 1300) + MediaSamples.mp3(size: 20_000)
}
