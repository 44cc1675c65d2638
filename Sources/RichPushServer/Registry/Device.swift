import Foundation

/// A registered device of an app.
public struct Device: Sendable, Hashable {
    public enum Platform: String, Sendable, Hashable, CaseIterable { case ios, android, web }

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
    /// When the device last registered (APNs' 410 timestamp is compared with it before pruning).
    public var updatedAt: Date

    public init(appID: String, token: String, platform: Platform, provider: DeliveryProvider? = nil, userID: String? = nil, tags: [String] = [], topics: [String] = [], locale: String? = nil, timeZone: String? = nil, appVersion: String? = nil, updatedAt: Date = Date()) {
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
        self.updatedAt = updatedAt
    }
}

/// Whom a notification goes to, among an app's registered devices.
public enum Audience: Sendable, Hashable {
    case all
    case user(String)
    case tag(String)
    case topic(String)
    case tokens([String])
}

/// The devices of every app. Reads are pages in a stable order (a cursor of row ids) so that a fan-out to
/// millions of devices streams with bounded memory.
public protocol DeviceRegistry: Sendable {
    /// Registers or updates a device (by app and token).
    func upsert(_ device: Device) async throws

    /// Removes a device; false when it was not registered.
    @discardableResult
    func remove(appID: String, token: String) async throws -> Bool

    func device(appID: String, token: String) async throws -> Device?

    /// Up to `limit` devices of the audience after the cursor, with the cursor for the next page.
    func page(appID: String, audience: Audience, after cursor: Int64, limit: Int) async throws -> (devices: [Device], next: Int64?)

    /// Removes a token the provider reported gone, unless it registered again after `invalidSince`
    /// (APNs' 410 timestamp). Returns whether it was removed.
    @discardableResult
    func prune(appID: String, token: String, invalidSince: Date?) async throws -> Bool

    func count(appID: String) async throws -> Int
}
