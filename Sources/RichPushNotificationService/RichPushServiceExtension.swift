#if canImport(UserNotifications) || canImport(UserNotificationsStandIn)
import Foundation
import RichPushCore
import RichPushMedia
#if canImport(UserNotifications)
import UserNotifications
#else
import UserNotificationsStandIn  // Linux: lets CI compile and test this file against Apple's documented API
#endif

/// A Notification Service Extension that shows every provider's rich media, with no code of your own:
///
/// ```swift
/// import RichPushNotificationService
/// final class NotificationService: RichPushServiceExtension {}
/// ```
///
/// Override ``configuration`` to allow plain http or change the safety margin, and ``didDeliver(_:)`` to send
/// the delivery report somewhere.
open class RichPushServiceExtension: UNNotificationServiceExtension {
    /// Written in `didReceive` and read in `serviceExtensionTimeWillExpire`, which the system calls on another
    /// thread.
    private let current = SessionSlot()

    /// How media is fetched and staged; the default suits most apps.
    open var configuration: RichNotificationProcessor.Configuration { RichNotificationProcessor.Configuration() }

    /// Called once per notification, on a background thread, after the content was handed over, with what the
    /// system accepted as attachments and what was skipped (a file the system refused included, with its reason).
    open func didDeliver(_ report: DeliveryReport) {}

    open override func didReceive(
        _ request: UNNotificationRequest,
        withContentHandler contentHandler: @escaping (UNNotificationContent) -> Void
    ) {
        let handler = ContentHandlerBox(contentHandler)
        // The system keeps this object until the content handler has been called, and `didDeliver` is documented
        // as running on a background thread; the session lets go of this closure once it has run.
        nonisolated(unsafe) let owner = self
        let session = RichPushExtension.handle(request, configuration: configuration) { content, report in
            handler.call(content)
            owner.didDeliver(report)
        }
        current.set(session)
    }

    open override func serviceExtensionTimeWillExpire() {
        // Hands over what is staged now; the content handler still runs exactly once.
        current.get()?.expire()
    }
}

/// The same pipeline for an extension you already have.
public enum RichPushExtension {
    /// Processes `request` and calls `deliver` exactly once with the content to show. Keep the returned session
    /// and call `expire()` on it from `serviceExtensionTimeWillExpire()`.
    ///
    /// The report handed to `deliver` (and posted to the payload's receipt address) lists as attached only the
    /// files the system accepted; a file `UNNotificationAttachment` refuses is listed as skipped with its reason.
    ///
    /// ```swift
    /// override func didReceive(_ request: UNNotificationRequest, withContentHandler handler: @escaping (UNNotificationContent) -> Void) {
    ///     session = RichPushExtension.handle(request) { content, _ in handler(content) }
    /// }
    /// ```
    @discardableResult
    public static func handle(
        _ request: UNNotificationRequest,
        configuration: RichNotificationProcessor.Configuration = .init(),
        deliver: @escaping @Sendable (UNNotificationContent, DeliveryReport) -> Void
    ) -> ProcessingSession {
        let original = OriginalContent(request.content)
        let payload = JSONValue(foundation: request.content.userInfo) ?? .object([:])
        let content = request.content
        let text = NotificationText(title: content.title, subtitle: content.subtitle, body: content.body)
        let accepted = AcceptedAttachments()
        let processor = RichNotificationProcessor(configuration: configuration)
        return processor.start(payload: payload, text: text, admit: { accepted.admit($0) }) { enriched in
            let content = original.mutableCopy()
            content.title = enriched.text.title
            content.subtitle = enriched.text.subtitle
            content.body = enriched.text.body
            content.attachments = accepted.attachments(for: enriched.attachments)
            deliver(content, enriched.report)
        }
    }

    /// The system attachment for a staged file, with its type hint and thumbnail options; throws what
    /// `UNNotificationAttachment` throws.
    public static func makeAttachment(for staged: StagedAttachment) throws -> UNNotificationAttachment {
        try UNNotificationAttachment(identifier: staged.identifier, url: staged.file, options: options(for: staged))
    }

    /// The system attachment for a staged file, or `nil` when the system refuses it.
    @available(*, deprecated, message: "use makeAttachment(for:), which says why the system refused the file")
    public static func attachment(for staged: StagedAttachment) -> UNNotificationAttachment? {
        try? makeAttachment(for: staged)
    }

    /// The options dictionary: the type hint always; for a thumbnail, the clipping rectangle in unit coordinates,
    /// the frame number (an integer) of an animated image or the time in seconds of a movie, and whether it is
    /// hidden.
    public static func options(for staged: StagedAttachment) -> [AnyHashable: Any] {
        var options: [AnyHashable: Any] = [UNNotificationAttachmentOptionsTypeHintKey: staged.uti]
        guard let t = staged.thumbnail else { return options }
        if let c = t.crop {
            // Unit coordinates: the payload's fractions, held to the image.
            let x = unit(c.x)
            let y = unit(c.y)
            let rect = CGRect(x: x, y: y, width: min(unit(c.width), 1 - x), height: min(unit(c.height), 1 - y))
            if rect.width > 0, rect.height > 0 {
                options[UNNotificationAttachmentOptionsThumbnailClippingRectKey] = rect.dictionaryRepresentation
            }
        }
        if let time = t.time, time.isFinite, time >= 0 {
            switch staged.kind {
            case .image?:
                // An animated image's thumbnail is chosen by frame number.
                options[UNNotificationAttachmentOptionsThumbnailTimeKey] = NSNumber(value: Int(min(time, 100_000)))
            case .video?:
                options[UNNotificationAttachmentOptionsThumbnailTimeKey] = NSNumber(value: min(time, 86_400))
            default:
                break
            }
        }
        if let hidden = t.hidden {
            options[UNNotificationAttachmentOptionsThumbnailHiddenKey] = NSNumber(value: hidden)
        }
        return options
    }

    private static func unit(_ v: Double) -> Double { v.isFinite ? min(max(v, 0), 1) : 0 }
}

/// The system's attachments for the files it accepted, made as each file is staged.
private final class AcceptedAttachments: @unchecked Sendable {
    // @unchecked: `byIdentifier` is read and written under `lock`; the attachments are immutable once made.
    private let lock = NSLock()
    private var byIdentifier: [String: UNNotificationAttachment] = [:]

    func admit(_ staged: StagedAttachment) -> SkipReason? {
        do {
            let attachment = try RichPushExtension.makeAttachment(for: staged)
            lock.withLock { byIdentifier[staged.identifier] = attachment }
            return nil
        } catch {
            return .refusedBySystem("\(error)")
        }
    }

    /// The attachments in the order the pipeline staged them.
    func attachments(for staged: [StagedAttachment]) -> [UNNotificationAttachment] {
        lock.withLock { staged.compactMap { byIdentifier[$0.identifier] } }
    }
}

/// The current session, set on the thread of `didReceive` and read on the thread of the expiry call.
private final class SessionSlot: @unchecked Sendable {
    // @unchecked: `session` is read and written under `lock`.
    private let lock = NSLock()
    private var session: ProcessingSession?

    func set(_ s: ProcessingSession) { lock.withLock { session = s } }
    func get() -> ProcessingSession? { lock.withLock { session } }
}

/// The system's content handler, which may be called from any thread.
private final class ContentHandlerBox: @unchecked Sendable {
    // @unchecked: holds an immutable closure the system allows to be called from any thread.
    let handler: (UNNotificationContent) -> Void
    init(_ handler: @escaping (UNNotificationContent) -> Void) { self.handler = handler }
    func call(_ content: UNNotificationContent) { handler(content) }
}

/// The received content, copied when the result is built.
private final class OriginalContent: @unchecked Sendable {
    // @unchecked: an immutable copy, only read.
    let content: UNNotificationContent
    init(_ content: UNNotificationContent) { self.content = content.copy() as! UNNotificationContent }
    func mutableCopy() -> UNMutableNotificationContent { content.mutableCopy() as! UNMutableNotificationContent }
}
#endif
