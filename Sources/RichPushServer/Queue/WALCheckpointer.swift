import Foundation
import GRDB
import Logging
import ServiceLifecycle

/// Checkpoints the WAL of a database from its own connection, off the write path: a passive checkpoint copies
/// committed pages into the database file while writers go on appending, and the next writer then restarts the
/// WAL from its beginning. Used with ``SQLiteDeliveryQueue/openPool(path:backgroundCheckpoints:)``.
public struct WALCheckpointer: Service {
    let connection: DatabaseQueue
    let interval: TimeInterval
    /// Above this many WAL frames left after a passive checkpoint, a RESTART checkpoint (which waits for
    /// writers) keeps the file from growing without bound.
    let restartAbove: Int
    let logger: Logger

    public init(
        path: String,
        interval: TimeInterval = 0.5,
        restartAbove: Int = 50_000,
        logger: Logger = Logger(label: "richpush.sqlite")
    ) throws {
        var config = Configuration()
        config.busyMode = .timeout(10)
        connection = try DatabaseQueue(path: path, configuration: config)
        self.interval = interval
        self.restartAbove = restartAbove
        self.logger = logger
    }

    /// One checkpoint; returns the WAL's frames and how many were copied.
    @discardableResult
    public func checkpoint() throws -> (walFrames: Int, copied: Int) {
        try connection.writeWithoutTransaction { db in
            let (log, copied) = try db.checkpoint(.passive)
            if log - copied > restartAbove { _ = try db.checkpoint(.restart) }
            return (log, copied)
        }
    }

    public func run() async throws {
        // Cancellation (graceful shutdown) ends the loop; it is not an error.
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try await Task.sleep(nanoseconds: UInt64(interval * 1e9))
                checkpointOrLog()
            }
        }
        checkpointOrLog()
    }

    /// A checkpoint that fails (the disk is full, a reader held the WAL past the busy timeout) leaves the WAL to
    /// grow until the next one succeeds: worth a warning, not the end of the server.
    private func checkpointOrLog() {
        do { try checkpoint() } catch {
            logger.warning("WAL checkpoint failed", metadata: ["error": .string(String(describing: error))])
        }
    }
}
