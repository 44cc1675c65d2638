import Foundation
import RichPushCore
import Testing

@testable import RichPushServer

/// A new credentials key: what was sealed with the old one opens with the new one only, on SQLite and on
/// PostgreSQL, and a node that still has the old key refuses to start.
@Suite struct CredentialRotationTests {
    static let apns = APNsCredentials(
        keyPEM: ServerStoreTests.apnsKey,
        keyID: "ABCDEFGHIJ",
        teamID: "TEAM123456",
        environment: .production
    )
    static let old = try! CredentialSealer(key: Array(repeating: 7, count: 32), source: "the old key")
    static let new = try! CredentialSealer(key: Array(repeating: 8, count: 32), source: "the new key")
    static let other = try! CredentialSealer(key: Array(repeating: 9, count: 32), source: "another key")

    @Test func sqliteCredentialsAndSecretsMoveToTheNewKey() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("rotate-\(UUID().uuidString).sqlite")
            .path
        defer { for s in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + s) } }
        let app: ServerApp
        let secret: [UInt8]
        do {
            let pool = try SQLiteDeliveryQueue.openPool(path: path)
            let store = try SQLiteServerStore(pool: pool, sealer: Self.old)
            (app, _) = try await store.createApp(ServerApp(id: "", name: "A", bundleID: "com.a", apns: Self.apns))
            secret = try await store.secret(named: "receipts")
            // A key that is not the one the values are sealed with is refused, and nothing changes.
            #expect(throws: (any Error).self) {
                _ = try CredentialRotation.rotate(pool: pool, from: Self.other, to: Self.new)
            }
            let result = try CredentialRotation.rotate(pool: pool, from: Self.old, to: Self.new)
            #expect(result == .init(apps: 1, secrets: 1))
        }
        let pool = try SQLiteDeliveryQueue.openPool(path: path)
        #expect(throws: (any Error).self) { _ = try SQLiteServerStore(pool: pool, sealer: Self.old) }
        let store = try SQLiteServerStore(pool: pool, sealer: Self.new)
        #expect(try await store.app(id: app.id)?.apns == Self.apns)
        #expect(try await store.secret(named: "receipts") == secret)
        // A second run finds everything on the new key already and changes nothing (it mends what a node still
        // running with the old key sealed after the first run).
        #expect(try CredentialRotation.rotate(pool: pool, from: Self.old, to: Self.new) == .init(apps: 0, secrets: 0))
    }

    @Test func postgresCredentialsMoveToTheNewKeyAndTheCheckWithThem() async throws {
        let url = try await PostgresFixture.url()
        let first = try await PostgresBackend.open(url: url, sealer: Self.old, nodeID: "n1")
        let (app, _) = try await first.store.createApp(
            ServerApp(id: "", name: "A", bundleID: "com.a", apns: Self.apns)
        )
        let secret = try await first.store.secret(named: "receipts")
        // A wrong "old" key is refused before anything changes.
        await #expect(throws: CredentialSealer.Problem.self) {
            _ = try await CredentialRotation.rotate(db: first.database, from: Self.other, to: Self.new)
        }
        let result = try await CredentialRotation.rotate(db: first.database, from: Self.old, to: Self.new)
        #expect(result == .init(apps: 1, secrets: 1))
        await first.close()
        await #expect(throws: CredentialSealer.Problem.self) {
            _ = try await PostgresBackend.open(url: url, sealer: Self.old, nodeID: "n2")
        }
        let second = try await PostgresBackend.open(url: url, sealer: Self.new, nodeID: "n3")
        #expect(try await second.store.app(id: app.id)?.apns == Self.apns)
        #expect(try await second.store.secret(named: "receipts") == secret)
        await second.close()
    }
}
