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
            // The batches run on SQLite's writer queue, one after another, each started by the one before: no
            // caller's task runs them (its cancellation would fail the others' writes, and it would wait for every
            // batch that came while it drained), and no task of their own.
            if start { drainNext() }
        }
    }

    /// Commits the next batch on the writer's queue, and when it is done starts the one after; stops when nothing
    /// is pending.
    private func drainNext() {
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
        pool.asyncWriteWithoutTransaction { db in
            do {
                // All in one transaction; should one piece fail, the transaction is rolled back and each piece
                // runs again in a transaction of its own, so that only the failing one fails.
                try db.inTransaction {
                    for item in items { try item.apply(db) }
                    return .commit
                }
                for item in items { item.complete(nil) }
            } catch {
                for item in items {
                    do {
                        try db.inTransaction {
                            try item.apply(db)
                            return .commit
                        }
                        item.complete(nil)
                    } catch {
                        item.complete(error)
                    }
                }
            }
            self.drainNext()
        }
    }
}
