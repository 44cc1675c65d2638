/// The limits a piece of media must meet, the same for server preflight and the device.
///
/// Apple's attachment limits are written as "10 MB", "5 MB" and "50 MB"; RichPush reads them as decimal
/// megabytes (the smaller reading), so that a file it accepts is never refused by the system.
public enum MediaRules {
    public static let appleImageLimit = 10_000_000
    public static let appleAudioLimit = 5_000_000
    public static let appleVideoLimit = 50_000_000
    /// FCM's limit for Android notification images.
    public static let androidImageLimit = 1_000_000

    public static func appleLimit(for kind: MediaKind) -> Int {
        switch kind {
        case .image: return appleImageLimit
        case .audio: return appleAudioLimit
        case .video: return appleVideoLimit
        }
    }

    /// The largest limit of all kinds: a download with no known type may not grow past it.
    public static let largestAppleLimit = appleVideoLimit

    /// Decides whether Apple will attach a file of this type and size.
    public static func appleDecision(type: MediaType, size: Int?) -> MediaVerdict {
        guard type.isAppleAttachable, let kind = type.kind else {
            return .refused(.unsupportedType(type))
        }
        let limit = appleLimit(for: kind)
        if let size, size > limit {
            return .refused(.tooLarge(kind: kind, size: size, limit: limit))
        }
        return .accepted(type)
    }

    /// True for a type some platform attaches (Apple's table, or an image Android shows): the only types a server
    /// may host. Everything else (SVG, HTML, PDF, XML, unknown bytes) could carry script or be used as a page.
    public static func isHostable(_ type: MediaType) -> Bool { type.isAppleAttachable || type.isAndroidImage }

    /// Decides whether Android will show a file of this type and size as the notification image.
    public static func androidDecision(type: MediaType, size: Int?) -> MediaVerdict {
        guard type.isAndroidImage else { return .refused(.unsupportedType(type)) }
        if let size, size > androidImageLimit {
            return .refused(.tooLarge(kind: .image, size: size, limit: androidImageLimit))
        }
        return .accepted(type)
    }
}

public enum MediaVerdict: Sendable, Hashable {
    case accepted(MediaType)
    case refused(MediaRefusal)
}

/// Why a piece of media was not attached. `code` is stable and safe as a metric label.
public enum MediaRefusal: Error, Sendable, Hashable, CustomStringConvertible {
    case unsupportedType(MediaType)
    case unknownType
    case tooLarge(kind: MediaKind, size: Int, limit: Int)

    public var code: String {
        switch self {
        case .unsupportedType: return "unsupported-type"
        case .unknownType: return "unknown-type"
        case .tooLarge: return "too-large"
        }
    }

    public var description: String {
        switch self {
        case .unsupportedType(let t):
            return "\(t.displayName) is not a type the platform attaches"
        case .unknownType:
            return "the bytes are not a recognisable image, audio or video file"
        case let .tooLarge(kind, size, limit):
            return "\(kind.rawValue) of \(size) bytes is over the \(limit)-byte limit"
        }
    }
}
