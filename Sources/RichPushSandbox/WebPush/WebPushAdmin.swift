import Foundation
import RichPushCore

extension Sandbox {
    /// The Web Push service's part of the admin API:
    /// - `POST /webpush/subscriptions` `{"application_server_key": "<VAPID public key>"}`: a new subscription, as a
    ///   browser's `PushSubscription.toJSON()` (201);
    /// - `POST /webpush/unregister` `{"endpoint": …}`: later pushes to it are answered 410;
    /// - `GET /webpush/notifications[?limit=]`: what browsers were sent, decrypted, newest last;
    /// - `POST /webpush/faults` `{"kind": "too_many_requests"|"internal"|"unavailable"|"stall", "count": n,
    ///   "retry_after": s}`, `DELETE /webpush/faults`;
    /// - `POST /webpush/mode` `{"mode": "silent"|"normal"}`: silent, connections complete TLS and nothing is ever
    ///   answered (a push service that hangs); normal again, it answers.
    static func route(
        webPush: WebPushEmulator,
        method: String,
        path: String,
        query: [String: String],
        body: JSONValue?
    ) -> (Int, JSONValue) {
        switch (method, path) {
        case ("POST", "/webpush/subscriptions"):
            let key = body?["application_server_key"]?.stringValue
            if let key, key.utf8.count > 200 { return (400, ["error": "application_server_key is a VAPID public key"]) }
            return (201, webPush.subscribe(applicationServerKey: key))
        case ("POST", "/webpush/unregister"):
            guard let endpoint = body?["endpoint"]?.stringValue else { return (400, ["error": "endpoint is required"]) }
            webPush.unregister(endpoint)
            return (200, ["unregistered": .string(endpoint)])
        case ("GET", "/webpush/notifications"):
            let limit = min(max(Int(query["limit"] ?? "") ?? 100, 1), 10_000)
            let all = webPush.recorded()
            return (
                200,
                [
                    "count": .int(Int64(all.count)), "accepted_total": .int(Int64(webPush.acceptedCount)),
                    "notifications": .array(all.suffix(limit).map(\.adminJSON)),
                ]
            )
        case ("POST", "/webpush/faults"):
            let after = Int(body?["retry_after"]?.intValue ?? 1)
            let fault: WebPushFault
            switch body?["kind"]?.stringValue {
            case "too_many_requests": fault = .tooManyRequests(retryAfter: after)
            case "internal": fault = .internalError
            case "unavailable": fault = .unavailable(retryAfter: after)
            case "stall": fault = .stall
            default: return (400, ["error": "kind must be too_many_requests, internal, unavailable or stall"])
            }
            webPush.inject(fault, count: min(max(Int(body?["count"]?.intValue ?? 1), 1), 1_000_000))
            return (201, ["injected": true])
        case ("DELETE", "/webpush/faults"):
            webPush.clearFaults()
            return (200, ["cleared": true])
        case ("POST", "/webpush/mode"):
            switch body?["mode"]?.stringValue {
            case "silent": webPush.setSilent(true)
            case "normal": webPush.setSilent(false)
            default: return (400, ["error": "mode must be silent or normal"])
            }
            return (200, ["mode": .string(webPush.isSilent ? "silent" : "normal")])
        default:
            return (404, ["error": .string("no route \(method) \(path)")])
        }
    }
}

extension RecordedWebPush {
    /// As the admin API lists it: the decrypted message (JSON when it is), and the headers it came with.
    var adminJSON: JSONValue {
        var o: [String: JSONValue] = [
            "subscription": .string(subscription), "ttl": .int(Int64(ttl)), "urgency": .string(urgency),
            "replaced_pending": .bool(replacedPending), "received_at": .double(receivedAt.timeIntervalSince1970),
        ]
        o["message"] = json ?? .string(String(decoding: plaintext, as: UTF8.self))
        if let t = topic { o["topic"] = .string(t) }
        if let s = subject { o["subject"] = .string(s) }
        return .object(o)
    }
}
