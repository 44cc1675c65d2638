import Foundation
import GRDB

/// Bytes uploaded per app and day in the server's SQLite file: one writer, so a read and a write in one
/// transaction never lose a count.
public final class SQLiteUploadLedger: UploadLedger {
    let pool: DatabasePool

    /// Expects the server store's migrations (``SQLiteServerStore``), which create the table.
    init(pool: DatabasePool) { self.pool = pool }

    public func reserve(app: String, day: Int, bytes: Int, limit: Int) async throws -> Int {
        try await pool.write { db in
            try db.execute(query: UploadSQL.dropOld(before: day))
            try db.execute(query: UploadSQL.open(app: app, day: day))
            let used = try Row.fetchAll(db, query: UploadSQL.used(app: app, day: day)).first.map { $0[0] as Int } ?? 0
            let granted = max(0, min(bytes, limit - used))
            if granted > 0 { try db.execute(query: UploadSQL.set(app: app, day: day, bytes: used + granted)) }
            return granted
        }
    }

    public func release(app: String, day: Int, bytes: Int) async throws {
        try await pool.write { db in try db.execute(query: UploadSQL.release(app: app, day: day, bytes: bytes)) }
    }

    public func used(app: String, day: Int) async throws -> Int {
        try await pool.read { db in
            try Row.fetchAll(db, query: UploadSQL.used(app: app, day: day)).first.map { $0[0] as Int } ?? 0
        }
    }
}
