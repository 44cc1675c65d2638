import Foundation
import RichPushTestSupport
import Testing

/// `richpush migrate` against a database it cannot use names the database's own error at once, with what to
/// change, and the URL once (without its password): not "no answer in time" after the whole connect timeout.
/// Each URL sets that timeout to 100 s, so that "at once" reads as under 50 s whatever the machine's load (a loaded
/// fresh clone took 8.6 s to start the command and be refused, against a bound of 8 with the default timeout of 10).
@Suite struct MigrateErrorTests {
    static func migrate(_ url: String) async throws -> (status: Int32, errors: String, seconds: Double) {
        let started = Date()
        let run = try await ChildProcess.run(CLITests.binary, ["migrate", "--database", url + "&connect_timeout=100"])
        return (run.status, run.errors, Date().timeIntervalSince(started))
    }

    @Test func aMissingRoleADatabaseAndTLSAreNamedAtOnce() async throws {
        let pg = try await PostgresServer.shared()
        let base = "127.0.0.1:\(pg.port)"

        let role = try await Self.migrate("postgres://nobody_here:pw@\(base)/postgres?sslmode=disable")
        #expect(role.status == 1)
        #expect(
            role.errors.contains("role \"nobody_here\" does not exist") && role.errors.contains("CREATE ROLE"),
            "\(role.errors)"
        )
        #expect(role.seconds < 50, "it waited \(role.seconds) s")
        #expect(role.errors.components(separatedBy: "127.0.0.1:\(pg.port)").count == 2, "the URL once: \(role.errors)")
        #expect(!role.errors.contains(":pw@"))

        let database = try await Self.migrate("postgres://\(pg.user)@\(base)/no_such_database?sslmode=disable")
        #expect(database.status == 1)
        #expect(
            database.errors.contains("no_such_database\" does not exist")
                && database.errors.contains("CREATE DATABASE"),
            "\(database.errors)"
        )
        #expect(database.seconds < 50, "it waited \(database.seconds) s")

        // The tests' server offers no TLS.
        let tls = try await Self.migrate("postgres://\(pg.user)@\(base)/postgres?sslmode=require")
        #expect(tls.status == 1)
        #expect(tls.errors.contains("does not offer TLS") && tls.errors.contains("sslmode=disable"), "\(tls.errors)")
        #expect(tls.seconds < 50, "it waited \(tls.seconds) s")
    }
}
