// The whole Notification Service Extension of an app that uses RichPush.
// Add a Notification Service Extension target in Xcode, add the RichPushNotificationService product to it,
// and replace the generated NotificationService.swift with this file. The class name must match
// NSExtensionPrincipalClass in the extension's Info.plist ($(PRODUCT_MODULE_NAME).NotificationService).
#if canImport(UserNotifications) || canImport(UserNotificationsStandIn)
import Foundation
import RichPushMedia
import RichPushNotificationService

final class NotificationService: RichPushServiceExtension {
    // Optional: fetch plain http media too (the app must also allow it in App Transport Security).
    // Receipts: a RichPush server puts a receipt address in the payload and the report is posted there before the
    // notification is shown (at most 2 s); the device id files repeats under one device (here one the app saved).
    override var configuration: RichNotificationProcessor.Configuration {
        var c = RichNotificationProcessor.Configuration()
        c.fetch.allowInsecureHTTP = false
        c.receipts.deviceID = UserDefaults(suiteName: "group.com.example.app")?.string(forKey: "richpush.deviceID")
        return c
    }

    // Optional: keep the delivery report (report.receipt says whether the receipt was posted).
    override func didDeliver(_ report: DeliveryReport) {
        let defaults = UserDefaults(suiteName: "group.com.example.app")
        defaults?.set(report.json.jsonString, forKey: "richpush.lastReport")
    }
}
#endif
