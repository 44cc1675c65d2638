#if !canImport(UserNotifications)
import Foundation

/// The read-only content of a notification. `copy()` gives a ``UNNotificationContent`` and `mutableCopy()` a
/// ``UNMutableNotificationContent``, each independent of the original.
open class UNNotificationContent: NSObject, NSCopying, NSMutableCopying {
    struct Values {
        var title = ""
        var subtitle = ""
        var body = ""
        var badge: NSNumber?
        var categoryIdentifier = ""
        var threadIdentifier = ""
        var targetContentIdentifier: String?
        var launchImageName = ""
        var relevanceScore = 0.0
        var userInfo: [AnyHashable: Any] = [:]
        var attachments: [UNNotificationAttachment] = []
    }

    var values = Values()

    public override init() { super.init() }

    init(values: Values) {
        self.values = values
        super.init()
    }

    open var title: String { values.title }
    open var subtitle: String { values.subtitle }
    open var body: String { values.body }
    open var badge: NSNumber? { values.badge }
    open var categoryIdentifier: String { values.categoryIdentifier }
    open var threadIdentifier: String { values.threadIdentifier }
    open var targetContentIdentifier: String? { values.targetContentIdentifier }
    open var launchImageName: String { values.launchImageName }
    open var relevanceScore: Double { values.relevanceScore }
    open var userInfo: [AnyHashable: Any] { values.userInfo }
    open var attachments: [UNNotificationAttachment] { values.attachments }

    open func copy(with zone: NSZone? = nil) -> Any { UNNotificationContent(values: values) }
    open func mutableCopy(with zone: NSZone? = nil) -> Any { UNMutableNotificationContent(values: values) }
}

/// The editable content a service extension hands back.
open class UNMutableNotificationContent: UNNotificationContent {
    open override var title: String {
        get { values.title }
        set { values.title = newValue }
    }
    open override var subtitle: String {
        get { values.subtitle }
        set { values.subtitle = newValue }
    }
    open override var body: String {
        get { values.body }
        set { values.body = newValue }
    }
    open override var badge: NSNumber? {
        get { values.badge }
        set { values.badge = newValue }
    }
    open override var categoryIdentifier: String {
        get { values.categoryIdentifier }
        set { values.categoryIdentifier = newValue }
    }
    open override var threadIdentifier: String {
        get { values.threadIdentifier }
        set { values.threadIdentifier = newValue }
    }
    open override var targetContentIdentifier: String? {
        get { values.targetContentIdentifier }
        set { values.targetContentIdentifier = newValue }
    }
    open override var launchImageName: String {
        get { values.launchImageName }
        set { values.launchImageName = newValue }
    }
    open override var relevanceScore: Double {
        get { values.relevanceScore }
        set { values.relevanceScore = newValue }
    }
    open override var userInfo: [AnyHashable: Any] {
        get { values.userInfo }
        set { values.userInfo = newValue }
    }
    open override var attachments: [UNNotificationAttachment] {
        get { values.attachments }
        set { values.attachments = newValue }
    }
}
#endif
