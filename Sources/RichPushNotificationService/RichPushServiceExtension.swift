#if canImport(UserNotifications)
import Foundation
import RichPushCore
import RichPushMedia
import UserNotifications

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
    private var session: ProcessingSession?

    /// How media is fetched and staged; the default suits most apps.
    open var configuration: RichNotificationProcessor.Configuration { RichNotificationProcessor.Configuration() }

    /// Called once per notification with what was attached and skipped, after the content was handed over.
    open func didDeliver(_ report: DeliveryReport) {}

    open override func didReceive(_ request: UNNotificationRequest, withContentHandler contentHandler: @escaping (UNNotificationContent) -> Void) {
        let handler = ContentHandlerBox(contentHandler)
        session = RichPushExtension.handle(request, configuration: configuration) { [weak self] content, report in
            handler.call(content)
            self?.didDeliver(report)
        }
    }

    open override func serviceExtensionTimeWillExpire() {
        // Hands over what is staged now; the content handler still runs exactly once.
        session?.expire()
    }
}

/// The same pipeline for an extension you already have.
public enum RichPushExtension {
    /// Processes `request` and calls `deliver` exactly once with the content to show. Keep the returned session
    /// and call `expire()` on it from `serviceExtensionTimeWillExpire()`.
    ///
    /// ```swift
    /// override func didReceive(_ request: UNNotificationRequest, withContentHandler handler: @escaping (UNNotificationContent) -> Void) {
    ///     session = RichPushExtension.handle(request) { content, _ in handler(content) }
    /// }
    /// ```
    @discardableResult
    public static func handle(
        _ request: UNNotificationRequest, configuration: RichNotificationProcessor.Configuration = .init(),
        deliver: @escaping @Sendable (UNNotificationContent, DeliveryReport) -> Void
    ) -> ProcessingSession {
        let original = OriginalContent(request.content)
        let payload = JSONValue(foundation: request.content.userInfo) ?? .object([:])
        let text = NotificationText(title: request.content.title, subtitle: request.content.subtitle, body: request.content.body)
        return RichNotificationProcessor(configuration: configuration).start(payload: payload, text: text) { enriched in
            let content = original.mutableCopy()
            content.title = enriched.text.title
            content.subtitle = enriched.text.subtitle
            content.body = enriched.text.body
            content.attachments = enriched.attachments.compactMap(attachment(for:))
            deliver(content, enriched.report)
        }
    }

    /// The system attachment for a staged file, with its type hint and thumbnail options.
    public static func attachment(for staged: StagedAttachment) -> UNNotificationAttachment? {
        var options: [AnyHashable: Any] = [UNNotificationAttachmentOptionsTypeHintKey: staged.uti]
        if let t = staged.thumbnail {
            if let c = t.crop {
                options[UNNotificationAttachmentOptionsThumbnailClippingRectKey] = CGRect(x: c.x, y: c.y, width: c.width, height: c.height).dictionaryRepresentation
            }
            if let time = t.time { options[UNNotificationAttachmentOptionsThumbnailTimeKey] = NSNumber(value: time) }
            if let hidden = t.hidden { options[UNNotificationAttachmentOptionsThumbnailHiddenKey] = NSNumber(value: hidden) }
        }
        return try? UNNotificationAttachment(identifier: staged.identifier, url: staged.file, options: options)
    }
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
