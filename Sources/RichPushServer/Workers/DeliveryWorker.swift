import Foundation
import RichPushTransport

/// Drains the queue: claims batches under a lease, sends with bounded concurrency, and records every outcome or
/// reschedules by the retry policy. Tokens the provider reports gone are handed to `prune`.
public final class DeliveryWorker: Sendable {
    public struct Configuration: Sendable {
        public var owner: String
        public var batchSize: Int
        /// Sends in flight at once (HTTP/2 bookkeeping grows with open streams: a few hundred is the sweet spot).
        public var concurrency: Int
        public var lease: TimeInterval
        /// How long to wait when nothing is due.
        public var idleWait: TimeInterval
        public var retry: RetryPolicy

        public init(owner: String = "worker-\(UUID().uuidString.prefix(8))", batchSize: Int = 200, concurrency: Int = 200, lease: TimeInterval = 60, idleWait: TimeInterval = 0.2, retry: RetryPolicy = RetryPolicy()) {
            self.owner = owner
            self.batchSize = batchSize
            self.concurrency = concurrency
            self.lease = lease
            self.idleWait = idleWait
            self.retry = retry
        }
    }

    public let configuration: Configuration
    let queue: DeliveryQueue
    let sender: DeliverySender
    let prune: @Sendable (DeliveryRecord, String) async -> Void
    let now: @Sendable () -> Date
    let metrics: ServerMetrics?

    public init(configuration: Configuration = .init(), queue: DeliveryQueue, sender: DeliverySender, metrics: ServerMetrics? = nil, now: @escaping @Sendable () -> Date = { Date() }, prune: @escaping @Sendable (DeliveryRecord, String) async -> Void = { _, _ in }) {
        self.configuration = configuration
        self.queue = queue
        self.sender = sender
        self.metrics = metrics
        self.now = now
        self.prune = prune
    }

    /// Claims and processes one batch; returns how many deliveries it handled.
    @discardableResult
    public func runOnce() async throws -> Int {
        let batch = try await queue.claim(owner: configuration.owner, limit: configuration.batchSize, now: now(), lease: configuration.lease)
        guard !batch.isEmpty else { return 0 }
        try await withThrowingTaskGroup(of: Void.self) { group in
            var next = 0
            func add() {
                guard next < batch.count else { return }
                let d = batch[next]
                next += 1
                group.addTask { try await self.process(d) }
            }
            for _ in 0..<min(configuration.concurrency, batch.count) { add() }
            while try await group.next() != nil { add() }
        }
        return batch.count
    }

    /// Runs until the task is cancelled; a cancelled worker finishes its current batch first.
    public func run() async throws {
        while !Task.isCancelled {
            let handled = try await withTaskCancellationHandler { try await runOnce() } onCancel: {}
            if handled == 0 { try? await Task.sleep(nanoseconds: UInt64(configuration.idleWait * 1e9)) }
        }
    }

    func process(_ d: DeliveryRecord) async throws {
        let owner = configuration.owner
        switch await sender.send(d) {
        case .delivered(let id):
            try await queue.finish(id: d.id, owner: owner, outcome: .delivered(providerID: id), now: now())
            metrics?.attempt(provider: d.provider, state: "delivered", reason: nil)
            metrics?.delivered(provider: d.provider, secondsSinceDue: now().timeIntervalSince(d.notBefore))
        case let .failed(decision, reason):
            switch configuration.retry.action(after: decision, reason: reason, attempts: d.attempts, expiresAt: d.expiresAt, now: now(), random: { Double.random(in: 0..<1) }) {
            case .retry(let at):
                try await queue.reschedule(id: d.id, owner: owner, notBefore: at, reason: reason, now: now())
                metrics?.attempt(provider: d.provider, state: "retry", reason: reason)
            case .final(let outcome):
                metrics?.attempt(provider: d.provider, state: outcome.state.rawValue, reason: reason)
                if try await queue.finish(id: d.id, owner: owner, outcome: outcome, now: now()), outcome.state == .pruned {
                    await prune(d, reason)
                }
            }
        }
    }
}
