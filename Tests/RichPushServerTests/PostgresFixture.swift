import Foundation
import RichPushServer
import RichPushTestSupport

/// A PostgreSQL backend on a database of its own, on the test run's one real server (started on first use). Each
/// database is a copy of one migrated once (copying is far cheaper than forty migrations at once on two cores).
enum PostgresFixture {
    /// The migrated template, made once per test run.
    static let template = Task<String, Error> {
        let server = try await PostgresServer.shared()
        let url = try await server.createDatabase(name: "richpush_template")
        let backend = try await PostgresBackend.open(url: url, sealer: nil, nodeID: "template", timeout: .seconds(120))
        await backend.close()
        return "richpush_template"
    }

    static func url() async throws -> String {
        try await PostgresServer.shared().createDatabase(template: try await template.value) + "&pool_size=4"
    }

    /// The database deadline is the product's 10 s times six: the whole suite shares two cores with this server.
    static func backend(
        sealer: CredentialSealer? = nil,
        nodeID: String = "test-node",
        chunk: Int = 50_000
    ) async throws -> PostgresBackend {
        try await PostgresBackend.open(
            url: try await url(),
            sealer: sealer,
            nodeID: nodeID,
            chunk: chunk,
            timeout: .seconds(60)
        )
    }
}
