import Foundation
import GRDB
import NIOConcurrencyHelpers

/// Runs small write transactions from many concurrent callers as one SQLite transaction: while one commit is
/// in progress, new work waits and then goes in together. A failing piece does not take the others down: the
/// group is then replayed one piece per transaction, and only the failing caller gets the error.
///
/// SQLite has one writer; with dozens of API requests in flight, one transaction (and one thread hop) for all of
/// them instead of one each is what lets the accept path keep up.
final class GroupCommit: Sendable {
    private final class Item: @unchecked Sendable {
        let apply: (Database) throws -> Void
        let complete: (Error?) -> Void
        init(apply: @escaping (Database) throws -> Void, complete: @escaping (Error?) -> Void) {
            self.apply = apply
            self.complete = complete
        }
    }

    private struct State {
        var pending: [Item] = []
        var running = false
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
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, Error>) in
            let result = NIOLockedValueBox<T?>(nil)
            let item = Item(apply: { db in
                result.withLockedValue { $0 = nil }
                let v = try body(db)
                result.withLockedValue { $0 = v }
            }) { error in
                if let error {
                    continuation.resume(throwing: error)
                } else if let v = result.withLockedValue({ $0 }) {
                    continuation.resume(returning: v)
                } else {
                    continuation.resume(
                        throwing: DatabaseError(resultCode: .SQLITE_ERROR, message: "group commit lost a result")
                    )
                }
            }
            let start = state.withLockedValue { s -> Bool in
                s.pending.append(item)
                if s.running { return false }
                s.running = true
                return true
            }
            // The drain is a task of its own: in a caller's task, that caller's cancellation would fail the others'
            // writes of its batch, and it would wait for every batch that came while it drained.
            if start { Task { await self.drain() } }
        }
    }

    private func drain() async {
        while true {
            let items: [Item] = state.withLockedValue { s in
                if s.pending.isEmpty {
                    s.running = false
                    return []
                }
                let n = min(s.pending.count, maxBatch)
                let taken = Array(s.pending.prefix(n))
                s.pending.removeFirst(n)
                return taken
            }
            if items.isEmpty { return }
            do {
                // All in one transaction; should one piece fail, the transaction is rolled back and each piece
                // runs again in a transaction of its own, so that only the failing one fails.
                try await pool.write { db in
                    for item in items { try item.apply(db) }
                }
                for item in items { item.complete(nil) }
            } catch {
                for item in items {
                    do {
                        try await pool.write { db in try item.apply(db) }
                        item.complete(nil)
                    } catch {
                        item.complete(error)
                    }
                }
            }
        }
    }
}
