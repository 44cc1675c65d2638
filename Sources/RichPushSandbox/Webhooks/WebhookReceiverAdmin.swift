import Foundation
import RichPushCore

extension Sandbox {
    /// The webhook receiver's part of the admin API:
    /// - `GET /webhooks/received[?limit=&hook=]`: the requests recorded, newest last (each with its id, whether its
    ///   signature verified, and its events);
    /// - `POST /webhooks/mode` `{"fail": 0.3, "hang": 0.05, "status": 500, "gone": false, "hook": "orders"}`: the
    ///   share of requests answered with an error, the share never answered, and whether every request is answered
    ///   410; for one hook when `hook` is given, else for all (and each hook's own mode is forgotten);
    /// - `POST /webhooks/secrets` `{"hook": "orders", "secret": "whsec_…"}`: check the signatures of that hook's
    ///   requests (`"secret": null` stops);
    /// - `DELETE /webhooks/received`: forget what was recorded.
    static func route(
        webhooks: WebhookReceiver,
        method: String,
        path: String,
        query: [String: String],
        body: JSONValue?
    ) -> (Int, JSONValue) {
        switch (method, path) {
        case ("GET", "/webhooks/received"):
            let limit = min(max(Int(query["limit"] ?? "") ?? 100, 1), 10_000)
            var all = webhooks.received()
            if let hook = query["hook"] { all = all.filter { $0.hook == hook } }
            let (failed, hung) = webhooks.refusedCount
            return (
                200,
                [
                    "count": .int(Int64(all.count)), "failed": .int(Int64(failed)), "hung": .int(Int64(hung)),
                    "events": .int(Int64(all.reduce(0) { $0 + $1.events.count })),
                    "requests": .array(all.suffix(limit).map(\.adminJSON)),
                ]
            )
        case ("DELETE", "/webhooks/received"):
            webhooks.reset()
            return (200, ["cleared": true])
        case ("POST", "/webhooks/mode"):
            let fail = body?["fail"]?.doubleValue ?? 0
            let hang = body?["hang"]?.doubleValue ?? 0
            guard (0...1).contains(fail), (0...1).contains(hang), fail + hang <= 1 else {
                return (400, ["error": "fail and hang are shares from 0 to 1, together at most 1"])
            }
            let status = Int(body?["status"]?.intValue ?? 500)
            guard (300...599).contains(status) else { return (400, ["error": "status is 300 to 599"]) }
            let gone = body?["gone"]?.boolValue ?? false
            let hook = body?["hook"]?.stringValue
            if let hook, hook.isEmpty || hook.utf8.count > 100 {
                return (400, ["error": "hook is the name in /hooks/<name>"])
            }
            webhooks.setMode(.init(failShare: fail, hangShare: hang, failStatus: status, gone: gone), hook: hook)
            return (
                200, ["fail": .double(fail), "hang": .double(hang), "status": .int(Int64(status)), "gone": .bool(gone)]
            )
        case ("POST", "/webhooks/secrets"):
            guard let hook = body?["hook"]?.stringValue, !hook.isEmpty, hook.utf8.count <= 100 else {
                return (400, ["error": "hook is the name in /hooks/<name>"])
            }
            let secret = body?["secret"]?.stringValue
            if let secret, !secret.hasPrefix("whsec_") || secret.utf8.count > 200 {
                return (400, ["error": "secret is the endpoint's whsec_ secret"])
            }
            webhooks.setSecret(secret, for: hook)
            return (200, ["hook": .string(hook), "checking": .bool(secret != nil)])
        default:
            return (404, ["error": .string("no route \(method) \(path)")])
        }
    }
}

extension WebhookReceiver.Request {
    var adminJSON: JSONValue {
        var o: [String: JSONValue] = [
            "hook": .string(hook), "webhook_id": .string(id), "timestamp": .string(timestamp),
            "received_at": .double(receivedAt.timeIntervalSince1970),
            "events": .array(
                events.map { e in
                    var j: [String: JSONValue] = ["id": .string(e.id), "type": .string(e.type)]
                    if let n = e.notificationID { j["notification_id"] = .string(n) }
                    if let d = e.deliveryID { j["delivery_id"] = .int(d) }
                    return .object(j)
                }
            ),
        ]
        if let verified { o["verified"] = .bool(verified) }
        if let body, let json = try? JSONValue.parse(body) { o["body"] = json }
        return .object(o)
    }
}
