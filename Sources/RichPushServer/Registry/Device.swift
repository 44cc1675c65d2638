import Foundation
import RichPushCore

/// A registered device of an app.
public struct Device: Sendable, Hashable {
    public enum Platform: String, Sendable, Hashable, CaseIterable { case ios, android, web }
    /// Where the device's permission to show notifications stands, as its app last reported it: iOS's
    /// authorization status (authorized, denied, provisional, ephemeral, not determined); Android's
    /// POST_NOTIFICATIONS and a browser's `Notification.permission` map to authorized, denied and not determined.
    public enum Permission: String, Sendable, Hashable, CaseIterable {
        case authorized, denied, provisional, ephemeral
        case notDetermined = "not_determined"
    }

    public var appID: String
    /// The APNs device token or FCM registration token.
    public var token: String
    public var platform: Platform
    /// How it is reached: APNs for iOS tokens registered directly, FCM otherwise.
    public var provider: DeliveryProvider
    public var userID: String?
    public var tags: [String]
    public var topics: [String]
    public var locale: String?
    public var timeZone: String?
    public var appVersion: String?
    /// Nil when the app did not say.
    public var permission: Permission?
    /// When the device last registered (APNs' 410 timestamp is compared with it before pruning).
    public var updatedAt: Date

    public init(
        appID: String,
        token: String,
        platform: Platform,
        provider: DeliveryProvider? = nil,
        userID: String? = nil,
        tags: [String] = [],
        topics: [String] = [],
        locale: String? = nil,
        timeZone: String? = nil,
        appVersion: String? = nil,
        permission: Permission? = nil,
        updatedAt: Date = Date()
    ) {
        self.appID = appID
        self.token = token
        self.platform = platform
        self.provider = provider ?? (platform == .ios ? .apns : .fcm)
        self.userID = userID
        self.tags = tags
        self.topics = topics
        self.locale = locale
        self.timeZone = timeZone
        self.appVersion = appVersion
        self.permission = permission
        self.updatedAt = updatedAt
    }
}

/// Whom a notification goes to: an app's registered devices (all, a user's, a tag's, a topic's, or registered
/// tokens), tokens given with their provider whether registered or not, or an FCM topic or condition, which FCM
/// fans out itself (one request).
public enum Audience: Sendable, Hashable {
    case all
    case user(String)
    case tag(String)
    case topic(String)
    case tokens([String])
    /// Tokens sent to as given, registered or not.
    case providerTokens(apns: [String], fcm: [String])
    case fcmTopic(String)
    case fcmCondition(String)
    /// A Live Activity broadcast channel: one request, and APNs reaches every device listening.
    case apnsChannel(String)

    /// Whether text is a broadcast channel id as APNs writes them (base64, at most 128 characters): what the API
    /// takes in a send's audience and in a channel route's path, and so what reaches a request header.
    public static func isChannelID(_ id: String) -> Bool {
        (1...128).contains(id.utf8.count)
            && id.unicodeScalars.allSatisfy { c in
                switch c {
                case "A"..."Z", "a"..."z", "0"..."9", "+", "/", "=", "_", "-": return true
                default: return false
                }
            }
    }

    /// Whether deliveries may go through APNs.
    public var mayUseAPNs: Bool {
        switch self {
        case .fcmTopic, .fcmCondition: return false
        case .providerTokens(let apns, _): return !apns.isEmpty
        default: return true
        }
    }

    /// The kind of FCM target deliveries may use (a topic message is held to 2,048 bytes, a token's to 4,096);
    /// nil when none goes through FCM.
    public var fcmTargetKind: FCMTarget? {
        switch self {
        case .fcmTopic(let t): return .topic(t)
        case .fcmCondition(let c): return .condition(c)
        case .apnsChannel: return nil
        case .providerTokens(_, let fcm): return fcm.isEmpty ? nil : .token("t")
        default: return .token("t")
        }
    }

    /// Whether the deliveries are known without reading the registry page by page (a handful of rows).
    public var isSmall: Bool {
        switch self {
        case .tokens, .providerTokens, .fcmTopic, .fcmCondition, .apnsChannel: return true
        case .all, .user, .tag, .topic: return false
        }
    }

    /// The deliveries of an audience that needs no registry lookup; nil for the others.
    public var directTargets: [(DeliveryProvider, DeliveryTarget)]? {
        switch self {
        case let .providerTokens(apns, fcm): return apns.map { (.apns, .token($0)) } + fcm.map { (.fcm, .token($0)) }
        case .fcmTopic(let t): return [(.fcm, .topic(t))]
        case .fcmCondition(let c): return [(.fcm, .condition(c))]
        // An APNs delivery to a topic is a broadcast on the channel (APNs has no topics of its own).
        case .apnsChannel(let id): return [(.apns, .topic(id))]
        default: return nil
        }
    }

    /// As stored with the notification (so that an interrupted fan-out resumes).
    public var json: JSONValue {
        switch self {
        case .all: return ["all": true]
        case .user(let u): return ["user": .string(u)]
        case .tag(let t): return ["tag": .string(t)]
        case .topic(let t): return ["topic": .string(t)]
        case .tokens(let ts): return ["tokens": .array(ts.map { .string($0) })]
        case let .providerTokens(a, f):
            return ["apns_tokens": .array(a.map { .string($0) }), "fcm_tokens": .array(f.map { .string($0) })]
        case .fcmTopic(let t): return ["fcm_topic": .string(t)]
        case .fcmCondition(let c): return ["fcm_condition": .string(c)]
        case .apnsChannel(let id): return ["apns_channel": .string(id)]
        }
    }

    /// Reads the API's `audience` object; the second value names the problem when it is not one.
    public static func read(_ value: JSONValue) -> (Audience?, String?) {
        guard case .object(let a) = value else { return (nil, "audience must be an object") }
        let kinds = a.keys.filter {
            [
                "all", "user", "tag", "topic", "tokens", "apns_tokens", "fcm_tokens", "fcm_topic", "fcm_condition",
                "apns_channel",
            ]
            .contains($0)
        }
        let direct = Set(kinds).isSubset(of: ["apns_tokens", "fcm_tokens"]) && !kinds.isEmpty
        guard kinds.count == 1 || direct else {
            return (
                nil,
                kinds.isEmpty
                    ? "give one of all, user, tag, topic, tokens, apns_tokens/fcm_tokens, fcm_topic, fcm_condition"
                    : "give only one of \(kinds.sorted().joined(separator: ", "))"
            )
        }
        func string(_ k: String) -> (Audience?, String?)? {
            guard let v = a[k] else { return nil }
            guard let s = v.stringValue, !s.isEmpty else { return (nil, "audience.\(k) must be a non-empty string") }
            switch k {
            case "user": return (.user(s), nil)
            case "tag": return (.tag(s), nil)
            case "topic": return (.topic(s), nil)
            case "fcm_topic": return (.fcmTopic(s), nil)
            case "apns_channel": return (.apnsChannel(s), nil)
            default: return (.fcmCondition(s), nil)
            }
        }
        func list(_ k: String) -> [String]? { a[k]?.arrayValue?.compactMap(\.stringValue) }
        if let all = a["all"] { return all.boolValue == true ? (.all, nil) : (nil, "audience.all must be true") }
        for k in ["user", "tag", "topic", "fcm_topic", "fcm_condition", "apns_channel"] {
            if let r = string(k) { return r }
        }
        if a["tokens"] != nil {
            guard let ts = list("tokens"), !ts.isEmpty, ts.count == a["tokens"]?.arrayValue?.count else {
                return (nil, "audience.tokens must be a non-empty array of strings")
            }
            return (.tokens(ts), nil)
        }
        let apns = list("apns_tokens") ?? []
        let fcm = list("fcm_tokens") ?? []
        guard !(apns.isEmpty && fcm.isEmpty) else {
            return (nil, "audience.apns_tokens/fcm_tokens must hold at least one token")
        }
        return (.providerTokens(apns: apns, fcm: fcm), nil)
    }
}

/// The devices of every app. Reads are pages in a stable order (a cursor of row ids) so that a fan-out to
/// millions of devices streams with bounded memory.
public protocol DeviceRegistry: Sendable {
    /// Registers or updates a device (by app and token).
    func upsert(_ device: Device) async throws

    /// Registers a device within `limits` (``RegistrationLimits``): a new token past the app's bound is refused with
    /// ``QuotaReached``; past the user's bound the user's least recently registered devices go. With `owner`
    /// ``RegistrationOwner/keepsKnown`` a token already registered keeps its user id (a new one gets none).
    func register(_ device: Device, owner: RegistrationOwner, limits: RegistrationLimits) async throws

    /// Many devices in one transaction where the backend has them (imports, benchmarks).
    func upsert(contentsOf devices: [Device]) async throws

    /// Removes a device; false when it was not registered.
    @discardableResult
    func remove(appID: String, token: String) async throws -> Bool

    func device(appID: String, token: String) async throws -> Device?

    /// Up to `limit` devices of the audience after the cursor, with the cursor for the next page.
    func page(
        appID: String,
        audience: Audience,
        after cursor: Int64,
        limit: Int
    ) async throws -> (devices: [Device], next: Int64?)

    /// Removes a token the provider reported gone, unless it registered again after `invalidSince`
    /// (APNs' 410 timestamp). Returns whether it was removed.
    @discardableResult
    func prune(appID: String, token: String, invalidSince: Date?) async throws -> Bool

    func count(appID: String) async throws -> Int

    /// An app's devices by the permission their app last reported (`unknown`: it did not say).
    func permissions(appID: String) async throws -> [String: Int]

    /// An app's devices whose token starts with `query`, or whose user id or one of whose tags is `query`, in
    /// registration order after the cursor, with the cursor for the next page (a console's search).
    func search(
        appID: String,
        matching query: String,
        after cursor: Int64,
        limit: Int
    ) async throws -> (devices: [Device], next: Int64?)
}

/// A device as the API lists it (the token is the app's own; a registry search shows it).
extension Device {
    public var json: JSONValue {
        var o: [String: JSONValue] = [
            "token": .string(token), "platform": .string(platform.rawValue), "provider": .string(provider.rawValue),
            "tags": .array(tags.map { .string($0) }), "topics": .array(topics.map { .string($0) }),
            "updated_at": .string(ISO8601DateFormatter().string(from: updatedAt)),
        ]
        if let userID { o["user_id"] = .string(userID) }
        if let locale { o["locale"] = .string(locale) }
        if let timeZone { o["time_zone"] = .string(timeZone) }
        if let appVersion { o["app_version"] = .string(appVersion) }
        if let permission { o["permission"] = .string(permission.rawValue) }
        return .object(o)
    }
}

extension DeviceRegistry {
    /// One at a time, for registries without a batch form.
    public func upsert(contentsOf devices: [Device]) async throws {
        for d in devices { try await upsert(d) }
    }
}
