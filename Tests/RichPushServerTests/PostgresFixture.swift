import Foundation
import RichPushServer
import RichPushTestSupport

/// A PostgreSQL backend on a database of its own, on the test run's one real server (started on first use).
enum PostgresFixture {
    static func url() throws -> String {
        try PostgresServer.shared.get().createDatabase() + "&pool_size=4"
    }

    static func backend(sealer: CredentialSealer? = nil, nodeID: String = "test-node", chunk: Int = 50_000) async throws -> PostgresBackend {
        try await PostgresBackend.open(url: try url(), sealer: sealer, nodeID: nodeID, chunk: chunk)
    }
}
