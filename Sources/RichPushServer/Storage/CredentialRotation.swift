import Crypto
import Foundation
import GRDB
import PostgresNIO

/// A new credentials key for a database: every sealed value (apps' APNs, FCM and VAPID credentials, the server's
/// secrets such as the receipt signing key) opened with the old key and sealed with the new one, in one transaction,
/// and on PostgreSQL the key's check value replaced. `richpush rotate-credentials-key` runs it with every node
/// stopped (a node still running holds the old key and could no longer open what it reads); the new key file then
/// goes to every node before they start (docs/operations.md, "Rotating keys").
public enum CredentialRotation {
    /// What a rotation changed.
    public struct Result: Sendable, Equatable {
        public var apps = 0
        public var secrets = 0
        /// Webhook endpoints whose signing secrets were sealed again.
        public var webhooks = 0
    }

    /// The check value a database keeps of its key (PostgreSQL): a node with another key refuses to start.
    static func check(_ sealer: CredentialSealer) -> Data {
        Data(HMAC<SHA256>.authenticationCode(for: Data("richpush credentials key".utf8), using: sealer.key))
    }

    /// A stored text under the new key; nil when it is not sealed (it is sealed at the next start, with the key the
    /// node then has) or already opens with the new key: a second run mends a database where a node still running
    /// with the old key sealed something after the first.
    static func resealed(_ stored: String?, from old: CredentialSealer, to new: CredentialSealer) throws -> String? {
        guard let stored, CredentialSealer.isSealed(stored) else { return nil }
        do {
            return try new.seal(try old.open(stored))
        } catch {
            if (try? new.open(stored)) != nil { return nil }
            throw error
        }
    }

    /// Rotates an SQLite database's credentials key.
    public static func rotate(pool: DatabasePool, from old: CredentialSealer, to new: CredentialSealer) throws -> Result
    {
        try pool.write { db in
            var result = Result()
            for row in try Row.fetchAll(db, sql: "SELECT id, apns, fcm, webpush FROM apps") {
                let columns: [String?] = [row["apns"], row["fcm"], row["webpush"]]
                let sealed = try columns.map { try resealed($0, from: old, to: new) }
                guard sealed.contains(where: { $0 != nil }) else { continue }
                try db.execute(
                    sql: "UPDATE apps SET apns = ?, fcm = ?, webpush = ? WHERE id = ?",
                    arguments: [sealed[0] ?? columns[0], sealed[1] ?? columns[1], sealed[2] ?? columns[2], row["id"]]
                )
                result.apps += 1
            }
            for row in try Row.fetchAll(db, sql: "SELECT name, value FROM secrets") {
                let value: Data = row["value"]
                guard let text = try resealed(String(decoding: value, as: UTF8.self), from: old, to: new) else {
                    continue
                }
                try db.execute(
                    sql: "UPDATE secrets SET value = ? WHERE name = ?",
                    arguments: [Data(text.utf8), row["name"] as String]
                )
                result.secrets += 1
            }
            let hasWebhooks =
                try Bool.fetchOne(
                    db,
                    sql: "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'webhook_endpoints'"
                ) ?? false
            guard hasWebhooks else { return result }
            for row in try Row.fetchAll(db, sql: "SELECT id, secret, previous_secret FROM webhook_endpoints") {
                let columns: [String?] = [row["secret"], row["previous_secret"]]
                let sealed = try columns.map { try resealed($0, from: old, to: new) }
                guard sealed.contains(where: { $0 != nil }) else { continue }
                try db.execute(
                    sql: "UPDATE webhook_endpoints SET secret = ?, previous_secret = ? WHERE id = ?",
                    arguments: [sealed[0] ?? columns[0], sealed[1] ?? columns[1], row["id"] as String]
                )
                result.webhooks += 1
            }
            return result
        }
    }

    /// Rotates a PostgreSQL database's credentials key: refused when the old key is not the one the database
    /// checks against.
    public static func rotate(
        db: PostgresDatabase,
        from old: CredentialSealer,
        to new: CredentialSealer
    ) async throws
        -> Result
    {
        let logger = db.logger
        return try await db.transaction { c in
            var result = Result()
            let checked = try await c.query(
                "SELECT value FROM secrets WHERE name = 'credentials-key-check' FOR UPDATE",
                logger: logger
            ).collect()
            // A database already on the new key (a second run, to mend what a node still running sealed with the
            // old key after the first) is taken too.
            if let stored = try checked.first?.decode(Data.self), stored != check(old), stored != check(new) {
                throw CredentialSealer.Problem(
                    description: "\(old.source) is not the key this database's credentials are sealed with"
                )
            }
            for row in try await c.query("SELECT id, apns, fcm, webpush FROM apps FOR UPDATE", logger: logger).collect()
            {
                let (id, apns, fcm, webPush) = try row.decode((String, String?, String?, String?).self)
                let columns = [apns, fcm, webPush]
                let sealed = try columns.map { try resealed($0, from: old, to: new) }
                guard sealed.contains(where: { $0 != nil }) else { continue }
                let (a, f, w) = (sealed[0] ?? columns[0], sealed[1] ?? columns[1], sealed[2] ?? columns[2])
                _ = try await c.query(
                    "UPDATE apps SET apns = \(a), fcm = \(f), webpush = \(w) WHERE id = \(id)",
                    logger: logger
                ).collect()
                result.apps += 1
            }
            let secrets = try await c.query(
                "SELECT name, value FROM secrets WHERE name <> 'credentials-key-check' FOR UPDATE",
                logger: logger
            ).collect()
            for row in secrets {
                let (name, value) = try row.decode((String, Data).self)
                guard let text = try resealed(String(decoding: value, as: UTF8.self), from: old, to: new) else {
                    continue
                }
                _ = try await c.query(
                    "UPDATE secrets SET value = \(Data(text.utf8)) WHERE name = \(name)",
                    logger: logger
                ).collect()
                result.secrets += 1
            }
            // A database from before webhooks (schema version 18 or older) has no such table.
            let hasWebhooks =
                try await c.query("SELECT to_regclass('webhook_endpoints') IS NOT NULL", logger: logger)
                .collect().first?.decode(Bool.self) ?? false
            let endpoints =
                hasWebhooks
                ? try await c.query(
                    "SELECT id, secret, previous_secret FROM webhook_endpoints FOR UPDATE",
                    logger: logger
                )
                .collect() : []
            for row in endpoints {
                let (id, secret, previous) = try row.decode((String, String, String?).self)
                let sealed = try [secret, previous].map { try resealed($0, from: old, to: new) }
                guard sealed.contains(where: { $0 != nil }) else { continue }
                let (a, b) = (sealed[0] ?? secret, sealed[1] ?? previous)
                _ = try await c.query(
                    "UPDATE webhook_endpoints SET secret = \(a), previous_secret = \(b) WHERE id = \(id)",
                    logger: logger
                ).collect()
                result.webhooks += 1
            }
            let newCheck = check(new)
            _ = try await c.query(
                """
                INSERT INTO secrets (name, value) VALUES ('credentials-key-check', \(newCheck))
                ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value
                """,
                logger: logger
            ).collect()
            return result
        }
    }
}
