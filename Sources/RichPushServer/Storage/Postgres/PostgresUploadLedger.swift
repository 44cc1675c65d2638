import Foundation
import PostgresNIO

/// Bytes uploaded per app and day in the shared PostgreSQL database: the day's row is locked while its count is
/// taken, so nodes uploading for one app at once take from the same figure in turn.
public final class PostgresUploadLedger: UploadLedger {
    let db: PostgresDatabase

    init(db: PostgresDatabase) { self.db = db }

    public func reserve(app: String, day: Int, bytes: Int, limit: Int) async throws -> Int {
        try await db.transaction { [logger = db.logger] c in
            func rows(_ q: SQL) async throws -> [PostgresRow] {
                try await c.query(q.postgres, logger: logger).collect()
            }
            _ = try await rows(UploadSQL.dropOld(before: day))
            _ = try await rows(UploadSQL.open(app: app, day: day))
            let used = try await rows(UploadSQL.used(app: app, day: day) + " FOR UPDATE").first?.decode(Int.self) ?? 0
            let granted = max(0, min(bytes, limit - used))
            if granted > 0 { _ = try await rows(UploadSQL.set(app: app, day: day, bytes: used + granted)) }
            return granted
        }
    }

    public func release(app: String, day: Int, bytes: Int) async throws {
        _ = try await db.rows(UploadSQL.release(app: app, day: day, bytes: bytes).postgres)
    }

    public func used(app: String, day: Int) async throws -> Int {
        try await db.rows(UploadSQL.used(app: app, day: day).postgres).first?.decode(Int.self) ?? 0
    }
}
