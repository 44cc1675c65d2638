import Foundation
import GRDB
import Testing

@testable import RichPushServer

/// SQLite's group commit: many callers' writes in shared transactions, each caller answered with its own result or
/// its own error, whatever happens to the others' tasks.
@Suite struct GroupCommitTests {
    static func pool() throws -> (DatabasePool, URL) {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("group-commit-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let pool = try DatabasePool(path: dir.appendingPathComponent("db.sqlite").path)
        try pool.write { db in try db.execute(sql: "CREATE TABLE t (n INTEGER PRIMARY KEY)") }
        return (pool, dir)
    }

    @Test func everyCallerGetsItsOwnResult() async throws {
        let (pool, dir) = try Self.pool()
        defer { try? FileManager.default.removeItem(at: dir) }
        // A small batch, so that several leaders take turns and some callers wait behind batches not their own.
        let commits = GroupCommit(pool: pool, maxBatch: 7)
        let results = try await withThrowingTaskGroup(of: (Int, Int).self) { group in
            for i in 0..<500 {
                group.addTask {
                    let v = try await commits.write { db -> Int in
                        try db.execute(sql: "INSERT INTO t (n) VALUES (?)", arguments: [i])
                        return i * 2
                    }
                    return (i, v)
                }
            }
            var all: [Int: Int] = [:]
            for try await (i, v) in group { all[i] = v }
            return all
        }
        #expect(results.count == 500)
        #expect(results.allSatisfy { $0.value == $0.key * 2 })
        #expect(try await pool.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM t") } == 500)
    }

    @Test func aFailingPieceFailsAlone() async throws {
        let (pool, dir) = try Self.pool()
        defer { try? FileManager.default.removeItem(at: dir) }
        let commits = GroupCommit(pool: pool)
        let outcomes = await withTaskGroup(of: (Int, Bool).self) { group in
            for i in 0..<200 {
                group.addTask {
                    do {
                        // Every tenth inserts a row that is already there (the primary key refuses it).
                        try await commits.write { db in
                            try db.execute(sql: "INSERT INTO t (n) VALUES (?)", arguments: [i % 10 == 0 ? -1 : i])
                        }
                        return (i, true)
                    } catch {
                        return (i, false)
                    }
                }
            }
            var all: [Int: Bool] = [:]
            for await (i, ok) in group { all[i] = ok }
            return all
        }
        // One of the twenty duplicates is written first and stands; the other nineteen fail, nothing else does.
        #expect(outcomes.values.filter { !$0 }.count == 19)
        #expect(outcomes.filter { $0.key % 10 != 0 }.allSatisfy { $0.value })
        #expect(try await pool.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM t") } == 181)
    }

    @Test func aCancelledCallerFailsNoOnesWrite() async throws {
        let (pool, dir) = try Self.pool()
        defer { try? FileManager.default.removeItem(at: dir) }
        let commits = GroupCommit(pool: pool, maxBatch: 5)
        let answered = try await withThrowingTaskGroup(of: Int.self) { group in
            for i in 0..<300 {
                group.addTask {
                    try await commits.write { db in
                        try db.execute(sql: "INSERT INTO t (n) VALUES (?)", arguments: [i])
                    }
                    return 1
                }
            }
            // Every caller cancelled, most of them before they start: leaders among them, with batches to take.
            group.cancelAll()
            var n = 0
            for try await one in group { n += one }
            return n
        }
        // A write once handed over is done and answered: cancellation stops no batch, the leader's included.
        #expect(answered == 300)
        #expect(try await pool.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM t") } == 300)
    }
}
