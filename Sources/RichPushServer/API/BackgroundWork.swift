import Foundation
import NIOConcurrencyHelpers

/// Work that runs after an answer was given (registry fan-outs). A failed run is tried again with growing pauses
/// until it succeeds or the work is cancelled; what is left when the process dies is resumed at the next start
/// (the fan-out's progress is stored).
public final class BackgroundWork: Sendable {
    private let tasks = NIOLockedValueBox<[UUID: Task<Void, Never>]>([:])

    public init() {}

    /// Runs `body` until it succeeds; `onFailure` hears of each failed run.
    func run(
        _ body: @escaping @Sendable () async throws -> Void,
        onFailure: @escaping @Sendable (Error) -> Void = { _ in }
    ) {
        let id = UUID()
        tasks.withLockedValue { tasks in
            tasks[id] = Task {
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
                _ = self.tasks.withLockedValue { $0.removeValue(forKey: id) }
            }
        }
    }

    /// How many are running.
    public var count: Int { tasks.withLockedValue { $0.count } }

    /// Waits until nothing is running.
    public func idle() async {
        while let next = tasks.withLockedValue({ $0.values.first }) { await next.value }
    }

    /// Stops what is running (it resumes at the next start).
    public func cancelAll() {
        for t in tasks.withLockedValue({ Array($0.values) }) { t.cancel() }
    }
}
