// For an app that already has a Notification Service Extension: call RichPush from it.
#if canImport(UserNotifications) || canImport(UserNotificationsStandIn)
import Foundation
import RichPushMedia
import RichPushNotificationService
#if canImport(UserNotifications)
import UserNotifications
#else
import UserNotificationsStandIn  // Linux only: lets CI compile this example
#endif

final class ExistingNotificationService: UNNotificationServiceExtension {
    // The system calls serviceExtensionTimeWillExpire() on another thread than didReceive: guard the session.
    private let lock = NSLock()
    private var session: ProcessingSession?

    override func didReceive(
        _ request: UNNotificationRequest,
        withContentHandler contentHandler: @escaping (UNNotificationContent) -> Void
    ) {
        // The system allows the content handler to be called from any thread.
        nonisolated(unsafe) let handler = contentHandler
        let started = RichPushExtension.handle(request) { content, _ in handler(content) }
        lock.withLock { session = started }
    }

    override func serviceExtensionTimeWillExpire() {
        lock.withLock { session }?.expire()
    }
}
#endif
