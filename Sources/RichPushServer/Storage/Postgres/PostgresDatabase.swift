import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import PostgresNIO
import ServiceLifecycle

/// A PostgreSQL database that several RichPush nodes share: a pooled client, a deadline on every operation (a
/// database that stops answering must not hold a request for ever), and what this node knows of its health.
///
/// It is a `Service`: its `run` runs the client's pool and the health probe until the group shuts it down (the
/// server lists it first in its group, so it closes last). A pool that waits out its reconnection backoff while the
/// database answers again is replaced by a fresh one (``probe()``), so that a node is back within seconds of its
/// database, not a minute later. Tools and tests that have no group use `open`, which
/// runs it in a task of its own until `close`, or `withRunning` for a bounded piece of work.
///
/// ```swift
/// let applied = try await PostgresDatabase.withRunning(try PostgresSettings(url: url)) { db in
///     try await PostgresMigrations.migrate(db)
/// }
/// ```
public final class PostgresDatabase: Service, Sendable {
    public let settings: PostgresSettings
    /// The pool in use: an operation takes it when it begins (a replaced pool serves the operations begun on it for
    /// `timeout` more).
    public var client: PostgresClient { pools.withLockedValue { $0.current.client } }
    /// The pool in use; the one replaced last, which serves the operations begun on it until its grace ends; and when
    /// the pool was last replaced (the probe waits between replacements, giving a fresh pool time to connect).
    private let pools: NIOLockedValueBox<(current: Pool, retiring: Pool?, replacedAt: ContinuousClock.Instant)>
    /// Pools that replace the first one, for `run` to run.
    private let replacements = AsyncStream.makeStream(of: Pool.self)
    public let health = DatabaseHealth()
    /// The longest one operation may take before it fails as unavailable.
    public let timeout: Duration
    let logger: Logger
    /// The task running `run` for a database opened without a group (`open`); nil when a group runs it.
    private let standalone = NIOLockedValueBox<Task<Void, Never>?>(nil)
    /// Whether `run` has started the pool. Operations wait for it: a delivery worker starting beside the database
    /// in the same group must not lease a connection from a pool that is not running yet.
    private let started = NIOLockedValueBox(false)

    /// A database not yet running: give it to a `ServiceGroup` (or call `run`) before its first operation.
    public init(
        _ settings: PostgresSettings,
        timeout: Duration = .seconds(10),
        logger: Logger = Logger(label: "richpush.postgres")
    ) throws {
        self.settings = settings
        self.pools = NIOLockedValueBox((try Pool(settings, logger: logger), nil, .now))
        self.timeout = timeout
        self.logger = logger
    }

    /// Runs the pool (and each pool that replaces it) and, every second, the health probe, until cancelled or the
    /// group's graceful shutdown.
    public func run() async throws {
        let first = pools.withLockedValue { $0.current }
        await withDiscardingTaskGroup { group in
            group.addTask {
                self.started.withLockedValue { $0 = true }
                await first.run(grace: self.timeout)
            }
            group.addTask { await cancelWhenGracefulShutdown { await self.probe() } }
            // Ends with cancellation, or when the graceful shutdown finishes the stream.
            await withGracefulShutdownHandler {
                for await next in self.replacements.stream { group.addTask { await next.run(grace: self.timeout) } }
            } onGracefulShutdown: {
                self.replacements.continuation.finish()
            }
        }
    }

    /// A client's pool, and what ends it when it is replaced.
    struct Pool: Sendable {
        let client: PostgresClient
        /// Finished when the pool is retired: its grace begins.
        private let retirement = AsyncStream.makeStream(of: Never.self)
        /// Finished when the pool must end now (its grace cut short).
        private let ending = AsyncStream.makeStream(of: Never.self)

        init(_ settings: PostgresSettings, logger: Logger) throws {
            client = PostgresClient(configuration: try settings.clientConfiguration(), backgroundLogger: logger)
        }

        /// Runs the pool until `grace` after it is retired (or until it is ended), until cancelled, or until the
        /// group shuts down gracefully (the client heeds that itself).
        func run(grace: Duration) async {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await client.run() }
                group.addTask {
                    for await _ in retirement.stream {}
                    await withTaskGroup(of: Void.self) { wait in
                        wait.addTask { try? await Task.sleep(for: grace) }
                        wait.addTask { for await _ in ending.stream {} }
                        await wait.next()
                        wait.cancelAll()
                    }
                }
                await group.next()
                group.cancelAll()
            }
        }

        /// Ends `run` after its grace: operations begun on this pool go on meanwhile (a hung database that resumes
        /// answers them), new ones take the pool that replaced it. Then the pool closes its connections, and what
        /// still waits on it fails as unavailable.
        func retire() { retirement.continuation.finish() }

        /// Ends `run` now.
        func end() {
            retirement.continuation.finish()
            ending.continuation.finish()
        }
    }

    /// Puts a fresh pool in place of the current one, which is retired. A pool retired before and still in its
    /// grace is ended, so that a node holds two pools' connections at most.
    private func replacePool() throws {
        let fresh = try Pool(settings, logger: logger)
        let (old, earlier) = pools.withLockedValue { p in
            defer { p = (fresh, p.current, .now) }
            return (p.current, p.retiring)
        }
        replacements.continuation.yield(fresh)
        earlier?.end()
        old.retire()
    }

    /// Starts the database in a task of its own and checks that it answers (within `timeout`); `close` stops it.
    /// For tools and tests: the server runs its database in its service group instead.
    public static func open(
        _ settings: PostgresSettings,
        timeout: Duration = .seconds(10),
        logger: Logger = Logger(label: "richpush.postgres")
    ) async throws -> PostgresDatabase {
        let db = try PostgresDatabase(settings, timeout: timeout, logger: logger)
        // The one task this type starts itself, owned by `close` (which cancels it and waits for its end).
        db.standalone.withLockedValue { $0 = Task { try? await db.run() } }
        do {
            try await db.checkAnswers()
        } catch {
            await db.close()
            throw error
        }
        return db
    }

    /// Runs `body` with the database running, and stops it when `body` ends: for work bounded in time (migrations,
    /// the checks before a server starts).
    public static func withRunning<T: Sendable>(
        _ settings: PostgresSettings,
        timeout: Duration = .seconds(10),
        logger: Logger = Logger(label: "richpush.postgres"),
        _ body: @escaping @Sendable (PostgresDatabase) async throws -> T
    ) async throws -> T {
        let db = try PostgresDatabase(settings, timeout: timeout, logger: logger)
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask {
                try await db.run()
                return nil
            }
            group.addTask {
                try await db.checkAnswers()
                return try await body(db)
            }
            defer { group.cancelAll() }
            while let next = try await group.next() {
                if let result = next { return result }
            }
            throw CancellationError()
        }
    }

    /// A `SELECT 1` within `timeout`, or ``DatabaseUnavailable`` naming the database (never its password) and
    /// why. One connection of its own is tried first: the pool makes its connections in the background and says
    /// why they fail only in its log, so a wrong password, a missing role or database, or a server without TLS
    /// would otherwise read as "no answer in time" after the whole timeout. Those errors will not go away by
    /// waiting: they are said at once, with what to change.
    func checkAnswers() async throws {
        var direct: (any Error)?
        do {
            let connection = try await deadline(timeout) { try await self.connect() }
            try? await connection.close()
        } catch {
            direct = error
            if let cure = Self.cure(error) {
                throw DatabaseUnavailable("\(settings.redacted): \(Self.describe(error)); \(cure)")
            }
        }
        do {
            _ = try await rows("SELECT 1")
        } catch {
            // The connection's own error (refused, a name that does not resolve) says more than the pool's timeout.
            throw DatabaseUnavailable("\(settings.redacted): \(Self.describe(direct ?? error))")
        }
    }

    /// What to change for an error that waiting will not mend (nil for one that may: a refused or broken
    /// connection, a server starting up).
    static func cure(_ error: any Error) -> String? {
        if let p = error as? PSQLError {
            switch p.serverInfo?[.sqlState] {
            case "28P01": return "the password is wrong: check the one in the URL"
            case "28000":
                return
                    "the role does not exist or the server's pg_hba.conf does not let it in from here: CREATE ROLE … LOGIN, or add an entry to pg_hba.conf"
            case "3D000": return "the database does not exist: CREATE DATABASE … OWNER …, then start again"
            case "42501": return "the role may not connect to this database: GRANT CONNECT ON DATABASE … TO …"
            default: break
            }
            if p.code == .sslUnsupported {
                return
                    "the server does not offer TLS: turn it on there (ssl = on), or give sslmode=disable in the URL on a network you trust"
            }
            if p.code == .failedToAddSSLHandler {
                return "TLS could not be set up: check sslrootcert and the server's certificate"
            }
        }
        let text = String(describing: error)
        if text.contains("NIOSSLError") || text.contains("handshakeFailed") || text.contains("certificate") {
            return
                "the server's certificate was not trusted: give its CA with sslrootcert=FILE, or sslmode=require to encrypt without checking it"
        }
        return nil
    }

    /// Stops a database `open` started (a group's database stops with the group).
    public func close() async {
        let task = standalone.withLockedValue { t -> Task<Void, Never>? in
            defer { t = nil }
            return t
        }
        task?.cancel()
        await task?.value
    }

    /// Every second: marks the database up when it answers again (and down when it stops). A probe that misses its
    /// deadline (a fifth of the operations' `timeout`: 2 s by default) is followed by another at once, and only the
    /// second miss in a row, with nothing answered meanwhile, marks it down: a hang is told within about 5 s, and a
    /// node whose CPU was taken for 2 s (or a database slow for a moment) is not told an outage. (A deployment that
    /// gives its operations longer, as the test suite does on its loaded two cores, gives the probe longer too.)
    func probe() async {
        var again = false
        while !Task.isCancelled {
            // Only cancellation ends the sleep early; the loop checks it next.
            if !again { try? await Task.sleep(for: .seconds(1)) }
            again = false
            let begun = health.epoch
            do {
                _ = try await deadline(timeout / 5) { [client] in try await client.query("SELECT 1").collect() }
                health.answered()
                health.markUp()
            } catch is TimedOut {
                guard !Task.isCancelled else { return }
                health.probeMissed(Self.describe(TimedOut()), begunAt: begun)
                again = health.isUp
            } catch {
                if !Task.isCancelled { health.markDown(Self.describe(error), begunAt: begun) }
            }
            if !health.isUp, !Task.isCancelled { await replacePoolIfItLags() }
        }
    }

    /// While the database is down: when a connection of its own is answered but the pool's query was not, the pool
    /// is waiting out its backoff between attempts to connect, which grows to a minute over an outage of a few
    /// minutes (a node whose database came back would refuse every request for up to a minute more). It is replaced
    /// by a fresh pool, which connects at once; at most once in 5 s, so that a fresh pool has time to connect.
    func replacePoolIfItLags() async {
        guard pools.withLockedValue({ $0.replacedAt.duration(to: .now) }) >= .seconds(5) else { return }
        do {
            try await deadline(timeout / 5) {
                let connection = try await self.connect()
                do {
                    _ = try await connection.query("SELECT 1", logger: self.logger).collect()
                } catch {
                    try? await connection.close()
                    throw error
                }
                try? await connection.close()
            }
        } catch {
            return
        }
        guard !health.isUp, !Task.isCancelled else { return }
        do {
            try replacePool()
            logger.notice(
                "the database answers a connection again while the pool waits to retry: the pool is started afresh"
            )
        } catch {
            logger.warning("could not start a fresh pool", metadata: ["error": .string(Self.describe(error))])
        }
    }

    /// Waits (polling, for the few milliseconds between a group starting its services and this one's pool) until
    /// `run` has started the pool.
    func untilStarted() async throws {
        while !started.withLockedValue({ $0 }) {
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    // MARK: Operations

    /// Rows of one statement.
    @discardableResult
    public func rows(_ query: PostgresQuery) async throws -> [PostgresRow] {
        try await run { [client] in try await client.query(query).collect() }
    }

    /// The rows of a prepared statement (prepared on each connection the first time it runs there).
    public func execute<S: PostgresPreparedStatement>(_ statement: S) async throws -> [S.Row] where S.Row: Sendable {
        try await run { [client] in
            var rows: [S.Row] = []
            for try await row in try await client.execute(statement) { rows.append(row) }
            return rows
        }
    }

    /// The rows of a statement planned for its values each time it runs (sent unnamed, never cached). For a
    /// statement whose best plan changes with the size of what it reads: a prepared statement's cached plan is made
    /// for the table as it was (a node started on an empty queue kept reading all of a filled one for each batch).
    public func executePlannedEachTime<S: PostgresPreparedStatement>(
        _ statement: S
    ) async throws -> [S.Row] where S.Row: Sendable {
        let query = PostgresQuery(unsafeSQL: S.sql, binds: try statement.makeBindings())
        return try await run { [client] in
            var rows: [S.Row] = []
            for try await row in try await client.query(query) { rows.append(try statement.decodeRow(row)) }
            return rows
        }
    }

    /// Runs `body` in one transaction on one connection, committed when it returns.
    public func transaction<T: Sendable>(
        _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        try await run { [client, logger] in
            try await client.withConnection { connection in
                do {
                    return try await connection.withTransaction(logger: logger) { c in try await body(c) }
                } catch let e as PostgresTransactionError {
                    throw e.closureError ?? e.beginError ?? e.commitError ?? e
                }
            }
        }
    }

    /// Runs an operation under the deadline; a failure to reach the database marks it down and is thrown as
    /// ``DatabaseUnavailable``. An error of the statement itself (a constraint, a syntax) is thrown as it is.
    func run<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T {
        try await untilStarted()
        let begun = health.epoch
        do {
            let answer = try await deadline(timeout, body)
            health.answered()
            return answer
        } catch {
            // A caller that gave up says nothing of the database.
            if Task.isCancelled { throw CancellationError() }
            if Self.isUnavailable(error) {
                let reason = Self.describe(error)
                health.markDown(reason, begunAt: begun)
                throw DatabaseUnavailable(reason)
            }
            // The database answered, with a refusal of the statement.
            health.answered()
            // The client's own description hides the server's message; this one names it (and never a value).
            if error is PSQLError || error is PostgresTransactionError {
                throw StatementFailed(description: Self.describe(error))
            }
            throw error
        }
    }

    /// A statement the database refused (a constraint, a type): its message and SQLSTATE.
    public struct StatementFailed: Error, CustomStringConvertible {
        public var description: String
    }

    struct TimedOut: Error {}

    /// `body`'s answer, or ``TimedOut`` once `limit` passes, whichever comes first. It does not wait for a `body`
    /// that does not end (a query on a connection into a black hole does not heed cancellation): that one is
    /// cancelled and left behind, and `onTimeout` runs (close its connection, so it ends).
    func deadline<T: Sendable>(
        _ limit: Duration,
        onTimeout: (@Sendable () -> Void)? = nil,
        _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let waiting = NIOLockedValueBox<CheckedContinuation<T, Error>?>(nil)
        let work = NIOLockedValueBox<Task<Void, Never>?>(nil)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, Error>) in
                waiting.withLockedValue { $0 = continuation }
                let (seconds, attoseconds) = limit.components
                let nanoseconds = seconds * 1_000_000_000 + attoseconds / 1_000_000_000
                let timer = MultiThreadedEventLoopGroup.singleton.next().scheduleTask(in: .nanoseconds(nanoseconds)) {
                    guard let c = waiting.withLockedValue({ $0.take() }) else { return }
                    work.withLockedValue { $0?.cancel() }
                    onTimeout?()
                    c.resume(throwing: TimedOut())
                }
                // A task of its own, so that the caller can be answered at the deadline and the work left to end
                // (a statement on a connection that does not answer ends when the connection is closed).
                work.withLockedValue {
                    $0 = Task {
                        let result: Result<T, Error>
                        do { result = .success(try await body()) } catch { result = .failure(error) }
                        timer.cancel()
                        waiting.withLockedValue { $0.take() }?.resume(with: result)
                    }
                }
            }
        } onCancel: {
            work.withLockedValue { $0?.cancel() }
            waiting.withLockedValue { $0.take() }?.resume(throwing: CancellationError())
        }
    }

    /// Whether an error means the database could not be reached, rather than that a statement failed.
    public static func isUnavailable(_ error: any Error) -> Bool {
        if error is TimedOut || error is DatabaseUnavailable { return true }
        if let e = error as? PostgresTransactionError {
            return [e.beginError, e.closureError, e.commitError].contains { $0.map(isUnavailable) ?? false }
        }
        // The pool's own refusals: its circuit breaker (no connection could be made for a while) and a pool that was
        // shut down (one replaced, for the operations still waiting on it). The type lives in a module the client
        // does not export by name, so it is told by its name.
        if String(reflecting: type(of: error)).hasSuffix(".ConnectionPoolError") { return true }
        guard let p = error as? PSQLError else { return error is ChannelError || error is IOError }
        if p.code == .server {
            // Connection exceptions (08), shutdown and startup (57P01-57P03), too many connections (53300).
            let state = p.serverInfo?[.sqlState] ?? ""
            return state.hasPrefix("08") || ["57P01", "57P02", "57P03", "53300"].contains(state)
        }
        return [
            .connectionError, .serverClosedConnection, .clientClosedConnection, .uncleanShutdown, .poolClosed,
            .sslUnsupported, .failedToAddSSLHandler,
        ].contains(p.code)
    }

    /// An error in a line: the server's message and SQLSTATE, or the client's code (never a password).
    public static func describe(_ error: any Error) -> String {
        if error is TimedOut { return "no answer in time" }
        if let d = error as? DatabaseUnavailable { return d.reason }
        if let e = error as? PostgresTransactionError, let inner = e.closureError ?? e.beginError ?? e.commitError {
            return describe(inner)
        }
        if let p = error as? PSQLError {
            if let message = p.serverInfo?[.message] {
                return "\(message) (SQLSTATE \(p.serverInfo?[.sqlState] ?? "?"))"
            }
            return "\(p.code)" + (p.underlying.map { ": \($0)" } ?? "")
        }
        return "\(error)"
    }

    // MARK: Connections outside the pool

    /// A connection of its own (a listener's, the leader's), closed by the caller.
    func connect() async throws -> PostgresConnection {
        try await PostgresConnection.connect(
            configuration: try settings.connectionConfiguration(),
            id: Int.random(in: 1_000_000...Int(Int32.max)),
            logger: logger
        )
    }

    /// Sends a notification to every node listening on `channel` (after the current transaction, if any).
    public func notify(_ channel: String, _ payload: String = "") async {
        do { try await rows("SELECT pg_notify(\(channel), \(payload))") } catch {
            logger.debug(
                "notify failed",
                metadata: ["channel": .string(channel), "error": .string(Self.describe(error))]
            )
        }
    }
}
