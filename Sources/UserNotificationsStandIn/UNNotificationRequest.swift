#if !canImport(UserNotifications)
import Foundation

/// What caused a notification to be delivered (the stand-in has no concrete triggers).
open class UNNotificationTrigger: NSObject {
    open var repeats: Bool { false }
}

/// A notification's identifier, content and trigger.
open class UNNotificationRequest: NSObject, NSCopying {
    open private(set) var identifier: String
    open private(set) var content: UNNotificationContent
    open private(set) var trigger: UNNotificationTrigger?

    /// The content is copied, as Apple's declares it `@NSCopying`.
    public init(identifier: String, content: UNNotificationContent, trigger: UNNotificationTrigger?) {
        self.identifier = identifier
        self.content = content.copy() as! UNNotificationContent
        self.trigger = trigger
        super.init()
    }

    open func copy(with zone: NSZone? = nil) -> Any { self }
}
#endif
