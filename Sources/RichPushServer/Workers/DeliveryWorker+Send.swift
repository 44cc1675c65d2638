import Foundation
import NIOConcurrencyHelpers

extension DeliveryWorker {
    /// The sender's answer, or a retryable `send_deadline` failure once the deadline passes. The send is
    /// cancelled then and left to end on its own; should it still reach the provider, the delivery is sent again
    /// later (at least once, as after a crash). It runs in a task of its own for that: a child task that ignored its
    /// cancellation would hold its worker's loop until it ended.
    func sendWithinDeadline(_ d: DeliveryRecord) async -> SendResult {
        let limit = min(max(0.001, configuration.effectiveSendDeadline), 86_400)
        let sender = self.sender
        let deadlines = self.deadlines
        let waiting = NIOLockedValueBox<CheckedContinuation<SendResult, Never>?>(nil)
        let sending = NIOLockedValueBox<Task<Void, Never>?>(nil)
        // The caller's cancellation (the worker's hard stop) cancels the send; its answer is waited for as ever.
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<SendResult, Never>) in
                waiting.withLockedValue { $0 = continuation }
                let task = Task {
                    // The clock starts with the send itself, not when the task was asked for: a busy process delays
                    // both alike. One sweep for all the worker's sends, rather than a timer each (scheduling and
                    // cancelling a timer per send cost a tenth of the node's CPU while delivering).
                    let entry = deadlines.add(after: limit) {
                        guard let c = waiting.withLockedValue({ $0.take() }) else { return }
                        sending.withLockedValue { $0?.cancel() }
                        c.resume(returning: .failed(.retry, reason: "send_deadline"))
                    }
                    let result = await sender.send(d)
                    deadlines.remove(entry)
                    waiting.withLockedValue { $0.take() }?.resume(returning: result)
                }
                sending.withLockedValue { $0 = task }
                // Cancelled before the task was there for the handler to cancel.
                if Task.isCancelled { task.cancel() }
            }
        } onCancel: {
            sending.withLockedValue { $0?.cancel() }
        }
    }

    /// How long a delivery waits for an older version's send to the same target to end.
    static let versionWait: TimeInterval = 0.2

    /// The deliveries of a claim to send now: of those whose notification has versions, a version older than the
    /// newest ends as superseded (never sent), and one with an older version to the same target in flight goes
    /// back to the queue for ``versionWait`` (its attempt not counted), so that no device is sent an older state
    /// after a newer one.
    func sortVersions(_ batch: [DeliveryRecord]) async throws -> [DeliveryRecord] {
        guard let updates else { return batch }
        let verdicts = try await updates.verdicts(batch)
        guard !verdicts.isEmpty else { return batch }
        var superseded: [Settlement] = []
        var waiting: [Int64] = []
        for d in batch {
            switch verdicts[d.id] {
            case .superseded(let version)?:
                metrics?.attempt(
                    app: d.appID,
                    provider: d.provider,
                    state: DeliveryState.superseded.rawValue,
                    reason: nil
                )
                minutes?.add(d.notificationID, .failed, reason: DeliveryState.superseded.rawValue)
                superseded.append(Settlement(id: d.id, .finish(.superseded(by: version))))
            case .wait?: waiting.append(d.id)
            case nil: break
            }
        }
        let t = now()
        if !superseded.isEmpty { _ = try await queue.settle(superseded, owner: configuration.owner, now: t) }
        if !waiting.isEmpty {
            _ = try await updates.release(
                waiting,
                owner: configuration.owner,
                notBefore: t.addingTimeInterval(Self.versionWait),
                now: t
            )
        }
        return batch.filter { verdicts[$0.id] == nil }
    }

    /// Sends one delivery and turns its result into the settlement the retry policy calls for (with the metrics
    /// and the minute counts); the result is returned too, for the origin's circuit.
    /// The reason a sender gives for a delivery it could not read the app or message of (nothing was sent).
    static let databaseUnavailable = "database_unavailable"
    /// When such a delivery is due again: the `Retry-After` the API gives while its database is away.
    static let databaseRetrySeconds: TimeInterval = 5

    func process(_ d: DeliveryRecord) async -> (Settlement, SendResult) {
        let result = await sendWithinDeadline(d)
        switch result {
        case .delivered(let id):
            metrics?.attempt(app: d.appID, provider: d.provider, state: "delivered", reason: nil)
            minutes?.add(d.notificationID, .delivered)
            metrics?.delivered(provider: d.provider, secondsSinceDue: now().timeIntervalSince(d.notBefore))
            return (Settlement(id: d.id, .finish(.delivered(providerID: id))), result)
        case .failed(_, let reason) where reason == Self.databaseUnavailable:
            // Never sent: its app or message could not be read. Back to the queue untried, its attempt not counted,
            // due when the database is told to be worth trying again: counted, a long outage spent a delivery's
            // attempts without a send, and each pushed its next try further out by the backoff.
            metrics?.deferred(reason: reason)
            let due = now().addingTimeInterval(jittered(Self.databaseRetrySeconds))
            return (Settlement(id: d.id, .release(notBefore: due, reason: reason)), result)
        case let .failed(decision, reason):
            switch configuration.retry.action(
                after: decision,
                reason: reason,
                attempts: d.attempts,
                expiresAt: d.expiresAt,
                now: now(),
                random: { Double.random(in: 0..<1) }
            ) {
            case .retry(let at):
                metrics?.attempt(app: d.appID, provider: d.provider, state: "retry", reason: reason)
                return (Settlement(id: d.id, .reschedule(notBefore: at, reason: reason)), result)
            case .final(let outcome):
                metrics?.attempt(app: d.appID, provider: d.provider, state: outcome.state.rawValue, reason: reason)
                minutes?.add(d.notificationID, .failed, reason: reason)
                return (Settlement(id: d.id, .finish(outcome)), result)
            }
        }
    }
}
