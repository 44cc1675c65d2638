import RichPushAPNs
import RichPushFCM
import RichPushTransport

/// What a delivery's stored reason means for the sender, in a sentence: APNs' reasons and FCM's codes as their
/// clients explain them, the Web Push service's answers, and the server's own reasons. The API gives it beside each
/// delivery's reason (`meaning`), the console shows it, and `richpush send --server` prints it.
public enum DeliveryReasons {
    public static func meaning(_ reason: String) -> String? {
        if let own = server[reason] { return own }
        if reason.hasPrefix("webpush_address_refused_") {
            return "the subscription's push service resolves to an internal address ("
                + reason.dropFirst("webpush_address_refused_".count)
                + "), which the server never connects to: the subscription was dropped"
        }
        if reason.hasPrefix("webpush_transport_") {
            let label = String(reason.dropFirst("webpush_transport_".count))
            let cause =
                label == "opening_full"
                ? "too many push services were being connected to at once"
                : TransportError.meaning(ofLabel: label)
            let lead =
                ConnectStage(label: label) != nil
                ? "no connection to the push service: " : "the push service did not answer: "
            if let cause { return lead + cause + "; tried again" }
        }
        // APNs' and FCM's transport failures, by the same names.
        if reason.hasPrefix("transport_") {
            let label = String(reason.dropFirst("transport_".count))
            if let cause = TransportError.meaning(ofLabel: label) {
                return
                    (ConnectStage(label: label) != nil
                    ? "no connection to APNs or FCM: " : "APNs or FCM did not answer: ")
                    + cause
            }
        }
        if reason.hasPrefix("webpush_"), let status = Int(reason.dropFirst("webpush_".count)) {
            return webPushStatus(status)
        }
        if case .unknown = APNsReason(rawValue: reason) {} else { return APNsReason(rawValue: reason).advice }
        if case .unknown = FCMErrorCode(errorCode: reason) {} else { return FCMErrorCode(errorCode: reason).advice() }
        return nil
    }

    static let server: [String: String] = [
        "apns_not_configured":
            "the app has no APNs credentials and the server is not in sandbox mode: give them with PATCH /v1/apps/{app} {\"apns\": …}",
        "fcm_not_configured":
            "the app has no FCM service account and the server is not in sandbox mode: give one with PATCH /v1/apps/{app} {\"fcm\": …}",
        "webpush_not_configured":
            "the app has no usable VAPID key: make one with POST /v1/apps/{app}/webpush/keys",
        "apns_needs_a_device_token": "a Live Activity start or update needs a device token, not a topic",
        "circuit_open":
            "the push service failed ten times in a row: its deliveries wait while one probe at a time tests it; tried again when it answers",
        "database_unavailable":
            "the database did not answer when the delivery's app or message was read: given back unsent, its attempt not counted, and tried again",
        "disk": "the server's disk is below its free-space floor: tried again once there is room",
        "notification_missing": "the notification was removed (retention or its app deleted) before it was sent",
        "send_deadline": "the push service did not answer within the send's deadline: tried again",
        "unknown_app": "the app was deleted before the delivery was sent",
        "unknown_provider": "no push service of this name is configured on this server",
        "ttl": "the notification's time to live ran out before it could be delivered",
        "older_version_in_flight":
            "an older version of this notification to the same device is being sent: this one follows it",
        "webpush_bad_subscription": "the stored subscription cannot be read (endpoint or keys): it was dropped",
        "webpush_dns": "the push service's name did not resolve: tried again",
        "webpush_payload_too_large": "the encrypted message is over the 4,096 bytes every push service must take",
        "webpush_request": "the push service refused the request as malformed",
        "webpush_transport": "no connection to the push service, or it broke before an answer: tried again",
    ]

    /// A push service's answer (RFC 8030 §5 and §7, RFC 8292 §4.2), as the retry decision reads it.
    static func webPushStatus(_ status: Int) -> String {
        switch status {
        case 404, 410: "the browser's subscription is gone (unsubscribed or expired): it was dropped"
        case 413: "the message is too large for the push service"
        case 429: "the push service asked us to slow down: tried again after its Retry-After"
        case 401: "the push service wants a VAPID header and got none"
        case 403: "the push service refused the VAPID signature: the subscription was made with another key"
        case 500...599: "the push service failed: tried again"
        default: "the push service answered \(status)"
        }
    }
}
