import Foundation
import NIOConcurrencyHelpers
import RichPushCore
import RichPushServer
import RichPushTransport

/// Where one send goes: a device token, an FCM topic or an FCM condition (the report writes it in its stored form,
/// `topic:NAME`, as the server's deliveries do).
typealias SendTarget = FCMTarget

/// One send's answer.
enum Attempt: Sendable {
    case delivered(providerID: String?)
    /// The provider's reason (or a transport label), what it means, and what to do about it.
    case failed(RetryDecision, reason: String, detail: String?)
}

/// Sends one target through one provider.
protocol TargetSender: Sendable {
    var provider: String { get }
    func send(_ target: SendTarget) async -> Attempt
}

/// How a target ended, as printed and reported.
struct TargetOutcome: Sendable {
    enum State: String, Sendable, CaseIterable {
        case delivered, failed
        /// The provider says the token is gone: delete it.
        case pruned
        /// Its time to live passed before it could be delivered.
        case expired
        /// Stopped (Ctrl-C) before it was sent, or while waiting to be sent again.
        case notSent = "not_sent"
        /// A repeat of a token earlier in the file: sent once.
        case skipped
        /// Still queued on the server when `richpush send --server` stopped following it.
        case pending
    }

    var target: String
    var provider: String
    var state: State
    var reason: String?
    var providerID: String?
    var attempts: Int
    var detail: String?
}

/// Set once, by the first Ctrl-C (or SIGTERM): no new send starts, and a target waiting for a retry stops waiting.
final class StopSignal: Sendable {
    private let flag = NIOLockedValueBox(false)

    var isSet: Bool { flag.withLockedValue { $0 } }

    func set() { flag.withLockedValue { $0 = true } }

    /// Sleeps until `date`, or until the signal is set (checked ten times a second).
    func sleep(until date: Date) async {
        while !isSet {
            let left = date.timeIntervalSinceNow
            if left <= 0 { return }
            try? await Task.sleep(nanoseconds: UInt64(min(left, 0.1) * 1e9))
        }
    }
}

/// Sends to many targets with bounded concurrency, retrying by the server workers' policy, and hands every
/// outcome to `record` exactly once: every target read from `next` ends as delivered, failed, pruned, expired,
/// skipped (a repeat) or not sent (stopped).
struct BulkSend: Sendable {
    var concurrency: Int
    var retry: RetryPolicy
    /// The message's last moment (its TTL or expiration): a retry past it is not made.
    var expiresAt: Date?
    /// The sender for a target, or why it cannot be sent at all (a malformed token, checked before any send).
    var route: @Sendable (SendTarget) -> Result<TargetSender, TargetProblem>
    var stop: StopSignal
    var record: @Sendable (TargetOutcome) -> Void
    /// Told of each retry: the reason, what it means, and the wait before the next attempt.
    var retrying: @Sendable (_ reason: String, _ detail: String?, _ wait: TimeInterval) -> Void = { _, _, _ in }

    struct TargetProblem: Error, Sendable {
        var provider: String
        var reason: String
        var detail: String
    }

    /// Runs until `next` returns nil and every send has ended, or until stopped; after a stop, the targets not
    /// yet read are recorded as not sent.
    func run(next: () throws -> SendTarget?) async throws {
        var seen = Set<Int>()
        // Repeats are told apart by hash within this process: 64 bits make a false repeat among a million
        // tokens about one chance in thirty million.
        func firstTime(_ t: SendTarget) -> Bool { seen.insert(t.hashValue).inserted }

        try await withThrowingTaskGroup(of: Void.self) { group in
            var running = 0
            while !stop.isSet, let target = try next() {
                guard firstTime(target) else {
                    record(
                        .init(
                            target: target.storedForm,
                            provider: "",
                            state: .skipped,
                            reason: "duplicate",
                            attempts: 0,
                            detail: "a repeat of a token earlier in the file: sent once"
                        )
                    )
                    continue
                }
                let sender: TargetSender
                switch route(target) {
                case .failure(let p):
                    record(
                        .init(
                            target: target.storedForm,
                            provider: p.provider,
                            state: .failed,
                            reason: p.reason,
                            attempts: 0,
                            detail: p.detail
                        )
                    )
                    continue
                case .success(let s): sender = s
                }
                if running >= concurrency {
                    try await group.next()
                    running -= 1
                }
                running += 1
                group.addTask { record(await self.deliver(target, through: sender)) }
            }
            try await group.waitForAll()
        }
        while let target = try next() {
            let repeatOfEarlier = !firstTime(target)
            record(
                .init(
                    target: target.storedForm,
                    provider: "",
                    state: repeatOfEarlier ? .skipped : .notSent,
                    reason: repeatOfEarlier ? "duplicate" : "interrupted",
                    attempts: 0,
                    detail: repeatOfEarlier ? nil : "stopped before it was sent"
                )
            )
        }
    }

    /// One target to its end: sent, and sent again while the policy says so.
    func deliver(_ target: SendTarget, through sender: TargetSender) async -> TargetOutcome {
        var attempts = 0
        while true {
            attempts += 1
            switch await sender.send(target) {
            case .delivered(let id):
                return .init(
                    target: target.storedForm,
                    provider: sender.provider,
                    state: .delivered,
                    providerID: id,
                    attempts: attempts
                )
            case let .failed(decision, reason, detail):
                let action = retry.action(
                    after: decision,
                    reason: reason,
                    attempts: attempts,
                    expiresAt: expiresAt,
                    now: Date(),
                    random: { Double.random(in: 0..<1) }
                )
                switch action {
                case .final(let o):
                    let state: TargetOutcome.State =
                        o.state == .pruned ? .pruned : o.state == .expired ? .expired : .failed
                    return .init(
                        target: target.storedForm,
                        provider: sender.provider,
                        state: state,
                        reason: o.reason ?? reason,
                        attempts: attempts,
                        detail: detail
                    )
                case .retry(let at):
                    retrying(reason, detail, at.timeIntervalSinceNow)
                    await stop.sleep(until: at)
                    if stop.isSet {
                        return .init(
                            target: target.storedForm,
                            provider: sender.provider,
                            state: .notSent,
                            reason: "interrupted",
                            attempts: attempts,
                            detail: "stopped while waiting to retry after \(reason)"
                        )
                    }
                }
            }
        }
    }
}
