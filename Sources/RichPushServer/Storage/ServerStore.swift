import Crypto
import Foundation
import RichPushCore
import RichPushWebPush

/// An app's APNs token-auth credentials: the `.p8` key, its key id, the team, and which APNs environment.
public struct APNsCredentials: Sendable, Hashable {
    public enum Environment: String, Sendable, Hashable, CaseIterable { case production, development }
    public var keyPEM: String
    public var keyID: String
    public var teamID: String
    public var environment: Environment

    public init(keyPEM: String, keyID: String, teamID: String, environment: Environment) {
        self.keyPEM = keyPEM
        self.keyID = keyID
        self.teamID = teamID
        self.environment = environment
    }

    /// What responses show: never the key.
    public var publicJSON: JSONValue {
        ["key_id": .string(keyID), "team_id": .string(teamID), "environment": .string(environment.rawValue)]
    }
}

/// An app's FCM credentials: a Google service account (JSON, with its private key).
public struct FCMCredentials: Sendable, Hashable {
    public var serviceAccountJSON: String
    public var projectID: String
    public var clientEmail: String

    public init(serviceAccountJSON: String, projectID: String, clientEmail: String) {
        self.serviceAccountJSON = serviceAccountJSON
        self.projectID = projectID
        self.clientEmail = clientEmail
    }

    /// What responses show: never the private key.
    public var publicJSON: JSONValue { ["project_id": .string(projectID), "client_email": .string(clientEmail)] }
}

/// An app's VAPID key for Web Push (RFC 8292): made by the server, the private key sealed like other credentials;
/// the public key is what a site gives `pushManager.subscribe` as its `applicationServerKey`.
public struct WebPushCredentials: Sendable, Hashable {
    /// The P-256 private key's 32 bytes.
    public var privateKey: [UInt8]
    /// The contact push services see: `mailto:` or `https:`.
    public var subject: String
    /// Where a click goes when a message has no https deep link (the site).
    public var defaultURL: String?

    public init(privateKey: [UInt8], subject: String, defaultURL: String? = nil) {
        self.privateKey = privateKey
        self.subject = subject
        self.defaultURL = defaultURL
    }

    /// The public key in the form sites and the `k=` parameter use: the uncompressed point in base64url; nil when
    /// `privateKey` is not a P-256 private key (the credential store refuses to read such a key back, and the API
    /// only makes keys, so only a value made in code can be one).
    public var publicKey: String? {
        guard let key = try? P256.Signing.PrivateKey(rawRepresentation: privateKey) else { return nil }
        return VAPID.publicKey(key.publicKey)
    }

    /// What responses show: never the private key.
    public var publicJSON: JSONValue {
        var o: [String: JSONValue] = [
            "public_key": publicKey.map(JSONValue.string) ?? .null, "subject": .string(subject),
        ]
        if let d = defaultURL { o["default_url"] = .string(d) }
        return .object(o)
    }
}

/// An app that sends through RichPush.
public struct ServerApp: Sendable, Hashable {
    public var id: String
    public var name: String
    public var bundleID: String
    /// The FCM project: the service account's, or one named without credentials (sandbox).
    public var fcmProjectID: String?
    public var apns: APNsCredentials?
    public var fcm: FCMCredentials?
    public var webPush: WebPushCredentials?
    /// Bumped on every change, so that provider clients built from old credentials are replaced.
    public var revision: Int

    public init(
        id: String,
        name: String,
        bundleID: String,
        fcmProjectID: String? = nil,
        apns: APNsCredentials? = nil,
        fcm: FCMCredentials? = nil,
        webPush: WebPushCredentials? = nil,
        revision: Int = 1
    ) {
        self.id = id
        self.name = name
        self.bundleID = bundleID
        self.fcmProjectID = fcm?.projectID ?? fcmProjectID
        self.apns = apns
        self.fcm = fcm
        self.webPush = webPush
        self.revision = revision
    }

    /// The app as responses show it: credentials are described, never returned.
    public var json: JSONValue {
        var o: [String: JSONValue] = [
            "id": .string(id), "name": .string(name), "bundle_id": .string(bundleID), "revision": .int(Int64(revision)),
        ]
        if let p = fcmProjectID { o["fcm_project_id"] = .string(p) }
        o["apns"] = apns?.publicJSON ?? .null
        o["fcm"] = fcm?.publicJSON ?? .null
        o["webpush"] = webPush?.publicJSON ?? .null
        return .object(o)
    }

    static func newID() -> String {
        "app_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(16)
    }
}

/// A key as the API lists it: its id, scopes and when it was made.
public struct APIKeyInfo: Sendable, Hashable {
    public var keyID: String
    public var scopes: Set<APIScope>
    public var createdAt: Date

    public var json: JSONValue {
        [
            "id": .string(keyID),
            "scopes": .array(APIScope.allCases.filter(scopes.contains).map { .string($0.rawValue) }),
            "created_at": .string(ISO8601DateFormatter().string(from: createdAt)),
        ]
    }
}

/// What an API key may do.
public enum APIScope: String, Sendable, Hashable, CaseIterable {
    case send, manage, read
    /// Registering devices only: the key a web page or an app ships (anyone can read it there).
    case register

    /// Scopes as a database column keeps them: their names in documented order, comma-separated.
    static func column(_ scopes: Set<APIScope>) -> String {
        allCases.filter(scopes.contains).map(\.rawValue).joined(separator: ",")
    }
    static func parse(_ column: String) -> Set<APIScope> {
        Set(column.split(separator: ",").compactMap { APIScope(rawValue: String($0)) })
    }
}

/// What a key grants: its app and scopes. `keyID` names the key in the API (it is a prefix of the key's hash).
public struct APIGrant: Sendable, Hashable {
    public var keyID: String
    public var appID: String
    public var scopes: Set<APIScope>

    /// A key that ships in pages and apps (`register`, without `send` or `manage`): anyone may hold it, so its
    /// requests are also limited per client address, and its registrations speak for one device (``Registrant``).
    public var isPublic: Bool { scopes.contains(.register) && scopes.isDisjoint(with: [.send, .manage]) }
}

/// A notification as accepted: its message, audience and the answer given (replayed for its idempotency key).
public struct StoredNotification: Sendable {
    public var id: String
    public var appID: String
    public var message: JSONValue
    public var response: JSONValue
    public var createdAt: Date

    public init(id: String, appID: String, message: JSONValue, response: JSONValue, createdAt: Date) {
        self.id = id
        self.appID = appID
        self.message = message
        self.response = response
        self.createdAt = createdAt
    }
}

/// Apps, their API keys (stored as hashes) and the server's secrets.
public protocol AppStore: Sendable {
    /// Creates an app and its first key (all scopes); returns the key, which is not stored.
    func createApp(_ app: ServerApp) async throws -> (ServerApp, key: String)
    /// Replaces an app's name, bundle id and credentials; bumps its revision. nil when there is no such app.
    func updateApp(_ app: ServerApp) async throws -> ServerApp?
    func app(id: String) async throws -> ServerApp?
    /// Apps in id order, those after `after` (the admin's list).
    func apps(after: String, limit: Int) async throws -> [ServerApp]
    /// Removes the app, its keys and its small tables (identity keys, counts, upload days) in one transaction, and
    /// forgets it on every node; false when there was none. ``StorageBackend/deleteApp(id:)`` empties the large
    /// tables first.
    func removeApp(id: String) async throws -> Bool

    /// A new key for an app with these scopes; returns its grant and the key, which is not stored. An app has at
    /// most ``APIKeys/maxPerApp`` keys: past that, ``APIKeys/LimitReached``.
    func createKey(appID: String, scopes: Set<APIScope>) async throws -> (APIGrant, key: String)
    /// Revokes a key by its id; false when the app has no such key.
    func revokeKey(appID: String, keyID: String) async throws -> Bool
    /// The grant of a key, looked up by the key's SHA-256 (``APIKeys/hash(_:)``).
    func authorize(keyHash: String) async throws -> APIGrant?
    /// Whether this node has found this key valid lately, without database work (the key cache, whatever the age of
    /// its entry): such a key is looked up even from an address that failed too often, so clients behind one
    /// address as a flood of made-up keys are not shut out with it.
    func isKnownKey(keyHash: String) async -> Bool
    /// A page of an app's keys as the API lists them (never a key itself), by key id: those after `after`, at
    /// most `limit`.
    func keys(appID: String, after: String, limit: Int) async throws -> [APIKeyInfo]

    /// An app's identity keys (``IdentityKey``), oldest first: read on every registration that carries a proof, so
    /// kept briefly like grants (a key deleted through another node is forgotten within a second on PostgreSQL).
    func identityKeys(appID: String) async throws -> [IdentityKey]
    /// Adds a key; ``IdentityKeys/LimitReached`` when the app holds ``IdentityKeys/maxPerApp`` already,
    /// ``IdentityKeys/Exists`` when it holds this one.
    func addIdentityKey(_ key: IdentityKey) async throws
    /// Deletes a key by its id; false when the app has none such.
    func removeIdentityKey(appID: String, keyID: String) async throws -> Bool

    /// A random 32-byte secret of the server's, made on first use and the same ever after (receipt tokens are
    /// signed with one, so they stay valid across restarts and on every node).
    func secret(named name: String) async throws -> [UInt8]
}

/// Accepted notifications: their messages and first answers (replayed for their idempotency keys).
public protocol NotificationStore: Sendable {
    /// Stores a notification unless the app already sent one with this idempotency key; returns the stored one
    /// and whether it is new.
    func insertNotification(
        _ n: StoredNotification,
        idempotencyKey: String?
    ) async throws -> (StoredNotification, created: Bool)
    func notification(id: String) async throws -> StoredNotification?
    /// An app's notifications, newest first: those accepted before `before` (nil: from the newest), at most `limit`.
    /// Newest first, created before `before` (seconds since 1970, compared as the number `next_before` gave).
    func notifications(appID: String, before: Double?, limit: Int) async throws -> [StoredNotification]
}

/// The stores a backend keeps in one database: apps and keys, notifications (the registry, the queue, receipts and
/// shared media have protocols of their own). `SQLiteServerStore`, `PostgresServerStore` and the in-memory
/// `MemoryServerStore` answer alike (one conformance suite).
public protocol ServerStore: AppStore, NotificationStore {}

extension ServerStore {
    /// The grant of a key.
    public func authorize(key: String) async throws -> APIGrant? { try await authorize(keyHash: APIKeys.hash(key)) }
    /// The message of a notification, for the workers.
    public func message(id: String) async throws -> PushMessage? {
        guard let n = try await notification(id: id) else { return nil }
        return try PushMessage.decode(n.message)
    }
}

/// Keys: how they are made and hashed.
public enum APIKeys {
    /// Keys one app may hold at once (revoking one makes room).
    public static let maxPerApp = 100

    /// An app holds ``maxPerApp`` keys already.
    public struct LimitReached: Error {}

    /// SHA-256 of a key, in lowercase hex.
    public static func hash(_ key: String) -> String { lowercaseHex(SHA256.hash(data: Data(key.utf8))) }

    static func lowercaseHex(_ bytes: some Sequence<UInt8>) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(64)
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 15)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The id a key is known by: the first 12 hex digits of its hash.
    public static func id(ofHash hash: String) -> String { "key_" + hash.prefix(12) }

    /// A new random API key: `rp_` and 32 random bytes in base64url.
    public static func newKey() -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
        return "rp_"
            + Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(
                of: "/",
                with: "_"
            ).replacingOccurrences(of: "=", with: "")
    }
}
