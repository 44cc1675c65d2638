/// The broad kind of an attachment; Apple sets a size limit per kind.
public enum MediaKind: String, Sendable, Hashable, CaseIterable {
    case image, audio, video

    /// Reads a sender's hint; `gif` and `animated` count as images, `movie` as video.
    public init?(hint: String) {
        switch hint.lowercased() {
        case "image", "picture", "photo", "gif", "animated", "jpg", "jpeg", "png": self = .image
        case "audio", "sound", "mp3", "m4a", "wav", "aiff": self = .audio
        case "video", "movie", "mp4", "mpeg", "avi": self = .video
        default: return nil
        }
    }
}

/// A concrete file type, as decided from a file's first bytes (see ``MediaSniffer``) or, failing that,
/// from a Content-Type header or a file extension.
public enum MediaType: String, Sendable, Hashable, CaseIterable {
    // Apple attaches these.
    case jpeg, png, gif
    case mp3, wav, aiff, m4a
    case mp4, mpeg
    case mpeg2Video = "mpeg2-video"
    case avi
    // Recognised, but Apple will not attach them.
    case webp, heic, heif, avif, bmp, tiff, svg
    case quickTime = "quicktime"
    case mpegTransportStream = "mpeg-ts"
    case webm, aac, flac, ogg
    case html, xml, json, pdf

    /// The Uniform Type Identifier, used as the attachment's type hint.
    public var uti: String {
        switch self {
        case .jpeg: return "public.jpeg"
        case .png: return "public.png"
        case .gif: return "com.compuserve.gif"
        case .mp3: return "public.mp3"
        case .wav: return "com.microsoft.waveform-audio"
        case .aiff: return "public.aiff-audio"
        case .m4a: return "public.mpeg-4-audio"
        case .mp4: return "public.mpeg-4"
        case .mpeg: return "public.mpeg"
        case .mpeg2Video: return "public.mpeg-2-video"
        case .avi: return "public.avi"
        case .webp: return "org.webmproject.webp"
        case .heic: return "public.heic"
        case .heif: return "public.heif"
        case .avif: return "public.avif"
        case .bmp: return "com.microsoft.bmp"
        case .tiff: return "public.tiff"
        case .svg: return "public.svg-image"
        case .quickTime: return "com.apple.quicktime-movie"
        case .mpegTransportStream: return "public.mpeg-2-transport-stream"
        case .webm: return "org.webmproject.webm"
        case .aac: return "public.aac-audio"
        case .flac: return "org.xiph.flac"
        case .ogg: return "org.xiph.ogg"
        case .html: return "public.html"
        case .xml: return "public.xml"
        case .json: return "public.json"
        case .pdf: return "com.adobe.pdf"
        }
    }

    /// The extension a staged file gets, so that the system recognises it even without a type hint.
    public var fileExtension: String {
        switch self {
        case .jpeg: return "jpg"
        case .mpeg, .mpeg2Video: return "mpg"
        case .quickTime: return "mov"
        case .mpegTransportStream: return "ts"
        case .mp3, .wav, .m4a, .mp4, .avi, .png, .gif, .webp, .heic, .heif, .avif, .bmp, .svg, .webm, .aac, .flac,
            .ogg, .html, .xml, .json, .pdf:
            return rawValue
        case .aiff: return "aiff"
        case .tiff: return "tiff"
        }
    }

    public var mimeType: String {
        switch self {
        case .jpeg: return "image/jpeg"
        case .png: return "image/png"
        case .gif: return "image/gif"
        case .mp3: return "audio/mpeg"
        case .wav: return "audio/wav"
        case .aiff: return "audio/aiff"
        case .m4a: return "audio/mp4"
        case .mp4: return "video/mp4"
        case .mpeg, .mpeg2Video: return "video/mpeg"
        case .avi: return "video/x-msvideo"
        case .webp: return "image/webp"
        case .heic: return "image/heic"
        case .heif: return "image/heif"
        case .avif: return "image/avif"
        case .bmp: return "image/bmp"
        case .tiff: return "image/tiff"
        case .svg: return "image/svg+xml"
        case .quickTime: return "video/quicktime"
        case .mpegTransportStream: return "video/mp2t"
        case .webm: return "video/webm"
        case .aac: return "audio/aac"
        case .flac: return "audio/flac"
        case .ogg: return "audio/ogg"
        case .html: return "text/html"
        case .xml: return "application/xml"
        case .json: return "application/json"
        case .pdf: return "application/pdf"
        }
    }

    /// The kind of media this is, or nil for documents (HTML, XML, JSON, PDF).
    public var kind: MediaKind? {
        switch self {
        case .jpeg, .png, .gif, .webp, .heic, .heif, .avif, .bmp, .tiff, .svg: return .image
        case .mp3, .wav, .aiff, .m4a, .aac, .flac, .ogg: return .audio
        case .mp4, .mpeg, .mpeg2Video, .avi, .quickTime, .mpegTransportStream, .webm: return .video
        case .html, .xml, .json, .pdf: return nil
        }
    }

    /// True for the types in Apple's `UNNotificationAttachment` table.
    public var isAppleAttachable: Bool {
        switch self {
        case .jpeg, .png, .gif, .mp3, .wav, .aiff, .m4a, .mp4, .mpeg, .mpeg2Video, .avi: return true
        default: return false
        }
    }

    /// True for types whose files always start with a signature the sniffer knows: when the bytes do not
    /// show it, the file is not of this type, whatever its name or Content-Type says. MP3 and MPEG streams
    /// may start mid-frame or after junk, so a label is worth something for them.
    public var hasMandatorySignature: Bool {
        switch self {
        case .mp3, .mpeg, .mpeg2Video, .aac, .mpegTransportStream: return false
        default: return true
        }
    }

    /// True for the image types Android's notification image (FCM `android.notification.image`) shows.
    public var isAndroidImage: Bool {
        switch self {
        case .jpeg, .png, .bmp, .webp, .gif: return true
        default: return false
        }
    }

    /// A readable name for messages ("WebP image", "HTML page").
    public var displayName: String {
        switch self {
        case .jpeg: return "JPEG image"
        case .png: return "PNG image"
        case .gif: return "GIF image"
        case .mp3: return "MP3 audio"
        case .wav: return "WAV audio"
        case .aiff: return "AIFF audio"
        case .m4a: return "MPEG-4 audio"
        case .mp4: return "MPEG-4 video"
        case .mpeg: return "MPEG video"
        case .mpeg2Video: return "MPEG-2 video"
        case .avi: return "AVI video"
        case .webp: return "WebP image"
        case .heic: return "HEIC image"
        case .heif: return "HEIF image"
        case .avif: return "AVIF image"
        case .bmp: return "BMP image"
        case .tiff: return "TIFF image"
        case .svg: return "SVG image"
        case .quickTime: return "QuickTime movie"
        case .mpegTransportStream: return "MPEG transport stream"
        case .webm: return "WebM/Matroska video"
        case .aac: return "raw AAC (ADTS) audio"
        case .flac: return "FLAC audio"
        case .ogg: return "Ogg media"
        case .html: return "HTML page"
        case .xml: return "XML document"
        case .json: return "JSON document"
        case .pdf: return "PDF document"
        }
    }
}

extension MediaType {
    /// The type a file-name extension names, case-insensitively (`JPG`, `jpeg`, `jpe`).
    public init?(fileExtension raw: String) {
        let ext = raw.lowercased()
        switch ext {
        case "jpg", "jpeg", "jpe", "jfif": self = .jpeg
        case "png", "apng": self = .png
        case "gif": self = .gif
        case "mp3": self = .mp3
        case "wav", "wave": self = .wav
        case "aif", "aiff", "aifc": self = .aiff
        case "m4a", "m4b": self = .m4a
        case "mp4", "m4v", "mpeg4": self = .mp4
        case "mpg", "mpeg", "mpe", "m1v": self = .mpeg
        case "m2v": self = .mpeg2Video
        case "avi": self = .avi
        case "webp": self = .webp
        case "heic": self = .heic
        case "heif": self = .heif
        case "avif": self = .avif
        case "bmp": self = .bmp
        case "tif", "tiff": self = .tiff
        case "svg": self = .svg
        case "mov", "qt": self = .quickTime
        case "ts", "m2ts", "mts": self = .mpegTransportStream
        case "webm", "mkv": self = .webm
        case "aac": self = .aac
        case "flac": self = .flac
        case "ogg", "oga", "ogv", "opus": self = .ogg
        case "html", "htm": self = .html
        case "xml": self = .xml
        case "json": self = .json
        case "pdf": self = .pdf
        default: return nil
        }
    }

    /// The type a `Content-Type` value names; parameters (`; charset=…`) and case are ignored.
    public init?(mimeType raw: String) {
        let essence = raw.split(separator: ";", maxSplits: 1).first.map(String.init) ?? raw
        let mime = essence.trimmingCharacters(in: .whitespaces).lowercased()
        switch mime {
        case "image/jpeg", "image/jpg", "image/pjpeg": self = .jpeg
        case "image/png", "image/apng": self = .png
        case "image/gif": self = .gif
        case "audio/mpeg", "audio/mp3", "audio/mpeg3": self = .mp3
        case "audio/wav", "audio/x-wav", "audio/wave", "audio/vnd.wave": self = .wav
        case "audio/aiff", "audio/x-aiff": self = .aiff
        case "audio/mp4", "audio/m4a", "audio/x-m4a": self = .m4a
        case "video/mp4", "video/x-m4v": self = .mp4
        case "video/mpeg": self = .mpeg
        case "video/x-msvideo", "video/avi", "video/msvideo": self = .avi
        case "image/webp": self = .webp
        case "image/heic", "image/heic-sequence": self = .heic
        case "image/heif", "image/heif-sequence": self = .heif
        case "image/avif": self = .avif
        case "image/bmp", "image/x-ms-bmp": self = .bmp
        case "image/tiff": self = .tiff
        case "image/svg+xml": self = .svg
        case "video/quicktime": self = .quickTime
        case "video/mp2t": self = .mpegTransportStream
        case "video/webm", "video/x-matroska": self = .webm
        case "audio/aac", "audio/x-aac": self = .aac
        case "audio/flac", "audio/x-flac": self = .flac
        case "audio/ogg", "video/ogg", "application/ogg": self = .ogg
        case "text/html", "application/xhtml+xml": self = .html
        case "application/xml", "text/xml": self = .xml
        case "application/json": self = .json
        case "application/pdf": self = .pdf
        default: return nil
        }
    }

    /// The type named by a URL path's last extension, ignoring query and fragment.
    /// `https://x/a.JPG?w=1` gives `.jpeg`; `https://x/image?id=1` gives nil.
    /// A query parameter such as `?filename=photo.jpg` is used when the path has no extension.
    public init?(urlString: String) {
        var s = Substring(urlString)
        var query: Substring = ""
        if let hash = s.firstIndex(of: "#") { s = s[..<hash] }
        if let q = s.firstIndex(of: "?") {
            query = s[s.index(after: q)...]
            s = s[..<q]
        }
        // Past "scheme://", then the last path segment (no Foundation calls: this runs for every media of every send).
        if let colon = s.firstIndex(of: ":"), s[colon...].hasPrefix("://") { s = s[s.index(colon, offsetBy: 3)...] }
        if let slash = s.firstIndex(of: "/") {
            let path = s[slash...]
            let last = path.lastIndex(of: "/").map { path[path.index(after: $0)...] } ?? path
            if let type = Self.fromFileName(last) {
                self = type
                return
            }
        }
        for item in query.split(separator: "&") {
            let parts = item.split(separator: "=", maxSplits: 1)
            guard parts.count == 2, ["filename", "file", "name", "fn"].contains(parts[0].lowercased()) else { continue }
            if let type = Self.fromFileName(parts[1]) {
                self = type
                return
            }
        }
        return nil
    }

    static func fromFileName(_ encoded: Substring) -> MediaType? {
        let name = encoded.removingPercentEncodingIfPossible
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return nil }
        return MediaType(fileExtension: String(name[name.index(after: dot)...]))
    }
}

extension Substring {
    fileprivate var removingPercentEncodingIfPossible: String {
        guard contains("%") else { return String(self) }
        return String(self).removingPercentEncoding ?? String(self)
    }
}
