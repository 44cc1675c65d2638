import Foundation
import GRDB
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

    public init(path: String, interval: TimeInterval = 0.5, restartAbove: Int = 50_000) throws {
        var config = Configuration()
        config.busyMode = .timeout(10)
        connection = try DatabaseQueue(path: path, configuration: config)
        self.interval = interval
        self.restartAbove = restartAbove
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
                _ = try? checkpoint()
            }
        }
        _ = try? checkpoint()
    }
}
