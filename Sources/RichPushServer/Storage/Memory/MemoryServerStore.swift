import Foundation
import RichPushCore

/// The in-memory twin of ``SQLiteServerStore``, for fast unit tests: same rules, nothing survives a restart.
public actor MemoryServerStore: ServerStore {
    private var apps: [String: ServerApp] = [:]
    private var keys: [String: APIGrant] = [:]  // by hash
    private var keyTimes: [String: Date] = [:]  // by hash
    private var notifications: [String: StoredNotification] = [:]
    private var idempotency: [String: String] = [:]  // "app\0key" → notification id

    public init() {}

    public func createApp(_ app: ServerApp) -> (ServerApp, key: String) {
        var app = app
        if app.id.isEmpty { app.id = ServerApp.newID() }
        app.revision = 1
        apps[app.id] = app
        let key = APIKeys.newKey()
        let hash = APIKeys.hash(key)
        keys[hash] = APIGrant(keyID: APIKeys.id(ofHash: hash), appID: app.id, scopes: Set(APIScope.allCases))
        keyTimes[hash] = Date()
        return (app, key)
    }

    public func updateApp(_ app: ServerApp) -> ServerApp? {
        guard let old = apps[app.id] else { return nil }
        var app = app
        app.revision = old.revision + 1
        apps[app.id] = app
        return app
    }

    public func app(id: String) -> ServerApp? { apps[id] }

    public func apps(after: String, limit: Int) -> [ServerApp] {
        Array(apps.values.filter { $0.id > after }.sorted { $0.id < $1.id }.prefix(max(0, limit)))
    }

    /// Apps deleted lately, with when (``AppDeletion``).
    private var deletedApps: [String: Date] = [:]

    func watchedDeletions() -> [String] { Array(deletedApps.keys) }

    func forgetDeletions(before cutoff: Date) { deletedApps = deletedApps.filter { $0.value >= cutoff } }

    public func removeApp(id: String) -> Bool {
        deletedApps[id] = Date()
        removeKeys(of: id)
        return apps.removeValue(forKey: id) != nil
    }

    /// An app's keys and identity keys.
    func removeKeys(of id: String) {
        for (hash, grant) in keys where grant.appID == id {
            keys[hash] = nil
            keyTimes[hash] = nil
        }
        identity[id] = nil
    }

    /// Every notification's id.
    func notificationIDs() -> Set<String> { Set(notifications.keys) }

    /// Some of an app's notifications (a deletion's next chunk).
    func notificationIDs(appID: String, limit: Int) -> [String] {
        Array(notifications.values.lazy.filter { $0.appID == appID }.prefix(limit).map(\.id))
    }

    public func createKey(appID: String, scopes: Set<APIScope>) throws -> (APIGrant, key: String) {
        guard keys.values.count(where: { $0.appID == appID }) < APIKeys.maxPerApp else { throw APIKeys.LimitReached() }
        let key = APIKeys.newKey()
        let hash = APIKeys.hash(key)
        let grant = APIGrant(keyID: APIKeys.id(ofHash: hash), appID: appID, scopes: scopes)
        keys[hash] = grant
        keyTimes[hash] = Date()
        return (grant, key)
    }

    public func revokeKey(appID: String, keyID: String) -> Bool {
        guard let hash = keys.first(where: { $0.value.appID == appID && $0.value.keyID == keyID })?.key else {
            return false
        }
        keys[hash] = nil
        return true
    }

    public func authorize(keyHash: String) -> APIGrant? {
        let grant = keys[keyHash]
        if grant != nil { looked.insert(keyHash) }
        return grant
    }

    /// As the databases' key cache: a key counts as known once it was looked up and found.
    public func isKnownKey(keyHash: String) -> Bool { keys[keyHash] != nil && looked.contains(keyHash) }
    private var looked: Set<String> = []

    public func keys(appID: String, after: String, limit: Int) -> [APIKeyInfo] {
        Array(
            keys.filter { $0.value.appID == appID && $0.value.keyID > after }
                .map {
                    APIKeyInfo(
                        keyID: $0.value.keyID,
                        scopes: $0.value.scopes,
                        createdAt: keyTimes[$0.key] ?? .distantPast
                    )
                }
                .sorted { $0.keyID < $1.keyID }
                .prefix(max(0, limit))
        )
    }

    public func notifications(appID: String, before: Double?, limit: Int) -> [StoredNotification] {
        let kept = notifications.values.filter { n in
            n.appID == appID && (before.map { n.createdAt.timeIntervalSince1970 < $0 } ?? true)
        }
        return Array(kept.sorted { ($0.createdAt, $0.id) > ($1.createdAt, $1.id) }.prefix(max(0, limit)))
    }

    public func insertNotification(
        _ n: StoredNotification,
        idempotencyKey: String?
    ) -> (StoredNotification, created: Bool) {
        if let key = idempotencyKey, let id = idempotency[n.appID + "\u{0}" + key], let first = notifications[id] {
            return (first, false)
        }
        notifications[n.id] = n
        if let key = idempotencyKey { idempotency[n.appID + "\u{0}" + key] = n.id }
        return (n, true)
    }

    /// The notification an app stored with an idempotency key.
    func notification(appID: String, key: String) -> StoredNotification? {
        idempotency[appID + "\u{0}" + key].flatMap { notifications[$0] }
    }

    /// Notifications accepted before the cut-off, oldest first (the sweep's candidates).
    func notifications(before cutoff: Date, limit: Int) -> [String] {
        notifications.values.filter { $0.createdAt < cutoff }.sorted { $0.createdAt < $1.createdAt }.prefix(limit).map(
            \.id
        )
    }

    func removeNotification(id: String) {
        notifications[id] = nil
        for (key, value) in idempotency where value == id { idempotency[key] = nil }
    }

    public func notification(id: String) -> StoredNotification? { notifications[id] }

    private var identity: [String: [IdentityKey]] = [:]  // by app, oldest first

    public func identityKeys(appID: String) -> [IdentityKey] { identity[appID] ?? [] }

    public func addIdentityKey(_ key: IdentityKey) throws {
        let held = identity[key.appID] ?? []
        if held.contains(where: { $0.keyID == key.keyID }) { throw IdentityKeys.Exists() }
        guard held.count < IdentityKeys.maxPerApp else { throw IdentityKeys.LimitReached() }
        identity[key.appID] = held + [key]
    }

    public func removeIdentityKey(appID: String, keyID: String) -> Bool {
        guard let held = identity[appID], held.contains(where: { $0.keyID == keyID }) else { return false }
        identity[appID] = held.filter { $0.keyID != keyID }
        return true
    }

    private var secrets: [String: [UInt8]] = [:]
    public func secret(named name: String) -> [UInt8] {
        if let s = secrets[name] { return s }
        let fresh = (0..<32).map { _ in UInt8.random(in: 0...255) }
        secrets[name] = fresh
        return fresh
    }
}
