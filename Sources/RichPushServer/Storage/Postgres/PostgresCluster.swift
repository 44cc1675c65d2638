import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PostgresNIO
import ServiceLifecycle

/// Work that one node of a cluster does for all of them, every `interval`: resuming fan-outs a dead node left,
/// returning its expired leases to the queue, sweeping shared media, forgetting nodes long gone.
public struct PeriodicJob: Sendable {
    public var name: String
    public var interval: TimeInterval
    public var run: @Sendable () async throws -> Void

    public init(name: String, interval: TimeInterval, run: @escaping @Sendable () async throws -> Void) {
        self.name = name
        self.interval = interval
        self.run = run
    }
}

/// Listens on the cluster's channels from a connection of its own: `richpush_work` (another node queued
/// deliveries: wake the worker) and `richpush_cache` (an app or key changed: forget it). After a reconnect
/// everything cached is forgotten and the worker woken, since notifications sent meanwhile were missed.
struct PostgresListener: Service {
    let db: PostgresDatabase
    /// A node queued deliveries: the earliest time its notice names (nil: not known, or the connection is new).
    let onWork: @Sendable (_ earliest: Date?) -> Void
    let onCache: @Sendable (String) -> Void

    func run() async {
        // The pause after a connection ends: doubled at each failure in a row, up to 5 s.
        let backoff = NIOLockedValueBox(0.2)
        await Periodic.repeatUntilShutdown("cluster listener", logger: db.logger) { [db, onWork, onCache] in
            do {
                let connection = try await db.connect()
                backoff.withLockedValue { $0 = 0.2 }
                onCache("*")
                onWork(nil)
                var failure: (any Error)?
                do { try await listen(on: connection) } catch { failure = error }
                // Given up however the listening ended (a connection dropped unclosed is a bug postgres-nio
                // asserts on); its close has nothing to report.
                try? await connection.close()
                if let failure { throw failure }
            } catch {
                if Task.isCancelled { throw CancellationError() }
                db.logger.debug("listener reconnecting", metadata: ["error": .string(PostgresDatabase.describe(error))])
            }
            return backoff.withLockedValue { b in
                defer { b = min(b * 2, 5) }
                return b
            }
        }
    }

    /// Listens on both channels and checks the connection every few seconds; returns or throws when it fails.
    func listen(on connection: PostgresConnection) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                for try await n in try await connection.listen("richpush_work") {
                    onWork(WorkNotice.earliest(fromPayload: n.payload))
                }
            }
            group.addTask {
                for try await n in try await connection.listen(PostgresServerStore.cacheChannel) {
                    onCache(n.payload)
                }
            }
            // A listening connection says nothing when the network between drops it: asked every few
            // seconds, it must answer in time, else it is replaced (and the caches flushed).
            group.addTask {
                while true {
                    try await Task.sleep(for: .seconds(3))
                    _ = try await db.deadline(
                        .seconds(3),
                        onTimeout: { _ = connection.close() as EventLoopFuture<Void> }
                    ) {
                        try await connection.query("SELECT 1", logger: db.logger).collect()
                    }
                }
            }
            defer { group.cancelAll() }
            try await group.next()
        }
    }
}

/// Each node's row in `nodes`: seen every `interval`; the number of nodes seen lately is handed to `onNodes`
/// (the API's rate limit is shared among them).
struct PostgresHeartbeat: Service {
    let db: PostgresDatabase
    let nodeID: String
    let address: String
    let interval: TimeInterval
    let onNodes: @Sendable (Int) -> Void

    func run() async {
        let started = Date()
        await Periodic.repeatUntilShutdown("heartbeat", logger: db.logger) { [db, nodeID, address, interval, onNodes] in
            do {
                try await db.rows(
                    """
                    INSERT INTO nodes (id, started_at, seen_at, address) VALUES (\(nodeID), \(started), now(), \(address))
                    ON CONFLICT (id) DO UPDATE SET seen_at = now(), address = excluded.address
                    """
                )
                let live = try await db.rows(
                    "SELECT count(*) FROM nodes WHERE seen_at > now() - make_interval(secs => \(interval * 5))"
                )
                onNodes(max(1, try live.first?.decode(Int.self) ?? 1))
            } catch {
                if Task.isCancelled { throw CancellationError() }
                db.logger.debug("heartbeat failed", metadata: ["error": .string(PostgresDatabase.describe(error))])
            }
            return interval
        }
        // Leaving: the others count one node fewer at once. A graceful shutdown ends the loop above without
        // cancelling this task, and the database service stops after this one; should the database not answer (or
        // the group be cancelled outright), the others count this node until its row is five intervals old.
        do { try await db.rows("DELETE FROM nodes WHERE id = \(nodeID)") } catch {
            db.logger.warning(
                "could not take this node off the cluster's list; the others count it a few seconds more",
                metadata: ["error": .string(PostgresDatabase.describe(error))]
            )
        }
    }
}

/// One node at a time does the cluster's periodic work: the one holding a session advisory lock on a connection
/// of its own. Should that node die or lose its database, the lock goes with its connection and another node
/// takes over within `retry`.
final class PostgresLeader: Service, Sendable {
    static let lockKey: Int64 = 0x7269_6368_7075_7302
    let db: PostgresDatabase
    let jobs: [PeriodicJob]
    let retry: TimeInterval
    private let leading = NIOLockedValueBox(false)

    init(db: PostgresDatabase, jobs: [PeriodicJob], retry: TimeInterval = 5) {
        self.db = db
        self.jobs = jobs
        self.retry = retry
    }

    /// Whether this node leads now.
    var isLeader: Bool { leading.withLockedValue { $0 } }

    func run() async {
        await Periodic.repeatUntilShutdown("cluster leader", logger: db.logger) { try await self.connectAndLead() }
    }

    /// Connects, waits for the lock and leads while the connection answers; returns the pause before trying again.
    func connectAndLead() async throws -> TimeInterval {
        do {
            db.logger.trace("leader: connecting")
            let connection = try await db.connect()
            var failure: (any Error)?
            do { try await holdLockAndLead(on: connection) } catch { failure = error }
            // The connection is given up (the lock goes with it); its close has nothing to report.
            try? await connection.close()
            if let failure { throw failure }
        } catch {
            leading.withLockedValue { $0 = false }
            if Task.isCancelled { throw CancellationError() }
            db.logger.debug("leader connection lost", metadata: ["error": .string(PostgresDatabase.describe(error))])
        }
        leading.withLockedValue { $0 = false }
        return retry
    }

    /// Waits for the lock on `connection`, then leads while it answers.
    func holdLockAndLead(on connection: PostgresConnection) async throws {
        while !Task.isCancelled {
            db.logger.trace("leader: trying the lock")
            let rows = try await db.deadline(
                .seconds(5),
                onTimeout: { _ = connection.close() as EventLoopFuture<Void> }
            ) { [db] in
                try await connection.query("SELECT pg_try_advisory_lock(\(Self.lockKey))", logger: db.logger)
                    .collect()
            }
            if try rows.first?.decode(Bool.self) == true { break }
            try await Task.sleep(for: .seconds(retry))
        }
        if Task.isCancelled { return }
        leading.withLockedValue { $0 = true }
        db.logger.info("this node leads the cluster's periodic work")
        try await lead(on: connection)
    }

    /// Runs each job at its interval while the lock's connection answers.
    func lead(on connection: PostgresConnection) async throws {
        let schedule = JobSchedule(jobs)
        while !Task.isCancelled {
            // The lock lives as long as this connection: check it (in time: a connection into a black hole never
            // answers), so that a lost connection ends the lead.
            _ = try await db.deadline(.seconds(5), onTimeout: { _ = connection.close() as EventLoopFuture<Void> }) {
                [db] in
                try await connection.query("SELECT 1", logger: db.logger).collect()
            }
            let pause = try await schedule.runDue(logger: db.logger, describe: PostgresDatabase.describe)
            try await Task.sleep(nanoseconds: UInt64(pause * 1e9))
        }
    }
}

/// Tells the other nodes that deliveries were queued, at most one notification in flight and one waiting: a
/// burst of sends costs a few notifications, not one each. A service of the node's (its notifications are sent
/// from its `run`); one asked while it does not run is sent when it starts.
final class WorkAnnouncer: Service, Sendable {
    let db: PostgresDatabase
    /// A notice is wanted, with the earliest time of what it announces (nil: not known).
    private let wanted = NIOLockedValueBox<(due: Bool, earliest: Date?, known: Bool)>((false, nil, true))
    private let signal = WakeSignal()

    init(db: PostgresDatabase) { self.db = db }

    func announce(earliest: Date?) {
        wanted.withLockedValue { w in
            if !w.due { w = (true, nil, true) }
            if let earliest, w.known { w.earliest = min(w.earliest ?? earliest, earliest) } else { w.known = false }
        }
        signal.signal()
    }

    func run() async {
        await Periodic.repeatUntilShutdown("work announcer", logger: db.logger) { [db, wanted, signal] in
            await signal.waitUnlessCancelled(upTo: 60)
            let w = wanted.withLockedValue { w in
                defer { w = (false, nil, true) }
                return w
            }
            if w.due { await db.notify("richpush_work", WorkNotice.payload(earliest: w.known ? w.earliest : nil)) }
            return 0
        }
    }
}
