import Foundation
import GRDB
import Logging
import NIOConcurrencyHelpers
import ServiceLifecycle

/// Checkpoints the WAL of a database from its own connection, off the write path: a passive checkpoint copies
/// committed pages into the database file while writers go on appending, and the next writer then restarts the
/// WAL from its beginning. Used with ``SQLiteDeliveryQueue/openPool(path:backgroundCheckpoints:)``.
///
/// The WAL stays bounded under any write load and goes back to nothing when writes stop:
/// - past ``truncateAbove`` frames (readers that always hold an old snapshot keep the next writer from restarting
///   the log, and a passive checkpoint cannot end that), a TRUNCATE checkpoint copies everything and cuts the file
///   to zero bytes. It runs as a barrier of the pool: the writes and reads behind it wait in the pool's queues
///   while the reads in progress end. (From a connection of its own it waited for a chance at the write lock
///   while writers went on appending, 50 MB more in the second it waited; on the pool's writer alone, readers that
///   overlapped without a gap kept it waiting until it gave up.) Rare: a WAL restarts by itself whenever a
///   passive checkpoint finished and no reader holds a frame;
/// - when a look finds no frame written since the last one and every frame copied, the server is idle: a TRUNCATE
///   checkpoint (nothing left to copy, so it is quick), as a barrier too, gives the file's space back.
/// (Under 64 MB of writes between looks the file is also cut back by `journal_size_limit` when the log restarts.)
public struct WALCheckpointer: Service {
    let connection: DatabaseQueue
    let pool: DatabasePool
    let interval: TimeInterval
    /// WAL frames (pages of 4 KB) past which a TRUNCATE checkpoint runs: 32,768 frames, 128 MB.
    let truncateAbove: Int
    let logger: Logger

    /// Checkpoints `pool`'s database (opened with ``SQLiteDeliveryQueue/openPool(path:backgroundCheckpoints:)``).
    public init(
        pool: DatabasePool,
        interval: TimeInterval = 0.5,
        truncateAbove: Int = 32_768,
        logger: Logger = Logger(label: "richpush.sqlite")
    ) throws {
        var config = Configuration()
        config.busyMode = .timeout(10)
        connection = try DatabaseQueue(path: pool.path, configuration: config)
        self.pool = pool
        self.interval = interval
        self.truncateAbove = truncateAbove
        self.logger = logger
    }

    /// What one look found and did.
    public struct Look: Sendable, Equatable {
        /// Frames in the WAL before anything was done, and how many a passive checkpoint copied.
        public var walFrames: Int
        public var copied: Int
        /// Whether the WAL was checkpointed in full and cut to zero bytes.
        public var truncated: Bool
    }

    /// One look: a passive checkpoint, then a TRUNCATE one when the WAL is past its bound or the server is idle
    /// (`previousFrames`, the frames the last look found, is the same and all are copied).
    @discardableResult
    public func checkpoint(previousFrames: Int? = nil) async throws -> Look {
        let (log, copied) = try await passive()
        let idle = log > 0 && log == previousFrames && copied == log
        guard log > truncateAbove || idle else { return Look(walFrames: log, copied: copied, truncated: false) }
        // A barrier for the idle case too: a look finds no new frame whenever the writer was starved for an
        // interval, readers may be busy then, and a TRUNCATE that waits for them holds the write lock meanwhile
        // (from a connection of its own it waited out the busy timeout, 10 s without a write, and failed: found by
        // the whole suite's load). Everything being copied, the barrier holds reads for no more than the file's
        // truncation.
        _ = try await pool.barrierWriteWithoutTransaction { db in try db.checkpoint(.truncate) }
        return Look(walFrames: log, copied: copied, truncated: true)
    }

    /// A passive checkpoint, tried again when SQLite answers it "database is locked": it never waits (no busy
    /// handler), and it gets that answer when it reads the WAL's index while a commit is rewriting it, a window of
    /// microseconds (met within a second beside a writer that commits without pause; now and then by a look every
    /// 50 ms under the whole test suite's load, which failed the look). Five tries 2 ms apart; a checkpoint still
    /// locked after them is the caller's error.
    private func passive() async throws -> (Int, Int) {
        var tries = 1
        while true {
            do {
                return try await connection.writeWithoutTransaction { db in try db.checkpoint(.passive) }
            } catch let error as DatabaseError where error.resultCode == .SQLITE_BUSY && tries < 5 {
                tries += 1
                try await Task.sleep(nanoseconds: 2_000_000)
            }
        }
    }

    public func run() async {
        // The frames the last look found (nil: it failed).
        let previous = NIOLockedValueBox<Int?>(nil)
        await Periodic.repeatUntilShutdown("WAL checkpoints", logger: logger, firstPause: interval) {
            let found = await look(previous.withLockedValue { $0 })
            previous.withLockedValue { $0 = found }
            return pause(after: found)
        }
        // The pool's last connection to close checkpoints what is left (SQLite does, on a clean close).
        _ = await look(nil)
    }

    /// The wait before the next look: a tenth of the interval while the WAL holds over a quarter of its bound (a
    /// burst of writes is caught before it runs far past it), else the interval.
    func pause(after frames: Int?) -> TimeInterval {
        (frames ?? 0) > truncateAbove / 4 ? interval / 10 : interval
    }

    /// A checkpoint that fails (the disk is full, a reader held the WAL past the busy timeout) leaves the WAL to
    /// grow until the next one succeeds: worth a warning, not the end of the server. Returns the frames found
    /// after a truncation (0) or as found.
    private func look(_ previous: Int?) async -> Int? {
        do {
            let l = try await checkpoint(previousFrames: previous)
            return l.truncated ? 0 : l.walFrames
        } catch {
            logger.warning("WAL checkpoint failed", metadata: ["error": .string(String(describing: error))])
            return nil
        }
    }
}
