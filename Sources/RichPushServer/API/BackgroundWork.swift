import Foundation
import NIOConcurrencyHelpers
import ServiceLifecycle

/// Work that runs after an answer was given (registry fan-outs). A failed run is tried again with growing pauses
/// until it succeeds or the work is cancelled; what is left when the process dies is resumed at the next start
/// (the fan-out's progress is stored).
///
/// In a server it is a `Service`: each piece of work is a child of its `run`, so the group's shutdown stops them
/// all (they resume at the next start). Used without a group (a library user's own process, the tests), each
/// piece runs in a task of its own, which ``cancelAll()`` stops.
public final class BackgroundWork: Service, Sendable {
    typealias Job = @Sendable () async -> Void

    private struct State {
        /// Work taken by the running service; nil while no service runs.
        var inbox: AsyncStream<Job>.Continuation?
        /// Work running in tasks of its own (no service running when it came).
        var detached: [UUID: Task<Void, Never>] = [:]
        /// Pieces not finished, in either place.
        var active = 0
    }

    private let state = NIOLockedValueBox(State())

    public init() {}

    /// Runs the work handed over while it runs, each piece as a child; on the group's shutdown it takes no more
    /// and cancels what is running.
    public func run() async throws {
        let (jobs, inbox) = AsyncStream<Job>.makeStream()
        state.withLockedValue { $0.inbox = inbox }
        await withDiscardingTaskGroup { group in
            await withGracefulShutdownHandler {
                for await job in jobs { group.addTask { await job() } }
            } onGracefulShutdown: {
                inbox.finish()
            }
            state.withLockedValue { $0.inbox = nil }
            group.cancelAll()
        }
    }

    /// Runs `body` until it succeeds; `onFailure` hears of each failed run.
    func run(
        _ body: @escaping @Sendable () async throws -> Void,
        onFailure: @escaping @Sendable (Error) -> Void = { _ in }
    ) {
        let job: Job = { [state] in
            var pause: UInt64 = 500_000_000
            while !Task.isCancelled {
                do {
                    try await body()
                    break
                } catch {
                    onFailure(error)
                    // Only cancellation ends the sleep early; the loop checks it next.
                    try? await Task.sleep(nanoseconds: pause)
                    pause = min(pause * 2, 30_000_000_000)
                }
            }
            state.withLockedValue { $0.active -= 1 }
        }
        state.withLockedValue { s in
            s.active += 1
            if let inbox = s.inbox, case .enqueued = inbox.yield(job) { return }
            let id = UUID()
            // No service running: a task of its own, stopped by cancelAll (the one place this type makes one).
            s.detached[id] = Task { [state] in
                await job()
                _ = state.withLockedValue { $0.detached.removeValue(forKey: id) }
            }
        }
    }

    /// Whether new work goes to the running service (rather than a task of its own).
    public var isServiceRunning: Bool { state.withLockedValue { $0.inbox != nil } }

    /// How many are running.
    public var count: Int { state.withLockedValue { $0.active } }

    /// Waits until nothing is running.
    public func idle() async {
        while count > 0 {
            // Only cancellation ends the sleep early, and then the caller stops waiting.
            do { try await Task.sleep(nanoseconds: 5_000_000) } catch { return }
        }
    }

    /// Stops what runs in tasks of its own (it resumes at the next start); the service's work stops with it.
    public func cancelAll() {
        for t in state.withLockedValue({ Array($0.detached.values) }) { t.cancel() }
    }
}
