// The whole Notification Service Extension of an app that uses RichPush.
// Add a Notification Service Extension target in Xcode, add the RichPushNotificationService product to it,
// and replace the generated NotificationService.swift with this file. The class name must match
// NSExtensionPrincipalClass in the extension's Info.plist ($(PRODUCT_MODULE_NAME).NotificationService).
#if canImport(UserNotifications)
import RichPushMedia
import RichPushNotificationService

final class NotificationService: RichPushServiceExtension {
    // Optional: fetch plain http media too (the app must also allow it in App Transport Security).
    override var configuration: RichNotificationProcessor.Configuration {
        var c = RichNotificationProcessor.Configuration()
        c.fetch.allowInsecureHTTP = false
        return c
    }

    // Optional: keep the delivery report for the app to post to the RichPush server as a receipt.
    override func didDeliver(_ report: DeliveryReport) {
        let defaults = UserDefaults(suiteName: "group.com.example.app")
        defaults?.set(report.json.jsonString, forKey: "richpush.lastReport")
    }
}
#endif
