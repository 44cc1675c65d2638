import Foundation
import RichPushCore

/// The checks FCM's `messages:send` makes on a request body, answered the way FCM answers them:
/// `INVALID_ARGUMENT` with the offending field named.
struct FCMMessageValidator {
    struct Violation {
        var field: String
        var description: String
    }

    /// Both the documented snake_case names and proto3 lowerCamelCase are accepted.
    static func canonical(_ key: String) -> String {
        var out = ""
        for ch in key {
            if ch.isUppercase { out += "_" + ch.lowercased() } else { out.append(ch) }
        }
        return out
    }

    static let messageFields: Set<String> = [
        "name", "data", "notification", "android", "webpush", "apns", "fcm_options", "token", "topic", "condition",
        "fid",
    ]
    static let androidFields: Set<String> = [
        "collapse_key", "priority", "ttl", "restricted_package_name", "data", "notification", "fcm_options",
        "direct_boot_ok", "bandwidth_constrained_ok", "restricted_satellite_ok",
    ]
    static let androidNotificationFields: Set<String> = [
        "title", "body", "icon", "color", "sound", "tag", "click_action", "body_loc_key", "body_loc_args",
        "title_loc_key", "title_loc_args",
        "channel_id", "ticker", "sticky", "event_time", "local_only", "notification_priority", "default_sound",
        "default_vibrate_timings",
        "default_light_settings", "vibrate_timings", "visibility", "notification_count", "light_settings", "image",
        "proxy", "bypass_proxy_notification",
    ]

    /// The target and the violations of one `message`.
    static func validate(_ message: [String: JSONValue]) -> (target: FCMTarget?, violations: [Violation]) {
        var v: [Violation] = []
        var m: [String: JSONValue] = [:]
        for (k, value) in message { m[canonical(k)] = value }
        for key in m.keys.sorted() where !messageFields.contains(key) {
            v.append(
                Violation(
                    field: "message",
                    description:
                        "Invalid JSON payload received. Unknown name \"\(key)\" at 'message': Cannot find field."
                )
            )
        }
        let (target, readable) = readTarget(m, &v)
        guard readable else { return (nil, v) }
        if let data = m["data"] { checkData(data, field: "message.data", &v) }
        if let n = m["notification"] { checkNotification(n, &v) }
        if let a = m["android"] { checkAndroid(a, &v) }
        if let a = m["apns"] { checkAPNs(a, &v) }
        if let w = m["webpush"] { checkWebpush(w, &v) }
        if let o = m["fcm_options"]?.objectValue, let label = o["analytics_label"] ?? o["analyticsLabel"] {
            if label.stringValue.map(MessageValidator.isValidAnalyticsLabel) != true {
                v.append(
                    Violation(field: "message.fcm_options.analytics_label", description: "Invalid analytics label")
                )
            }
        }
        if let target, v.isEmpty {
            var withoutTarget = m
            for t in ["token", "topic", "condition", "fid"] { withoutTarget[t] = nil }
            let size = JSONValue.object(withoutTarget).serializedSize
            if size > target.payloadLimit {
                v.append(
                    Violation(
                        field: "message",
                        description: "Message is too big: \(size) bytes, the limit is \(target.payloadLimit)"
                    )
                )
            }
        }
        return (target, v)
    }

    /// The one target (token, topic, condition or fid) and its form; `readable` is false when it is not even a string
    /// (nothing else is judged then, as FCM does).
    static func readTarget(
        _ m: [String: JSONValue],
        _ v: inout [Violation]
    ) -> (target: FCMTarget?, readable: Bool) {
        let targets = ["token", "topic", "condition", "fid"].filter { m[$0] != nil && m[$0] != .null }
        var target: FCMTarget?
        if targets.count != 1 {
            v.append(
                Violation(field: "message", description: "Exactly one of token, topic, condition or fid must be set")
            )
        } else {
            let name = targets[0]
            guard case .string(let value)? = m[name] else {
                v.append(Violation(field: "message.\(name)", description: "Invalid value: expected a string"))
                return (nil, false)
            }
            switch name {
            case "topic":
                let t = value.hasPrefix("/topics/") ? String(value.dropFirst(8)) : value
                if !MessageValidator.isValidTopicName(t) {
                    v.append(Violation(field: "message.topic", description: "Invalid topic name \(value)"))
                }
                target = .topic(t)
            case "condition":
                do {
                    let c = try FCMCondition.parse(value)
                    if c.topics.count > FCMCondition.maxTopics {
                        v.append(
                            Violation(field: "message.condition", description: "Invalid condition: more than 5 topics")
                        )
                    }
                } catch {
                    v.append(
                        Violation(field: "message.condition", description: "Invalid condition expression provided")
                    )
                }
                target = .condition(value)
            default:
                target = .token(value)
            }
        }
        return (target, true)
    }

    /// `notification`: an object of strings.
    static func checkNotification(_ n: JSONValue, _ v: inout [Violation]) {
        if case .object(let o) = n {
            for (k, value) in o where value.stringValue == nil && !value.isNull {
                v.append(
                    Violation(
                        field: "message.notification.\(canonical(k))",
                        description: "Invalid value: expected a string"
                    )
                )
            }
        } else {
            v.append(Violation(field: "message.notification", description: "Invalid value: expected an object"))
        }
    }

    static func checkData(_ data: JSONValue, field: String, _ v: inout [Violation]) {
        guard case .object(let o) = data else {
            v.append(Violation(field: field, description: "Invalid value: expected a map of strings"))
            return
        }
        for (i, key) in o.keys.sorted().enumerated() {
            if o[key]?.stringValue == nil {
                v.append(
                    Violation(
                        field: "\(field)[\(i)].value",
                        description: "Invalid value at '\(field)[\(i)].value' (TYPE_STRING)"
                    )
                )
            }
            let lower = key.lowercased()
            if key == "from" || key == "message_type" || lower.hasPrefix("google") || lower.hasPrefix("gcm") {
                v.append(Violation(field: "\(field)[\(i)].key", description: "Invalid data key \"\(key)\": reserved"))
            }
        }
    }

    static func checkAndroid(_ android: JSONValue, _ v: inout [Violation]) {
        guard case .object(let raw) = android else {
            v.append(Violation(field: "message.android", description: "Invalid value: expected an object"))
            return
        }
        var a: [String: JSONValue] = [:]
        for (k, value) in raw { a[canonical(k)] = value }
        for key in a.keys.sorted() where !androidFields.contains(key) {
            v.append(
                Violation(
                    field: "message.android",
                    description:
                        "Invalid JSON payload received. Unknown name \"\(key)\" at 'message.android': Cannot find field."
                )
            )
        }
        if let p = a["priority"], !["NORMAL", "HIGH", "normal", "high"].contains(p.stringValue ?? "") {
            v.append(
                Violation(field: "message.android.priority", description: "Invalid value at 'message.android.priority'")
            )
        }
        if let ttl = a["ttl"] {
            if let s = ttl.stringValue, s.hasSuffix("s"), let seconds = Double(s.dropLast()), seconds >= 0,
                seconds <= 2_419_200
            {
            } else {
                v.append(
                    Violation(
                        field: "message.android.ttl",
                        description: "Invalid value at 'message.android.ttl' (Duration): must be 0s to 2419200s"
                    )
                )
            }
        }
        if let data = a["data"] { checkData(data, field: "message.android.data", &v) }
        if let n = a["notification"] {
            guard case .object(let rawN) = n else {
                v.append(
                    Violation(field: "message.android.notification", description: "Invalid value: expected an object")
                )
                return
            }
            var o: [String: JSONValue] = [:]
            for (k, value) in rawN { o[canonical(k)] = value }
            for key in o.keys.sorted() where !androidNotificationFields.contains(key) {
                v.append(
                    Violation(
                        field: "message.android.notification",
                        description:
                            "Invalid JSON payload received. Unknown name \"\(key)\" at 'message.android.notification': Cannot find field."
                    )
                )
            }
            if let c = o["color"], !(c.stringValue.map { $0.count == 7 && RGBAColor(hex: $0) != nil } ?? false) {
                v.append(
                    Violation(field: "message.android.notification.color", description: "Invalid color: use #rrggbb")
                )
            }
            for (args, key) in [("title_loc_args", "title_loc_key"), ("body_loc_args", "body_loc_key")]
            where o[args] != nil && o[key] == nil {
                v.append(
                    Violation(field: "message.android.notification.\(args)", description: "\(args) requires \(key)")
                )
            }
            if let c = o["notification_count"], c.intValue == nil {
                v.append(
                    Violation(
                        field: "message.android.notification.notification_count",
                        description: "Invalid value (TYPE_INT32)"
                    )
                )
            }
        }
    }

    static func checkAPNs(_ apns: JSONValue, _ v: inout [Violation]) {
        guard case .object(let a) = apns else {
            v.append(Violation(field: "message.apns", description: "Invalid value: expected an object"))
            return
        }
        if let h = a["headers"] {
            if case .object(let o) = h {
                for (k, value) in o where value.stringValue == nil {
                    v.append(Violation(field: "message.apns.headers[\(k)]", description: "Invalid value (TYPE_STRING)"))
                }
            } else {
                v.append(
                    Violation(field: "message.apns.headers", description: "Invalid value: expected a map of strings")
                )
            }
        }
        if let p = a["payload"], p.objectValue == nil {
            v.append(Violation(field: "message.apns.payload", description: "Invalid value: expected an object"))
        }
    }

    static func checkWebpush(_ webpush: JSONValue, _ v: inout [Violation]) {
        guard case .object(let w) = webpush else {
            v.append(Violation(field: "message.webpush", description: "Invalid value: expected an object"))
            return
        }
        if let o = (w["fcm_options"] ?? w["fcmOptions"])?.objectValue, let link = o["link"]?.stringValue,
            !link.lowercased().hasPrefix("https://")
        {
            v.append(Violation(field: "message.webpush.fcm_options.link", description: "Link must be an HTTPS URL"))
        }
        if let d = w["data"] { checkData(d, field: "message.webpush.data", &v) }
    }
}
