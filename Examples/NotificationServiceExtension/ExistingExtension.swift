// For an app that already has a Notification Service Extension: call RichPush from it.
#if canImport(UserNotifications)
import RichPushMedia
import RichPushNotificationService
import UserNotifications

final class ExistingNotificationService: UNNotificationServiceExtension {
    private var session: ProcessingSession?

    override func didReceive(_ request: UNNotificationRequest, withContentHandler contentHandler: @escaping (UNNotificationContent) -> Void) {
        nonisolated(unsafe) let handler = contentHandler
        session = RichPushExtension.handle(request) { content, _ in handler(content) }
    }

    override func serviceExtensionTimeWillExpire() {
        session?.expire()
    }
}
#endif
