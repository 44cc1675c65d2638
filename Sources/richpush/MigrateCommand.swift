import ArgumentParser
import Foundation
import RichPushServer

/// `richpush migrate`: brings a PostgreSQL database's schema to this version, alone (nodes do it at start too).
struct MigrateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "migrate",
        abstract: "Apply the schema migrations to a PostgreSQL database and exit.",
        discussion: """
            Every node applies missing migrations when it starts, one node at a time (an advisory lock); run this \
            before rolling out a new version to see them applied once, or in a deploy step. The database comes from \
            --database, else RICHPUSH_DATABASE.
            """
    )

    @Option(help: "postgres://USER:PASSWORD@HOST:PORT/DB") var database: String?

    func run() async throws {
        guard let url = database ?? ProcessInfo.processInfo.environment["RICHPUSH_DATABASE"],
            PostgresSettings.isPostgresURL(url)
        else {
            throw ValidationError("give --database postgres://… (SQLite files are migrated when the server opens them)")
        }
        let settings: PostgresSettings
        do { settings = try PostgresSettings(url: url) } catch { throw ValidationError(error.description) }
        do {
            let (applied, current) = try await PostgresBackend.migrate(url: url)
            print(
                applied.isEmpty
                    ? "\(settings.redacted): already at schema version \(current)"
                    : "\(settings.redacted): applied \(applied.map(String.init).joined(separator: ", ")); now at schema version \(current)"
            )
        } catch {
            // The database's own error, named once with the URL (without its password).
            let why = PostgresDatabase.describe(error)
            FileHandle.standardError.write(
                Data("error: \(why.hasPrefix(settings.redacted) ? why : "\(settings.redacted): \(why)")\n".utf8)
            )
            throw ExitCode(1)
        }
    }
}
