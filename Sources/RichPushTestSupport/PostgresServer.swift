import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A real PostgreSQL for tests: a cluster made by `initdb` in a temporary folder and its server started as a child
/// of this process on a free loopback port, with trust authentication for the user `richpush`. PostgreSQL refuses
/// to run as root, so when this process is root the cluster belongs to, and runs as, the `postgres` user (else
/// `nobody`). `stop()` shuts it down (fast) and removes the folder.
///
/// The server is not started through `pg_ctl`: run through `Process`, `pg_ctl start` ended but was never reaped
/// while the server it left behind ran (that server held descriptors inherited from this process), and the test
/// waited forever in `waitUntilExit`.
///
/// The binaries are found in `RICHPUSH_PG_BIN`, else the newest `/usr/lib/postgresql/N/bin` (Debian's
/// `postgresql` package, which `Scripts/test` installs), else `PATH`.
public final class PostgresServer: @unchecked Sendable {  // mutable state behind `lock`
    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    public let port: Int
    public let user = "richpush"
    public let directory: URL
    let bin: URL
    let runAs: String?
    /// The running server (replaced by ``resume()``), behind a lock: tests call from several tasks.
    private var running = Spawn()
    private let lock = NSLock()
    var process: Spawn {
        get { lock.withLock { running } }
        set { lock.withLock { running = newValue } }
    }

    /// One server for a whole test run (started on first use, stopped when the process exits); each test takes a
    /// database of its own from it (``createDatabase()``).
    /// (Started off the cooperative pool: `initdb` and the start take seconds, and every test that asks meanwhile
    /// waits for the one that started it.)
    public static func shared() async throws -> PostgresServer {
        try await offThePool { try started.get() }
    }

    private static let started: Result<PostgresServer, Error> = {
        let result = Result { try PostgresServer.start() }
        if case .success = result { atexit { if case .success(let s) = PostgresServer.started { s.stop() } } }
        return result
    }()

    /// A new database on this server, empty or a copy of `template` (a database nobody is connected to); its URL.
    public func createDatabase(template: String? = nil, name given: String? = nil) async throws -> String {
        try await offThePool { try self.createDatabaseNow(template: template, name: given) }
    }

    func createDatabaseNow(template: String?, name given: String?) throws -> String {
        let name = given ?? "t_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased().prefix(16)
        try run(
            "createdb",
            ["-h", "127.0.0.1", "-p", String(port), "-U", user] + (template.map { ["-T", $0] } ?? []) + [String(name)]
        )
        return "postgres://\(user)@127.0.0.1:\(port)/\(name)?sslmode=disable"
    }

    /// Runs SQL through `psql` on one of this server's databases (its URL); what it printed (tuples only).
    @discardableResult
    public func psql(_ url: String, _ sql: String) async throws -> String {
        try await offThePool { try self.psqlNow(url, sql) }
    }

    func psqlNow(_ url: String, _ sql: String) throws -> String {
        let database = URL(string: url)?.path.dropFirst() ?? "postgres"
        return try run(
            "psql",
            [
                "-h", "127.0.0.1", "-p", String(port), "-U", user, "-d", String(database), "-v", "ON_ERROR_STOP=1",
                "-At", "-c", sql,
            ]
        )
    }

    /// Stops the server at once, keeping its data (SIGQUIT: PostgreSQL's immediate shutdown; every connection is
    /// cut, nothing is flushed, recovery runs at the next start).
    public func halt() async {
        await offThePool { self.haltNow() }
    }

    func haltNow() {
        let p = process
        guard p.isRunning else { return }
        kill(p.processIdentifier, SIGQUIT)
        p.waitUntilExit()
    }

    /// Starts the server again on the same port and data (after ``halt()``).
    public func resume() async throws {
        try await offThePool { try self.resumeNow() }
    }

    func resumeNow() throws {
        guard !process.isRunning else { return }
        process = Spawn()
        try serve(data: directory.appendingPathComponent("data").path)
    }

    /// Freezes the server and every backend it forked (SIGSTOP): connections stay open and accepted, nothing
    /// answers, as with a database host that hangs. ``thaw()`` lets it go on.
    public func freeze() { signalAll(SIGSTOP) }

    /// Lets a frozen server go on (SIGCONT).
    public func thaw() { signalAll(SIGCONT) }

    /// The postmaster first (so it forks no new backend meanwhile), then its children.
    private func signalAll(_ signal: Int32) {
        let p = process
        guard p.isRunning else { return }
        let postmaster = p.processIdentifier
        kill(postmaster, signal)
        for child in Self.children(of: postmaster) { kill(child, signal) }
    }

    /// The processes whose parent is `pid`, from /proc.
    static func children(of pid: Int32) -> [Int32] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap { name -> Int32? in
            guard let child = Int32(name),
                let stat = try? String(contentsOfFile: "/proc/\(name)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { return nil }
            // After the command's closing parenthesis: state, then the parent's pid.
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            return fields.count > 1 && Int32(fields[1]) == pid ? child : nil
        }
    }

    /// `postgres://richpush@127.0.0.1:PORT/postgres`
    public var url: String { "postgres://\(user)@127.0.0.1:\(port)/postgres" }

    public static func start() throws -> PostgresServer {
        guard let bin = binaries() else {
            throw Failure(
                description:
                    "no PostgreSQL binaries (initdb, postgres): apt-get install postgresql, or set RICHPUSH_PG_BIN"
            )
        }
        let directory = URL(fileURLWithPath: "/tmp/richpush-pg-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        var runAs: String?
        if geteuid() == 0 {
            let name = getpwnam("postgres") != nil ? "postgres" : "nobody"
            guard let pw = getpwnam(name) else {
                throw Failure(description: "no unprivileged user to run PostgreSQL as")
            }
            guard chown(directory.path, pw.pointee.pw_uid, pw.pointee.pw_gid) == 0 else {
                throw Failure(description: "cannot give \(directory.path) to \(name)")
            }
            runAs = name
        }
        let data = directory.appendingPathComponent("data").path
        var server = PostgresServer(port: try freePort(), directory: directory, bin: bin, runAs: runAs)
        do {
            try server.run("initdb", ["-D", data, "-U", server.user, "-A", "trust", "-E", "UTF8", "--no-instructions"])
        } catch {
            server.stop()
            throw error
        }
        // The free port is free when asked, not always when the server binds it: another process's outbound
        // connection may take it in between (seen in a full run). Then another port, a few times.
        var attempt = 1
        while true {
            do {
                try server.serve(data: data)
                return server
            } catch let failure as Failure where attempt < 5 && failure.description.contains("Address already in use") {
                attempt += 1
                server = PostgresServer(port: try freePort(), directory: directory, bin: bin, runAs: runAs)
            } catch {
                server.stop()
                throw error
            }
        }
    }

    init(port: Int, directory: URL, bin: URL, runAs: String?) {
        self.port = port
        self.directory = directory
        self.bin = bin
        self.runAs = runAs
    }

    /// Starts the server and waits until it says it accepts connections (up to a minute).
    func serve(data: String) throws {
        let logURL = directory.appendingPathComponent("server.log")
        if !FileManager.default.fileExists(atPath: logURL.path) {
            FileManager.default.createFile(atPath: logURL.path, contents: nil)
        }
        let log = try FileHandle(forWritingTo: logURL)
        log.seekToEndOfFile()
        let logStart = self.log.count
        let arguments = [
            "-D", data, "-p", String(port), "-k", directory.path, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
            "-c", "full_page_writes=off", "-c", "max_connections=500",
        ]
        command(process, "postgres", arguments)
        process.standardOutput = .file(log)
        process.standardError = .file(log)
        process.standardInput = .null
        try process.run()
        let deadline = Date().addingTimeInterval(60)
        while !String(self.log.dropFirst(logStart)).contains("database system is ready to accept connections") {
            guard process.isRunning else {
                throw Failure(description: "postgres ended at start: \(self.log.suffix(2000))")
            }
            guard Date() < deadline else {
                throw Failure(description: "postgres did not start within a minute: \(self.log.suffix(2000))")
            }
            usleep(20_000)
        }
    }

    /// Stops the server (SIGINT: PostgreSQL's fast shutdown) and removes its folder.
    public func stop() {
        if process.isRunning {
            process.interrupt()
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(at: directory)
    }

    /// Sets a process up to run a PostgreSQL tool, as the unprivileged user when there is one.
    func command(_ p: Spawn, _ tool: String, _ arguments: [String]) {
        let path = bin.appendingPathComponent(tool).path
        if let runAs {
            // setpriv execs the tool as the user (no session, no extra process in between).
            p.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
            p.arguments = ["--reuid=\(runAs)", "--regid=\(runAs)", "--init-groups", "--", path] + arguments
        } else {
            p.executableURL = URL(fileURLWithPath: path)
            p.arguments = arguments
        }
        p.currentDirectoryURL = directory
    }

    /// What the server logged (for a failing test's message).
    public var log: String {
        (try? String(contentsOf: directory.appendingPathComponent("server.log"), encoding: .utf8)) ?? ""
    }

    @discardableResult
    func run(_ tool: String, _ arguments: [String]) throws -> String {
        let p = Spawn()
        command(p, tool, arguments)
        let out = Pipe()
        p.standardOutput = .pipe(out)
        p.standardError = .pipe(out)
        try p.run()
        let text = String(decoding: try PipeRead.toEnd(out.fileHandleForReading).get(), as: UTF8.self)
        p.waitUntilExit()
        guard p.terminationStatus == 0 else {
            throw Failure(description: "\(tool) failed (\(p.terminationStatus)): \(text.suffix(2000))")
        }
        return text
    }

    static func binaries() -> URL? {
        let fm = FileManager.default
        if let env = ProcessInfo.processInfo.environment["RICHPUSH_PG_BIN"],
            fm.isExecutableFile(atPath: env + "/initdb")
        {
            return URL(fileURLWithPath: env)
        }
        let versions = ((try? fm.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []).compactMap(Int.init)
            .sorted()
        for v in versions.reversed() where fm.isExecutableFile(atPath: "/usr/lib/postgresql/\(v)/bin/initdb") {
            return URL(fileURLWithPath: "/usr/lib/postgresql/\(v)/bin")
        }
        for dir in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":")
        where fm.isExecutableFile(atPath: "\(dir)/initdb") {
            return URL(fileURLWithPath: String(dir))
        }
        return nil
    }

    /// A loopback port nobody listens on (bound, read, released).
    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "no socket") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        guard bound else { throw Failure(description: "no free port") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
