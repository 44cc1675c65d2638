import Foundation
import Logging
import PostgresNIO
import RichPushTestSupport
import Testing

/// The ground the PostgreSQL backend will stand on: a real server started by the test setup, reached with
/// PostgresNIO's pooled client, and the claim SQL's key property (two transactions never lock the same row).
@Suite struct PostgresServerTests {
    @Test func aRealServerStartsAnswersAndSkipsLockedRows() async throws {
        let server = try PostgresServer.start()
        defer { server.stop() }
        let client = PostgresClient(
            configuration: .init(
                host: "127.0.0.1",
                port: server.port,
                username: server.user,
                password: nil,
                database: "postgres",
                tls: .disable
            )
        )
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            let version = try await client.query("SHOW server_version_num").collect().first?.decode(String.self) ?? ""
            #expect((Int(version) ?? 0) >= 130_000, "\(version)")
            try await client.query("CREATE TABLE jobs (id BIGSERIAL PRIMARY KEY, owner TEXT)")
            try await client.query("INSERT INTO jobs (owner) SELECT NULL FROM generate_series(1, 10)")
            // Two claims at once, each in its own transaction: SKIP LOCKED hands them disjoint rows.
            try await client.withConnection { first in
                try await client.withConnection { second in
                    _ = try await first.query("BEGIN", logger: Self.logger)
                    _ = try await second.query("BEGIN", logger: Self.logger)
                    let a = try await first.query(
                        "SELECT id FROM jobs ORDER BY id LIMIT 6 FOR UPDATE SKIP LOCKED",
                        logger: Self.logger
                    ).collect().map { try $0.decode(Int64.self) }
                    let b = try await second.query(
                        "SELECT id FROM jobs ORDER BY id LIMIT 6 FOR UPDATE SKIP LOCKED",
                        logger: Self.logger
                    ).collect().map { try $0.decode(Int64.self) }
                    _ = try await first.query("COMMIT", logger: Self.logger)
                    _ = try await second.query("COMMIT", logger: Self.logger)
                    #expect(a.count == 6 && b.count == 4 && Set(a).isDisjoint(with: b), "\(a) \(b)")
                }
            }
            group.cancelAll()
        }
    }

    static let logger = Logger(label: "test.postgres")
}
