import Foundation
import Logging
import NIOConcurrencyHelpers
import ServiceLifecycle

/// Work a node does over and over until the server stops. Every periodic loop of the server is one of these, so
/// that how a loop pauses, how it ends and what it reports is written once.
enum Periodic {
    /// Runs `turn` after `firstPause`, then again after the pause each turn returns, until the server's graceful
    /// shutdown or the task's cancellation, either of which cuts short the turn or the pause under way. A turn
    /// handles its own failures (a loop that stopped at its first failure would leave its work undone until a
    /// restart); an error it throws anyway ends the loop and is logged, unless it is the cancellation.
    static func repeatUntilShutdown(
        _ name: String,
        logger: Logger,
        firstPause: TimeInterval = 0,
        _ turn: @escaping @Sendable () async throws -> TimeInterval
    ) async {
        do {
            try await cancelWhenGracefulShutdown {
                var pause = firstPause
                while !Task.isCancelled {
                    if pause > 0 { try await Task.sleep(nanoseconds: UInt64(min(pause, 86_400) * 1e9)) }
                    pause = try await turn()
                }
            }
        } catch is CancellationError {
            // The server stopping: how every loop ends.
        } catch {
            logger.error("a periodic loop ended", metadata: ["loop": .string(name), "error": .string("\(error)")])
        }
    }
}

/// Jobs run by one loop, each at its own interval: the node's own (SQLite, one node) or the cluster's leader's.
final class JobSchedule: Sendable {
    let jobs: [PeriodicJob]
    private let due: NIOLockedValueBox<[String: Date]>

    init(_ jobs: [PeriodicJob], now: Date = Date()) {
        self.jobs = jobs
        due = NIOLockedValueBox(Dictionary(jobs.map { ($0.name, now) }, uniquingKeysWith: { a, _ in a }))
    }

    /// Runs each job that is due, one after the other; one that fails is logged and waits its interval like one
    /// that succeeded. Returns the pause before the next look. Throws only when the task is cancelled (a job cut
    /// short by the server stopping has not failed).
    func runDue(logger: Logger, describe: (any Error) -> String = { "\($0)" }) async throws -> TimeInterval {
        for job in jobs where due.withLockedValue({ $0[job.name, default: .distantPast] }) <= Date() {
            try Task.checkCancellation()
            logger.trace("periodic job", metadata: ["job": .string(job.name)])
            do { try await job.run() } catch {
                if Task.isCancelled || error is CancellationError { throw CancellationError() }
                logger.warning(
                    "periodic job failed",
                    metadata: ["job": .string(job.name), "error": .string(describe(error))]
                )
            }
            let next = Date().addingTimeInterval(job.interval)
            due.withLockedValue { $0[job.name] = next }
        }
        return min(1, jobs.map(\.interval).min() ?? 1)
    }
}
