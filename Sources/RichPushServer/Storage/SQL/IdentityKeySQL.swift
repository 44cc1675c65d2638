import Foundation
import RichPushTransport

/// The statements of an app's identity keys, written once for SQLite and PostgreSQL. The public key is kept as
/// its uncompressed point in base64url (text in both databases).
enum IdentityKeySQL {
    /// The table, for SQLite (`REAL` times) and PostgreSQL (`timestamptz`).
    static func create(time: String) -> String {
        """
        CREATE TABLE identity_keys (
            app_id TEXT NOT NULL, kid TEXT NOT NULL, public_key TEXT NOT NULL, created_at \(time) NOT NULL,
            PRIMARY KEY (app_id, kid))
        """
    }

    static func list(_ appID: String) -> SQL {
        "SELECT kid, public_key, created_at FROM identity_keys WHERE app_id = \(appID) ORDER BY created_at, kid"
    }

    static func exists(_ key: IdentityKey) -> SQL {
        "SELECT count(*) FROM identity_keys WHERE app_id = \(key.appID) AND kid = \(key.keyID)"
    }

    /// Inserts unless the app holds ``IdentityKeys/maxPerApp`` keys or this one: counted in the statement.
    static func add(_ key: IdentityKey) -> SQL {
        """
        INSERT INTO identity_keys (app_id, kid, public_key, created_at)
        SELECT \(key.appID), \(key.keyID), \(JWT.base64URL(key.publicKey)), \(key.createdAt)
        WHERE (SELECT count(*) FROM identity_keys WHERE app_id = \(key.appID)) < \(IdentityKeys.maxPerApp)
        ON CONFLICT (app_id, kid) DO NOTHING RETURNING kid
        """
    }

    static func remove(appID: String, keyID: String) -> SQL {
        "DELETE FROM identity_keys WHERE app_id = \(appID) AND kid = \(keyID) RETURNING kid"
    }

    /// A key from its columns; nil when the stored point is damaged (it is then not offered for verification).
    static func key(appID: String, kid: String, publicKey: String, createdAt: Date) -> IdentityKey? {
        guard let raw = JWT.decodeBase64URL(Substring(publicKey)) else { return nil }
        return IdentityKey(appID: appID, keyID: kid, publicKey: Array(raw), createdAt: createdAt)
    }
}
