import Crypto
import Foundation
import GRDB
import RichPushServer
import Testing

/// Provider credentials sealed at rest: a copy of the database alone does not give them away.
@Suite struct CredentialSealerTests {
    static let pem = P256.Signing.PrivateKey().pemRepresentation
    static let serviceAccount =
        #"{"type":"service_account","project_id":"p","private_key":"-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n","client_email":"a@p.iam.gserviceaccount.com"}"#

    static func app() -> ServerApp {
        ServerApp(
            id: "",
            name: "Shop",
            bundleID: "com.example.app",
            apns: .init(keyPEM: pem, keyID: "ABC123DEFG", teamID: "DEF123GHIJ", environment: .production),
            fcm: .init(serviceAccountJSON: serviceAccount, projectID: "p", clientEmail: "a@p.iam.gserviceaccount.com")
        )
    }

    static func temp(_ name: String) -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("\(name)-\(UUID().uuidString)").path
    }

    @Test func sealedTextOpensWithItsKeyOnly() throws {
        let sealer = try CredentialSealer(key: Array(repeating: 1, count: 32))
        let sealed = try sealer.seal("secret text")
        #expect(sealed.hasPrefix("sealed:v1:") && !sealed.contains("secret"))
        #expect(try sealer.seal("secret text") != sealed)  // a fresh nonce each time
        #expect(try sealer.open(sealed) == "secret text")
        #expect(try sealer.open("written before sealing") == "written before sealing")
        #expect(throws: CredentialSealer.Problem.self) {
            try CredentialSealer(key: Array(repeating: 2, count: 32)).open(sealed)
        }
        #expect(throws: CredentialSealer.Problem.self) { try sealer.open("sealed:v1:not-base64!") }
        #expect(throws: CredentialSealer.Problem.self) { try CredentialSealer(key: [1, 2, 3]) }
    }

    @Test func theKeyFileIsMadeOnceAndReadableByItsOwnerOnly() throws {
        let path = Self.temp("key")
        defer { try? FileManager.default.removeItem(atPath: path) }
        #expect(throws: CredentialSealer.Problem.self) { try CredentialSealer.load(keyFile: path, create: false) }
        let made = try CredentialSealer.load(keyFile: path, create: true)
        #expect(made.madeFile == path)
        let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        let again = try CredentialSealer.load(keyFile: path, create: true)
        #expect(try again.open(try made.seal("x")) == "x")
        // Only the process that made the file removes it (a node that refuses to start after making it).
        #expect(again.madeFile == nil)
        again.removeMadeFile()
        #expect(FileManager.default.fileExists(atPath: path))
        made.removeMadeFile()
        #expect(!FileManager.default.fileExists(atPath: path))
        _ = try CredentialSealer.load(keyFile: path, create: true)
        try "not a key".write(toFile: path, atomically: true, encoding: .utf8)
        #expect(throws: CredentialSealer.Problem.self) { try CredentialSealer.load(keyFile: path, create: false) }
    }

    @Test func theDatabaseHoldsSealedCredentialsOnly() async throws {
        let db = Self.temp("sealed") + ".sqlite"
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: db + suffix) } }
        let key = try CredentialSealer(key: Array(repeating: 9, count: 32))
        let pool = try SQLiteDeliveryQueue.openPool(path: db)
        let store = try SQLiteServerStore(pool: pool, sealer: key)
        let (app, _) = try await store.createApp(Self.app())
        // What is on disk: no key, no service account.
        let raw = try await pool.read { db in
            try Row.fetchOne(db, sql: "SELECT apns, fcm FROM apps WHERE id = ?", arguments: [app.id])
        }
        let apns: String = try #require(raw?["apns"])
        let fcm: String = try #require(raw?["fcm"])
        #expect(apns.hasPrefix("sealed:v1:") && fcm.hasPrefix("sealed:v1:"))
        #expect(!apns.contains("PRIVATE KEY") && !fcm.contains("private_key") && !fcm.contains("gserviceaccount"))
        #expect(try SQLiteServerStore.hasSealedCredentials(pool: pool))
        // Read back through a store opened with the same key (nothing cached).
        let reopened = try await SQLiteServerStore(pool: pool, cacheLifetime: 0, sealer: key).app(id: app.id)
        #expect(reopened?.apns?.keyPEM == Self.pem && reopened?.fcm?.serviceAccountJSON == Self.serviceAccount)
        // Without the key, or with another, the store does not open: no silent loss of every app's credentials.
        #expect(throws: CredentialSealer.Problem.self) { try SQLiteServerStore(pool: pool) }
        #expect(throws: CredentialSealer.Problem.self) {
            try SQLiteServerStore(pool: pool, sealer: CredentialSealer(key: Array(repeating: 8, count: 32)))
        }
    }

    @Test func credentialsStoredBeforeSealingAreSealedAtTheNextStart() async throws {
        let db = Self.temp("unsealed") + ".sqlite"
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: db + suffix) } }
        let pool = try SQLiteDeliveryQueue.openPool(path: db)
        let (app, _) = try await SQLiteServerStore(pool: pool).createApp(Self.app())
        var apns: String? = try await pool.read { db in try String.fetchOne(db, sql: "SELECT apns FROM apps") }
        #expect(apns?.contains("PRIVATE KEY") == true)
        #expect(try !SQLiteServerStore.hasSealedCredentials(pool: pool))
        let key = try CredentialSealer(key: Array(repeating: 5, count: 32))
        let store = try SQLiteServerStore(pool: pool, cacheLifetime: 0, sealer: key)
        apns = try await pool.read { db in try String.fetchOne(db, sql: "SELECT apns FROM apps") }
        #expect(apns?.hasPrefix("sealed:v1:") == true)
        #expect(try await store.app(id: app.id)?.apns?.keyPEM == Self.pem)
    }
}
