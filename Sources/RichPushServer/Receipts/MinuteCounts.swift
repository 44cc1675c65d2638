import Foundation
import Logging
import NIOConcurrencyHelpers
import RichPushCore
import ServiceLifecycle

/// What happened to notifications, counted per notification, per minute and per kind (and, for failures, per
/// reason): the rows an app's time series is read from. Bounded by notifications × minutes with activity × kinds,
/// not by events (a million deliveries in one minute are one row), and removed with their notification.
///
/// Counted in memory and written every few seconds in one transaction (``MinuteCounter``): a node that crashes
/// loses at most its last interval of these counts. The funnel is read from the deliveries, receipts and opens
/// themselves and loses nothing.
public struct MinuteCount: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        /// Deliveries queued.
        case accepted
        /// Deliveries the service accepted.
        case delivered
        /// Deliveries that ended otherwise (failed, expired, pruned, superseded), with the reason.
        case failed
        /// Devices' reports.
        case received
        case opened
    }
    public var notificationID: String
    /// Minutes since 1970.
    public var minute: Int64
    public var kind: Kind
    /// For `failed`: the reason (at most 64 bytes); "" otherwise.
    public var reason: String
    public var count: Int

    public init(notificationID: String, minute: Int64, kind: Kind, reason: String = "", count: Int) {
        self.notificationID = notificationID
        self.minute = minute
        self.kind = kind
        // At most 64 bytes, cut between characters (a cut inside one would lose the whole reason).
        var kept = ""
        for c in reason {
            if kept.utf8.count + c.utf8.count > 64 { break }
            kept.append(c)
        }
        self.reason = kept
        self.count = count
    }
}

/// Counts in memory between writes: at most ``maxKeys`` keys (past them, counts go to the next write rather than
/// growing the table of keys without end).
public final class MinuteCounter: Sendable {
    struct Key: Hashable {
        var notificationID: String
        var minute: Int64
        var kind: MinuteCount.Kind
        var reason: String
    }
    private let pending = NIOLockedValueBox<[Key: Int]>([:])
    private let dropped = NIOLockedValueBox<Int>(0)
    public static let maxKeys = 100_000
    let write: @Sendable ([MinuteCount]) async throws -> Void

    public init(write: @escaping @Sendable ([MinuteCount]) async throws -> Void) { self.write = write }

    public func add(
        _ notificationID: String,
        _ kind: MinuteCount.Kind,
        reason: String = "",
        count: Int = 1,
        at: Date = Date()
    ) {
        guard count > 0 else { return }
        let key = Key(
            notificationID: notificationID,
            minute: Int64(max(0, at.timeIntervalSince1970) / 60),
            kind: kind,
            reason: kind == .failed ? reason : ""
        )
        pending.withLockedValue { p in
            if p[key] == nil && p.count >= Self.maxKeys {
                dropped.withLockedValue { $0 += count }
                return
            }
            p[key, default: 0] += count
        }
    }

    /// Counts that could not be kept (more keys than ``maxKeys`` in one interval).
    public var droppedCounts: Int { dropped.withLockedValue { $0 } }

    /// Writes what was counted; on failure the counts are kept for the next try.
    public func flush() async throws {
        let taken = pending.withLockedValue { p -> [Key: Int] in
            let all = p
            p = [:]
            return all
        }
        guard !taken.isEmpty else { return }
        do {
            try await write(
                taken.map {
                    MinuteCount(
                        notificationID: $0.key.notificationID,
                        minute: $0.key.minute,
                        kind: $0.key.kind,
                        reason: $0.key.reason,
                        count: $0.value
                    )
                }
            )
        } catch {
            pending.withLockedValue { p in for (k, v) in taken { p[k, default: 0] += v } }
            throw error
        }
    }
}

/// An app's activity per hour.
public struct AppHour: Sendable, Hashable {
    /// Seconds since 1970 of the hour's start.
    public var hour: Int64
    public var counts: [MinuteCount.Kind: Int]
}

extension AppHour {
    /// Hours from rows of (hour, kind, count), in order.
    static func grouped(_ rows: [(Int64, String, Int)]) -> [AppHour] {
        var byHour: [Int64: [MinuteCount.Kind: Int]] = [:]
        for (hour, kind, n) in rows {
            guard let k = MinuteCount.Kind(rawValue: kind) else { continue }
            byHour[hour, default: [:]][k, default: 0] += n
        }
        return byHour.sorted { $0.key < $1.key }.map { AppHour(hour: $0.key, counts: $0.value) }
    }
}

/// Writes a node's minute counts every 2 s, and once more when the server stops (after the workers, which are
/// stopped before it).
struct MinuteFlusher: Service {
    let counter: MinuteCounter
    /// While the database is away nothing is written (the counts wait, as the workers do).
    let health: DatabaseHealth
    let logger: Logger
    var interval: TimeInterval = 2

    func run() async {
        await Periodic.repeatUntilShutdown("minute counts", logger: logger, firstPause: interval) {
            if health.isUp { await flush() }
            return interval
        }
        if health.isUp { await flush() }
    }

    func flush() async {
        do { try await counter.flush() } catch {
            logger.warning("could not write the minute counts; kept for the next try", metadata: ["error": "\(error)"])
        }
    }
}
