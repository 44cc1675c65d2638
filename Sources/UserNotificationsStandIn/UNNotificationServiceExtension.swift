// A stand-in for the part of Apple's UserNotifications framework that RichPushNotificationService uses, with the
// documented names, signatures and behaviour, so that the adapter and the examples compile and run on Linux in
// Swift 6 language mode. It is linked on Linux only and never shipped to Apple platforms, where the real
// framework is used. Like the real framework, it declares nothing Sendable.
#if !canImport(UserNotifications)
import Foundation

/// The principal class of a Notification Service Extension.
///
/// The system calls ``didReceive(_:withContentHandler:)`` once per notification on a background thread, and
/// ``serviceExtensionTimeWillExpire()`` from another thread when about 30 seconds have passed without the content
/// handler being called; after that, the content handed over (or the original) is shown.
open class UNNotificationServiceExtension: NSObject {
    public override init() { super.init() }

    /// Modify `request.content` and call `contentHandler` exactly once. The base class hands the content over
    /// unchanged.
    open func didReceive(
        _ request: UNNotificationRequest,
        withContentHandler contentHandler: @escaping (UNNotificationContent) -> Void
    ) {
        contentHandler(request.content)
    }

    /// Called shortly before the system ends the extension: call the content handler now with a best attempt.
    open func serviceExtensionTimeWillExpire() {}
}
#endif
