import Crypto
import Foundation
import GRDB
import RichPushCore

/// An app that sends through RichPush.
public struct ServerApp: Sendable, Hashable {
    public var id: String
    public var name: String
    public var bundleID: String
    public var fcmProjectID: String?

    public var json: JSONValue {
        var o: [String: JSONValue] = ["id": .string(id), "name": .string(name), "bundle_id": .string(bundleID)]
        if let p = fcmProjectID { o["fcm_project_id"] = .string(p) }
        return .object(o)
    }
}

/// What an API key may do.
public enum APIScope: String, Sendable, Hashable, CaseIterable {
    case send, manage, read
}

/// A notification as accepted: its message, audience and the answer given (replayed for its idempotency key).
public struct StoredNotification: Sendable {
    public var id: String
    public var appID: String
    public var message: JSONValue
    public var response: JSONValue
    public var createdAt: Date
}

/// Apps, API keys and notifications in the server's SQLite database. API keys are stored as SHA-256 hashes;
/// the key itself is shown once, when it is created.
public final class ServerStore: Sendable {
    let pool: DatabasePool

    public init(pool: DatabasePool) throws {
        self.pool = pool
        var m = DatabaseMigrator()
        m.registerMigration("server-v1") { db in
            try db.execute(sql: """
                CREATE TABLE apps (id TEXT PRIMARY KEY, name TEXT NOT NULL, bundle_id TEXT NOT NULL, fcm_project_id TEXT, created_at REAL NOT NULL);
                CREATE TABLE api_keys (key_hash TEXT PRIMARY KEY, app_id TEXT NOT NULL REFERENCES apps(id), scopes TEXT NOT NULL, created_at REAL NOT NULL);
                CREATE TABLE notifications (
                    id TEXT PRIMARY KEY, app_id TEXT NOT NULL, idempotency_key TEXT, message TEXT NOT NULL, response TEXT NOT NULL, created_at REAL NOT NULL,
                    UNIQUE (app_id, idempotency_key));
                """)
        }
        m.registerMigration("receipts-v1") { db in
            try db.execute(sql: """
                CREATE TABLE receipts (
                    notification_id TEXT NOT NULL, token TEXT NOT NULL, report TEXT NOT NULL, received_at REAL NOT NULL,
                    PRIMARY KEY (notification_id, token));
                """)
        }
        try m.migrate(pool)
    }

    /// Stores what a device reported for a notification (the device library's delivery report); a later report
    /// from the same device replaces the earlier.
    public func saveReceipt(notificationID: String, token: String, report: JSONValue) async throws {
        try await pool.write { db in
            try db.execute(sql: "INSERT OR REPLACE INTO receipts (notification_id, token, report, received_at) VALUES (?, ?, ?, ?)",
                arguments: [notificationID, token, report.jsonString, Date().timeIntervalSince1970])
        }
    }

    /// The receipts of a notification by device token.
    public func receipts(notificationID: String) async throws -> [String: JSONValue] {
        try await pool.read { db in
            var out: [String: JSONValue] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT token, report FROM receipts WHERE notification_id = ?", arguments: [notificationID]) {
                out[row["token"]] = (try? JSONValue.parse(row["report"] as String)) ?? .null
            }
            return out
        }
    }

    /// SHA-256 of a key, in hex.
    public static func hash(_ key: String) -> String {
        SHA256.hash(data: Data(key.utf8)).map { String(format: "%02x", $0) }.joined()
    }

    /// A new random API key: `rp_` and 32 random bytes in base64url.
    public static func newKey() -> String {
        var bytes = [UInt8](repeating: 0, count: 32)
        for i in bytes.indices { bytes[i] = UInt8.random(in: 0...255) }
        return "rp_" + Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    /// Creates an app and its first key (all scopes); returns the key, which is not stored.
    public func createApp(name: String, bundleID: String, fcmProjectID: String?) async throws -> (ServerApp, String) {
        let app = ServerApp(id: "app_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(16), name: name, bundleID: bundleID, fcmProjectID: fcmProjectID)
        let key = Self.newKey()
        try await pool.write { db in
            try db.execute(sql: "INSERT INTO apps (id, name, bundle_id, fcm_project_id, created_at) VALUES (?, ?, ?, ?, ?)", arguments: [app.id, app.name, app.bundleID, app.fcmProjectID, Date().timeIntervalSince1970])
            try db.execute(sql: "INSERT INTO api_keys (key_hash, app_id, scopes, created_at) VALUES (?, ?, ?, ?)", arguments: [Self.hash(key), app.id, APIScope.allCases.map(\.rawValue).joined(separator: ","), Date().timeIntervalSince1970])
        }
        return (app, key)
    }

    public func app(id: String) async throws -> ServerApp? {
        try await pool.read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM apps WHERE id = ?", arguments: [id]).map { ServerApp(id: $0["id"], name: $0["name"], bundleID: $0["bundle_id"], fcmProjectID: $0["fcm_project_id"]) }
        }
    }

    /// The app and scopes of a key, looked up by its hash.
    public func authorize(key: String) async throws -> (appID: String, scopes: Set<APIScope>)? {
        let h = Self.hash(key)
        return try await pool.read { db in
            try Row.fetchOne(db, sql: "SELECT app_id, scopes FROM api_keys WHERE key_hash = ?", arguments: [h]).map { row in
                (row["app_id"], Set((row["scopes"] as String).split(separator: ",").compactMap { APIScope(rawValue: String($0)) }))
            }
        }
    }

    /// Stores a notification unless the app already sent one with this idempotency key; returns the stored one and
    /// whether it is new.
    public func insertNotification(_ n: StoredNotification, idempotencyKey: String?) async throws -> (StoredNotification, created: Bool) {
        try await pool.write { db in
            if let key = idempotencyKey,
                let row = try Row.fetchOne(db, sql: "SELECT * FROM notifications WHERE app_id = ? AND idempotency_key = ?", arguments: [n.appID, key])
            {
                return (try Self.notification(row), false)
            }
            try db.execute(sql: "INSERT INTO notifications (id, app_id, idempotency_key, message, response, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                arguments: [n.id, n.appID, idempotencyKey, n.message.jsonString, n.response.jsonString, n.createdAt.timeIntervalSince1970])
            return (n, true)
        }
    }

    public func notification(id: String) async throws -> StoredNotification? {
        try await pool.read { db in try Row.fetchOne(db, sql: "SELECT * FROM notifications WHERE id = ?", arguments: [id]).map(Self.notification) }
    }

    /// The message of a notification, for the workers.
    public func message(id: String) async throws -> PushMessage? {
        guard let n = try await notification(id: id) else { return nil }
        return try? PushMessage.decode(n.message)
    }

    static func notification(_ row: Row) throws -> StoredNotification {
        StoredNotification(
            id: row["id"], appID: row["app_id"], message: try JSONValue.parse(row["message"] as String), response: try JSONValue.parse(row["response"] as String),
            createdAt: Date(timeIntervalSince1970: row["created_at"]))
    }
}
