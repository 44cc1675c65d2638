#if !canImport(UserNotifications)
import Foundation

/// What the app asks permission for.
public struct UNAuthorizationOptions: OptionSet, Sendable {
    public let rawValue: UInt
    public init(rawValue: UInt) { self.rawValue = rawValue }
    public static let badge = UNAuthorizationOptions(rawValue: 1 << 0)
    public static let sound = UNAuthorizationOptions(rawValue: 1 << 1)
    public static let alert = UNAuthorizationOptions(rawValue: 1 << 2)
    public static let carPlay = UNAuthorizationOptions(rawValue: 1 << 3)
    public static let criticalAlert = UNAuthorizationOptions(rawValue: 1 << 4)
    public static let providesAppNotificationSettings = UNAuthorizationOptions(rawValue: 1 << 5)
    public static let provisional = UNAuthorizationOptions(rawValue: 1 << 6)
}

/// Whether the app may show notifications.
public enum UNAuthorizationStatus: Int, Sendable {
    case notDetermined = 0
    case denied = 1
    case authorized = 2
    case provisional = 3
    case ephemeral = 4
}

/// The app's notification settings (the stand-in keeps the authorization status only).
open class UNNotificationSettings: NSObject, @unchecked Sendable {
    open private(set) var authorizationStatus: UNAuthorizationStatus

    init(authorizationStatus: UNAuthorizationStatus) {
        self.authorizationStatus = authorizationStatus
        super.init()
    }
}

/// The identifier of the response when the person opened the notification itself.
public let UNNotificationDefaultActionIdentifier = "com.apple.UNNotificationDefaultActionIdentifier"
/// The identifier of the response when the person dismissed the notification (the category must ask for it).
public let UNNotificationDismissActionIdentifier = "com.apple.UNNotificationDismissActionIdentifier"

/// A delivered notification: its request and when it was delivered.
open class UNNotification: NSObject, @unchecked Sendable {
    open private(set) var request: UNNotificationRequest
    open private(set) var date: Date

    /// The stand-in's own initializer (Apple's is not public): what a test or a simulator delivers.
    public init(request: UNNotificationRequest, date: Date) {
        self.request = request
        self.date = date
        super.init()
    }
}

/// What the person did with a notification.
open class UNNotificationResponse: NSObject, @unchecked Sendable {
    open private(set) var notification: UNNotification
    open private(set) var actionIdentifier: String

    /// The stand-in's own initializer (Apple's is not public).
    public init(notification: UNNotification, actionIdentifier: String) {
        self.notification = notification
        self.actionIdentifier = actionIdentifier
        super.init()
    }
}

/// The app's notification center: permission and settings. On Linux the person's answer is set beforehand with
/// ``standInAnswer`` (what a test or a simulated device decides).
open class UNUserNotificationCenter: NSObject, @unchecked Sendable {
    private static let shared = UNUserNotificationCenter()
    private let lock = NSLock()
    private var status: UNAuthorizationStatus = .notDetermined
    /// What the person answers when first asked: true grants.
    public var standInAnswer = true

    open class func current() -> UNUserNotificationCenter { shared }

    /// Asks once; later calls answer as the first did.
    open func requestAuthorization(options: UNAuthorizationOptions = []) async throws -> Bool {
        let granted = lock.withLock { () -> Bool in
            if status == .notDetermined {
                status = standInAnswer ? (options.contains(.provisional) ? .provisional : .authorized) : .denied
            }
            return status == .authorized || status == .provisional
        }
        return granted
    }

    open func notificationSettings() async -> UNNotificationSettings {
        UNNotificationSettings(authorizationStatus: lock.withLock { status })
    }

    /// Back to not asked (a reinstall).
    public func standInReset() { lock.withLock { status = .notDetermined } }

    /// What the person chose in Settings since (turned notifications off, say).
    public func standInSet(_ status: UNAuthorizationStatus) { lock.withLock { self.status = status } }
}
#endif
