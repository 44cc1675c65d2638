import ArgumentParser
import Foundation
import Logging
import RichPushServer

/// `richpush rotate-credentials-key`: every sealed value of a database under a new credentials key.
struct RotateKeyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rotate-credentials-key",
        abstract: "Seal every stored credential and secret with a new credentials key.",
        discussion: """
            Run it with every node stopped: a node still running holds the old key and could not open what it \
            reads after the rotation. It opens each app's APNs, FCM and VAPID credentials and the server's \
            secrets with the old key file and seals them with the new one, in one transaction (on PostgreSQL \
            the database's check of its key is replaced too). The new key file is made when it does not exist, \
            and removed again if the rotation fails. Then give every node the new file (the \
            credentials_key_file setting) and start them; the old key opens nothing any more.
            """
    )

    @Option(name: [.customLong("database"), .customLong("db")], help: "The SQLite file or postgres:// URL.")
    var database: String?

    @Option(
        name: .customLong("key-file"),
        help: "The key the credentials are sealed with now (default: the server's default for the database)."
    )
    var keyFile: String?

    @Option(name: .customLong("new-key-file"), help: "The new key's file (made when it does not exist).")
    var newKeyFile: String

    /// Whether two paths name one file (device and inode).
    static func sameFile(_ a: String, _ b: String) -> Bool {
        var x = stat()
        var y = stat()
        guard stat(a, &x) == 0, stat(b, &y) == 0 else { return false }
        return x.st_dev == y.st_dev && x.st_ino == y.st_ino
    }

    func run() async throws {
        var config = ServerConfiguration()
        if let url = database ?? ProcessInfo.processInfo.environment["RICHPUSH_DATABASE"] { config.database = url }
        if let keyFile { config.credentialsKeyFile = keyFile }
        let oldPath = config.resolvedCredentialsKeyFile
        // The same file under another name (a relative path, a link) is the same key: compared by what it is.
        let newURL = URL(fileURLWithPath: newKeyFile)
        if FileManager.default.fileExists(atPath: newKeyFile),
            newURL.resolvingSymlinksInPath().standardized
                == URL(fileURLWithPath: oldPath).resolvingSymlinksInPath()
                .standardized || Self.sameFile(newKeyFile, oldPath)
        {
            throw ValidationError("--new-key-file is the key in use (\(oldPath)): give a new file")
        }
        var isFolder: ObjCBool = false
        let parent = newURL.deletingLastPathComponent().path
        guard FileManager.default.fileExists(atPath: parent, isDirectory: &isFolder), isFolder.boolValue else {
            throw ValidationError("--new-key-file: the folder \(parent) does not exist")
        }
        let old: CredentialSealer
        let new: CredentialSealer
        do {
            old = try CredentialSealer.load(keyFile: oldPath, create: false)
            new = try CredentialSealer.load(keyFile: newKeyFile, create: true)
        } catch let problem as CredentialSealer.Problem {
            throw ValidationError(problem.description)
        }
        let result: CredentialRotation.Result
        do {
            if PostgresSettings.isPostgresURL(config.database) {
                var logger = Logger(label: "richpush.postgres")
                logger.logLevel = .notice
                result = try await PostgresDatabase.withRunning(
                    try PostgresSettings(url: config.database),
                    logger: logger
                ) {
                    try await CredentialRotation.rotate(db: $0, from: old, to: new)
                }
            } else {
                guard FileManager.default.fileExists(atPath: config.database) else {
                    throw ValidationError("no database at \(config.database)")
                }
                let pool = try SQLiteDeliveryQueue.openPool(path: config.database)
                result = try CredentialRotation.rotate(pool: pool, from: old, to: new)
            }
        } catch let problem as CredentialSealer.Problem {
            new.removeMadeFile()
            FileHandle.standardError.write(Data("error: \(problem.description); nothing was changed\n".utf8))
            throw ExitCode(1)
        } catch {
            new.removeMadeFile()
            throw error
        }
        print(
            """
            sealed with \(newKeyFile): the credentials of \(result.apps) app(s), \(result.secrets) secret(s) and \(result.webhooks) webhook endpoint(s)
            next: give every node \(newKeyFile) as its credentials key file (credentials_key_file), then start them; \
            \(oldPath) opens nothing any more
            """
        )
    }
}
