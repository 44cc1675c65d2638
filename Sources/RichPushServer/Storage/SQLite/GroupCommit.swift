import Foundation
import GRDB
import NIOConcurrencyHelpers

/// Runs small write transactions from many concurrent callers as one SQLite transaction: while one commit is
/// in progress, new work waits and then goes in together. A failing piece does not take the others down: the
/// group is then replayed one piece per transaction, and only the failing caller gets the error.
///
/// SQLite has one writer; with dozens of API requests in flight, one transaction (and one thread hop) for all of
/// them instead of one each is what lets the accept path keep up.
///
/// No task of its own runs the batches: a caller leads. The first caller to find nothing running takes a batch
/// and waits for its commit; then, if work is pending, it hands the lead to the owner of the oldest pending piece
/// and returns (it never waits for batches that are not its own). The commit runs on SQLite's writer queue and is
/// not cancelled with the leader's task, so a caller's cancellation fails no one's write, its own included.
final class GroupCommit: Sendable {
    /// What a waiting caller is told: its piece is done (with its error, if it failed), or it leads the next batch.
    private enum Turn {
        case done((any Error)?)
        case lead
    }

    /// A caller's piece of work; `turn` and `waiter` are read and written under the group's lock only.
    private final class Item: @unchecked Sendable {
        let apply: (Database) throws -> Void
        var turn: Turn?
        var waiter: CheckedContinuation<Turn, Never>?
        init(apply: @escaping (Database) throws -> Void) { self.apply = apply }
    }

    private struct State {
        var pending: [Item] = []
        /// A leader is taking or committing a batch, or has been named.
        var running = false

        /// Tells `item` its turn: resumes its caller if it waits (the continuation is returned, to be resumed
        /// outside the lock), or keeps the turn for when it comes to wait.
        mutating func give(_ turn: Turn, to item: Item) -> (CheckedContinuation<Turn, Never>, Turn)? {
            if let waiter = item.waiter {
                item.waiter = nil
                return (waiter, turn)
            }
            item.turn = turn
            return nil
        }
    }

    let pool: DatabasePool
    /// At most this many pieces of work in one transaction.
    let maxBatch: Int
    private let state = NIOLockedValueBox(State())

    init(pool: DatabasePool, maxBatch: Int = 256) {
        self.pool = pool
        self.maxBatch = maxBatch
    }

    /// Runs `body` inside a write transaction shared with other callers; returns once it is committed.
    func write<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        let result = NIOLockedValueBox<T?>(nil)
        let item = Item(apply: { db in
            result.withLockedValue { $0 = nil }
            let v = try body(db)
            result.withLockedValue { $0 = v }
        })
        var leads = state.withLockedValue { s -> Bool in
            s.pending.append(item)
            if s.running { return false }
            s.running = true
            return true
        }
        while true {
            if leads { await commitNextBatch() }
            switch await turn(of: item) {
            case .lead:
                leads = true
            case .done(let error?):
                throw error
            case .done(nil):
                guard let v = result.withLockedValue({ $0 }) else {
                    throw DatabaseError(resultCode: .SQLITE_ERROR, message: "group commit lost a result")
                }
                return v
            }
        }
    }

    /// Waits for the item's turn (or takes the one already given).
    private func turn(of item: Item) async -> Turn {
        await withCheckedContinuation { (continuation: CheckedContinuation<Turn, Never>) in
            let given = state.withLockedValue { _ -> Turn? in
                if let t = item.turn {
                    item.turn = nil
                    return t
                }
                item.waiter = continuation
                return nil
            }
            if let given { continuation.resume(returning: given) }
        }
    }

    /// Takes the oldest pending pieces (at most `maxBatch`), commits them on the writer's queue, tells each its
    /// outcome, and names the next leader (or ends the run when nothing is pending).
    private func commitNextBatch() async {
        let items: [Item] = state.withLockedValue { s in
            let n = min(s.pending.count, maxBatch)
            defer { s.pending.removeFirst(n) }
            return Array(s.pending.prefix(n))
        }
        let errors: [(any Error)?] = await withCheckedContinuation { continuation in
            pool.asyncWriteWithoutTransaction { db in
                do {
                    // All in one transaction; should one piece fail, the transaction is rolled back and each
                    // piece runs again in a transaction of its own, so that only the failing one fails.
                    try db.inTransaction {
                        for item in items { try item.apply(db) }
                        return .commit
                    }
                    continuation.resume(returning: Array(repeating: nil, count: items.count))
                } catch {
                    continuation.resume(
                        returning: items.map { item -> (any Error)? in
                            do {
                                try db.inTransaction {
                                    try item.apply(db)
                                    return .commit
                                }
                                return nil
                            } catch {
                                return error
                            }
                        }
                    )
                }
            }
        }
        let wakes = state.withLockedValue { s -> [(CheckedContinuation<Turn, Never>, Turn)] in
            var wakes = zip(items, errors).compactMap { s.give(.done($1), to: $0) }
            if let next = s.pending.first {
                if let w = s.give(.lead, to: next) { wakes.append(w) }
            } else {
                s.running = false
            }
            return wakes
        }
        for (waiter, turn) in wakes { waiter.resume(returning: turn) }
    }
}
