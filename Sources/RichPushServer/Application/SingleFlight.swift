import NIOConcurrencyHelpers

/// One run of a piece of work per key at a time, in the caller's own task: the first caller (the leader) runs it,
/// and those that ask for the same key while it runs wait for its result rather than running it again. With
/// `limit`, at most that many keys run at once; past it a new key is answered `full` at once.
///
/// The leader's cancellation reaches the work, and its followers get the work's answer to it as their own: work
/// run through this type answers a cancellation as it answers a failure that may be tried again.
final class SingleFlight<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    enum Answer {
        /// This caller ran the work.
        case led(Value)
        /// Another caller was running it: its result.
        case joined(Value)
        /// `limit` keys were running.
        case full
    }

    private let running = NIOLockedValueBox<[Key: [CheckedContinuation<Value?, Never>]]>([:])
    let limit: Int

    init(limit: Int = .max) { self.limit = max(1, limit) }

    /// Keys running now.
    var count: Int { running.withLockedValue { $0.count } }

    private enum Turn {
        case lead, full
    }

    func run(_ key: Key, _ work: () async -> Value) async -> Answer {
        var turn = Turn.lead
        let joined: Value? = await withCheckedContinuation { (c: CheckedContinuation<Value?, Never>) in
            let t = running.withLockedValue { r -> Turn? in
                if r[key] != nil {
                    r[key]!.append(c)
                    return nil
                }
                guard r.count < limit else { return .full }
                r[key] = []
                return .lead
            }
            if let t {
                turn = t
                c.resume(returning: nil)
            }
        }
        if let joined { return .joined(joined) }
        if case .full = turn { return .full }
        let value = await work()
        for follower in running.withLockedValue({ $0.removeValue(forKey: key) ?? [] }) {
            follower.resume(returning: value)
        }
        return .led(value)
    }
}
