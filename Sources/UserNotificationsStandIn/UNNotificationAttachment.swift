#if !canImport(UserNotifications)
import Foundation

/// An image, audio or video file shown with a notification.
///
/// The throwing initializer refuses what Apple's refuses: a URL that is not a file on disk
/// (``UNError/Code/attachmentInvalidURL``), a type the system does not attach, read from the type hint or else
/// the file's extension (``UNError/Code/attachmentUnrecognizedType``), and a file over its type's limit: 10 MB for
/// images, 5 MB for audio, 50 MB for video (``UNError/Code/attachmentInvalidFileSize``).
open class UNNotificationAttachment: NSObject, NSCopying {
    open private(set) var identifier: String
    open private(set) var url: URL
    /// The Uniform Type Identifier the system decided on.
    open private(set) var type: String
    /// The options as they were passed (the stand-in only: tests read what the adapter asked for).
    public let standInOptions: [AnyHashable: Any]

    public init(identifier: String, url URL: URL, options: [AnyHashable: Any]? = nil) throws {
        guard URL.isFileURL else { throw UNError(.attachmentInvalidURL) }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: URL.path, isDirectory: &isDirectory), !isDirectory.boolValue else {
            throw UNError(.attachmentInvalidURL)
        }
        let hint = options?[UNNotificationAttachmentOptionsTypeHintKey] as? String
        guard let uti = hint ?? AttachableTypes.uti(forExtension: URL.pathExtension),
            let limit = AttachableTypes.sizeLimit(forUTI: uti)
        else { throw UNError(.attachmentUnrecognizedType) }
        let size = (try? FileManager.default.attributesOfItem(atPath: URL.path)[.size] as? Int) ?? nil
        guard let size, size <= limit else { throw UNError(.attachmentInvalidFileSize) }
        if let code = UNStandInSystem.takeRefusal() { throw UNError(code) }
        self.identifier = identifier.isEmpty ? UUID().uuidString : identifier
        self.url = URL
        self.type = uti
        standInOptions = options ?? [:]
        super.init()
    }

    open func copy(with zone: NSZone? = nil) -> Any { self }
}

/// Stand-in only: the real system also refuses files for reasons a test cannot provoke (a corrupt file, a data
/// store it cannot move the file into); this makes the next attachments fail that way.
public enum UNStandInSystem {
    public static func refuseNextAttachments(_ count: Int, with code: UNError.Code = .attachmentCorrupt) {
        refusals.set(count: count, code: code)
    }

    static func takeRefusal() -> UNError.Code? { refusals.take() }

    private static let refusals = Refusals()

    private final class Refusals: @unchecked Sendable {
        // @unchecked: both fields are read and written under `lock`.
        private let lock = NSLock()
        private var count = 0
        private var code = UNError.Code.attachmentCorrupt

        func set(count: Int, code: UNError.Code) { lock.withLock { (self.count, self.code) = (count, code) } }

        func take() -> UNError.Code? {
            lock.withLock {
                guard count > 0 else { return nil }
                count -= 1
                return code
            }
        }
    }
}

/// The types a notification attaches, with their limits, from Apple's documentation of
/// `UNNotificationAttachment` (kept apart from RichPush's own rules so that a test can catch them disagreeing).
enum AttachableTypes {
    static let image = 10 * 1024 * 1024
    static let audio = 5 * 1024 * 1024
    static let video = 50 * 1024 * 1024

    static let limits: [String: Int] = [
        "public.jpeg": image, "com.compuserve.gif": image, "public.png": image,
        "public.aiff-audio": audio, "com.microsoft.waveform-audio": audio, "public.mp3": audio,
        "public.mpeg-4-audio": audio,
        "public.mpeg": video, "public.mpeg-2-video": video, "public.mpeg-4": video, "public.avi": video,
    ]

    static let extensions: [String: String] = [
        "jpg": "public.jpeg", "jpeg": "public.jpeg", "gif": "com.compuserve.gif", "png": "public.png",
        "aif": "public.aiff-audio", "aiff": "public.aiff-audio", "wav": "com.microsoft.waveform-audio",
        "mp3": "public.mp3", "m4a": "public.mpeg-4-audio", "mpg": "public.mpeg", "mpeg": "public.mpeg",
        "m2v": "public.mpeg-2-video", "mp4": "public.mpeg-4", "avi": "public.avi",
    ]

    static func uti(forExtension ext: String) -> String? { extensions[ext.lowercased()] }
    static func sizeLimit(forUTI uti: String) -> Int? { limits[uti] }
}

/// A String: the Uniform Type Identifier of the file, when its extension does not tell.
public let UNNotificationAttachmentOptionsTypeHintKey = "UNNotificationAttachmentOptionsTypeHintKey"
/// A Bool as NSNumber: hide the thumbnail.
public let UNNotificationAttachmentOptionsThumbnailHiddenKey = "UNNotificationAttachmentOptionsThumbnailHiddenKey"
/// A `CGRect.dictionaryRepresentation` in unit coordinates: the part of the image the thumbnail shows.
public let UNNotificationAttachmentOptionsThumbnailClippingRectKey =
    "UNNotificationAttachmentOptionsThumbnailClippingRectKey"
/// An NSNumber: the frame number of an animated image, or the time in seconds of a movie, for the thumbnail.
public let UNNotificationAttachmentOptionsThumbnailTimeKey = "UNNotificationAttachmentOptionsThumbnailTimeKey"

/// The errors of the UserNotifications framework (domain `UNErrorDomain`).
public struct UNError: Error, Hashable, CustomStringConvertible {
    public enum Code: Int, Sendable {
        case notificationsNotAllowed = 1
        case attachmentInvalidURL = 100
        case attachmentUnrecognizedType = 101
        case attachmentInvalidFileSize = 102
        case attachmentNotInDataStore = 103
        case attachmentMoveIntoDataStoreFailed = 104
        case attachmentCorrupt = 105
        case notificationInvalidNoDate = 1400
        case notificationInvalidNoContent = 1401
    }

    public let code: Code

    public init(_ code: Code) { self.code = code }

    public static let errorDomain = "UNErrorDomain"

    public var description: String { "\(Self.errorDomain) error \(code.rawValue) (\(code))" }
}
#endif
