import Foundation
import RichPushCore
import RichPushWebPush

/// The request bodies of the routes beside the send and the app, each decoded once at the edge into typed values:
/// unknown fields, wrong types, empty or overlong strings and values outside their set are refused (422) with
/// every problem named, so the handlers only see values they can use.
extension APIError {
    static func invalid(_ what: String, _ report: ValidationReport) -> APIError {
        APIError(.invalid, "\(what) is not valid", issues: report.errors)
    }
}

extension FieldReader {
    /// The body as an object, or a `type` problem.
    mutating func body(_ json: JSONValue, known: Set<String>) -> [String: JSONValue] {
        guard case .object(let o) = json else {
            report.add("", "type", "the body must be an object, found \(json.typeName)")
            return [:]
        }
        rejectUnknown(o, known: known, at: "")
        return o
    }
}

/// `POST /v1/apps/{app}/devices`. Every field is bounded to the size of the real thing, so that a stored
/// registration is a few KB at most (docs/server.md, "Registrations": the worst case, byte by byte):
///
/// - an APNs token is hex of whole bytes, 16 to 200 characters: 64 today, and Apple says not to hard-code the
///   length (`application(_:didRegisterForRemoteNotificationsWithDeviceToken:)`), so three times that;
/// - an FCM registration token is at most 1,024 characters (about 160 today; FCM publishes no length);
/// - a browser's subscription is an endpoint of at most 2,048 bytes and its two fixed-size keys;
/// - at most 32 tags and 32 topics of 64 bytes, a user id of 128 bytes (UTF-8), a BCP 47 locale of 35
///   characters, a time zone name and an app version of 64.
struct DeviceBody {
    var device: Device

    static let fields: Set<String> = [
        "token", "platform", "provider", "user_id", "tags", "topics", "locale", "time_zone", "app_version",
        "subscription", "permission",
    ]
    /// The largest registration body read: every field at its longest comes to under 9 KB of UTF-8, each byte
    /// written as JSON's longest escape (6 bytes) under 54 KB. A registration is a public write: a body sent slowly
    /// holds what arrived of it until it ends, so its bound is the route's own, not the API's 256 KB.
    static let maxBodyBytes = 64 * 1024
    static let maxTags = 32
    static let maxTagBytes = 64
    static let maxUserIDBytes = 128
    /// An APNs token in hex.
    static let apnsTokenLengths = 16...200
    static let maxFCMToken = 1024
    /// A web subscription's token form: the endpoint, `#`, the 87-character key, `.`, the 22-character secret.
    static let maxToken = WebPushSubscription.maxEndpointLength + 111

    /// A user id: 1 to 128 bytes of UTF-8 (the schema counts characters; the bytes are what is stored).
    static func userID(_ o: [String: JSONValue], _ r: inout FieldReader) -> String? {
        guard let u = r.text(o, "user_id", at: "", lengths: 1...maxUserIDBytes, shape: FieldReader.label) else {
            return nil
        }
        guard u.utf8.count <= maxUserIDBytes else {
            r.report.add("user_id", "utf8-length", "user_id is at most \(maxUserIDBytes) bytes of UTF-8")
            return nil
        }
        return u
    }

    /// Tags or topics: at most 32, each 1 to 64 bytes of UTF-8.
    static func labels(_ o: [String: JSONValue], _ key: String, _ r: inout FieldReader) -> [String]? {
        guard
            let list = r.texts(o, key, at: "", maxCount: maxTags, lengths: 1...maxTagBytes, shape: FieldReader.label)
        else { return nil }
        for (i, t) in list.enumerated() where t.utf8.count > maxTagBytes {
            r.report.add("\(key)[\(i)]", "utf8-length", "each is at most \(maxTagBytes) bytes of UTF-8")
        }
        return list
    }

    static func decode(_ json: JSONValue, appID: String, providers: Providers) throws(APIError) -> DeviceBody {
        var r = FieldReader(strict: true, refusesNUL: true)
        let o = r.body(json, known: fields)
        let platform = r.choice(o, "platform", at: "", required: true, Device.Platform.self)
        // A browser's push subscription (`PushSubscription.toJSON()`) stands for the token of a Web Push device:
        // the device is stored with the subscription in one string (its token form).
        var token: String?
        var subscribed: Bool
        if let s = o["subscription"] {
            subscribed = true
            if o["token"] != nil { r.report.add("token", "exclusive", "give a token or a subscription, not both") }
            if platform != nil && platform != .web {
                r.report.add("subscription", "platform", "a push subscription is a browser's: platform must be web")
            }
            if case .object = s {
                token = WebPushSubscription.tokenForm(of: s)
            } else {
                r.report.add("subscription", "type", "expected the browser's PushSubscription.toJSON() object")
            }
        } else {
            subscribed = false
            token = r.text(o, "token", at: "", required: true, lengths: 1...maxToken)
        }
        let provider =
            r.choice(o, "provider", at: "", among: providers.ids.map(\.rawValue)).map(DeliveryProvider.init(rawValue:))
            ?? (platform == .ios ? .apns : subscribed ? .webPush : .fcm)
        if subscribed && provider != .webPush {
            r.report.add("provider", "subscription", "a push subscription is sent through webpush")
        }
        // The token form of a subscription is a browser's too (the subscription form says so above).
        if !subscribed, provider == .webPush, let p = platform, p != .web {
            r.report.add("platform", "platform", "a Web Push subscription is a browser's: platform must be web")
        }
        if let t = token, let problem = providers[provider]?.tokenProblem(t) {
            r.report.add(subscribed ? "subscription" : "token", problem.rule, problem.message)
        } else if let t = token, provider == .apns, !apnsTokenLengths.contains(t.utf8.count) {
            r.report.add("token", "length", "an APNs token is 16 to 200 hex characters")
        } else if let t = token, provider == .fcm, t.utf8.count > maxFCMToken {
            r.report.add("token", "length", "an FCM token is at most \(maxFCMToken) characters")
        } else if let t = token, provider == .webPush {
            // Stored in one spelling (base64url without padding), so one browser is one device.
            token = (try? WebPushSubscription(token: t, allowHTTP: true))?.token ?? t
        } else if token == nil && subscribed, case .object = o["subscription"] {
            r.report.add("subscription", "webpush-subscription", "endpoint and keys.p256dh, keys.auth are required")
        }
        let userID = userID(o, &r)
        let tags = labels(o, "tags", &r)
        let topics = labels(o, "topics", &r)
        let locale = r.text(o, "locale", at: "", lengths: 1...35, shape: FieldReader.label)
        let timeZone = r.text(o, "time_zone", at: "", lengths: 1...64, shape: FieldReader.label)
        let appVersion = r.text(o, "app_version", at: "", lengths: 1...64, shape: FieldReader.label)
        let permission = r.choice(o, "permission", at: "", Device.Permission.self)
        guard r.report.isValid, let token, let platform else { throw .invalid("the device", r.report) }
        return DeviceBody(
            device: Device(
                appID: appID,
                token: token,
                platform: platform,
                provider: provider,
                userID: userID,
                tags: tags ?? [],
                topics: topics ?? [],
                locale: locale,
                timeZone: timeZone,
                appVersion: appVersion,
                permission: permission
            )
        )
    }
}

/// `POST /v1/apps/{app}/webpush/keys`: the contact push services see, where clicks go by default, and whether an
/// existing key is replaced.
struct WebPushKeyBody {
    var subject: String
    var defaultURL: String?
    var replace: Bool

    static func decode(_ json: JSONValue) throws(APIError) -> WebPushKeyBody {
        var r = FieldReader(strict: true, refusesNUL: true)
        let o = r.body(json, known: ["subject", "default_url", "replace"])
        let subject = r.text(o, "subject", at: "", required: true, lengths: 1...512)
        if let subject, (try? VAPID.checkSubject(subject)) == nil {
            r.report.add(
                "subject",
                "vapid-subject",
                "subject is a mailto: or https: URL push services can reach you at"
            )
        }
        let url = r.text(o, "default_url", at: "", lengths: 1...2048)
        if let url, !(url.lowercased().hasPrefix("https://") && URL(string: url)?.host != nil) {
            r.report.add("default_url", "https-url", "default_url is the https: page a click opens")
        }
        var replace = false
        switch o["replace"] {
        case nil: break
        case .bool(let b)?: replace = b
        case let v?: r.report.add("replace", "type", "expected a boolean, found \(v.typeName)")
        }
        guard r.report.isValid, let subject else { throw .invalid("the VAPID key request", r.report) }
        return WebPushKeyBody(subject: subject, defaultURL: url, replace: replace)
    }
}

/// `POST /v1/apps/{app}/keys`.
struct KeyBody {
    var scopes: Set<APIScope>

    static func decode(_ json: JSONValue) throws(APIError) -> KeyBody {
        var r = FieldReader(strict: true)
        let o = r.body(json, known: ["scopes"])
        var scopes = Set<APIScope>()
        switch o["scopes"] {
        case .array(let a)? where !a.isEmpty && a.count <= APIScope.allCases.count:
            for (i, v) in a.enumerated() {
                guard let s = v.stringValue.flatMap(APIScope.init(rawValue:)) else {
                    r.report.add("scopes[\(i)]", "enum", "a scope is send, manage, read or register")
                    continue
                }
                if !scopes.insert(s).inserted {
                    r.report.add("scopes[\(i)]", "duplicate", "'\(s.rawValue)' is listed twice")
                }
            }
        case nil, .null?:
            r.report.add("scopes", "required", "scopes lists one or more of send, manage, read, register")
        default:
            r.report.add("scopes", "type", "scopes is a list of one to four of send, manage, read, register")
        }
        guard r.report.isValid else { throw .invalid("the key", r.report) }
        return KeyBody(scopes: scopes)
    }
}

/// `POST /v1/media/check`: one URL (`url`, with an optional `kind`) or a list (`media`, 1 to 10 URLs or
/// `{url, kind}`), not both.
struct MediaCheckBody {
    var items: [(url: String, kind: MediaKind?)]

    static let maxItems = 10
    static let urlLengths = 1...2048

    static func decode(_ json: JSONValue) throws(APIError) -> MediaCheckBody {
        var r = FieldReader(strict: true)
        let o = r.body(json, known: ["url", "kind", "media"])
        var items: [(String, MediaKind?)] = []
        switch (o["url"], o["media"]) {
        case (_?, _?):
            r.report.add("media", "exclusive", "give url or media, not both")
        case (_?, nil):
            let url = r.text(o, "url", at: "", lengths: urlLengths)
            let kind = r.choice(o, "kind", at: "", MediaKind.self)
            if let url { items = [(url, kind)] }
        case (nil, let list?):
            if o["kind"] != nil {
                r.report.add("kind", "exclusive", "kind goes with url; in media, each entry names its own")
            }
            guard case .array(let a) = list, (1...maxItems).contains(a.count) else {
                r.report.add("media", "type", "media is a list of 1 to \(maxItems) URLs or {url, kind}")
                break
            }
            for (i, m) in a.enumerated() {
                let path = "media[\(i)]"
                switch m {
                case .string(let u) where urlLengths.contains(u.unicodeScalars.count): items.append((u, nil))
                case .string: r.report.add(path, "length", "a URL is 1 to 2048 characters")
                case .object(let mo):
                    r.rejectUnknown(mo, known: ["url", "kind"], at: path)
                    let url = r.text(mo, "url", at: path, required: true, lengths: urlLengths)
                    let kind = r.choice(mo, "kind", at: path, MediaKind.self)
                    if let url { items.append((url, kind)) }
                default: r.report.add(path, "type", "each entry is a URL or {url, kind}")
                }
            }
        case (nil, nil):
            r.report.add("url", "required", "give url, or media: a list of 1 to \(maxItems) URLs")
        }
        guard r.report.isValid else { throw .invalid("the check", r.report) }
        return MediaCheckBody(items: items)
    }
}

/// `POST /v1/apps/{app}/notifications/{id}/receipts` (an app posts its device's report with a key) and
/// `POST /v1/receipts/{token}` (the device posts to the address its payload carried).
struct ReceiptBody {
    /// The device token (app route) or the device's id (device route).
    var from: String?
    var report: JSONValue

    static func decode(_ json: JSONValue, byApp: Bool) throws(APIError) -> ReceiptBody {
        var r = FieldReader(strict: true, refusesNUL: true)
        let who = byApp ? "token" : "device"
        let o = r.body(json, known: [who, "report"])
        let from =
            byApp
            ? r.text(o, "token", at: "", required: true, lengths: 1...4096)
            : r.text(o, "device", at: "", lengths: 1...200)
        for issue in DeviceReceipts.problems(in: o["report"], at: "report") { r.report.issues.append(issue) }
        guard r.report.isValid, let report = o["report"] else { throw .invalid("the receipt", r.report) }
        return ReceiptBody(from: from, report: report)
    }
}
