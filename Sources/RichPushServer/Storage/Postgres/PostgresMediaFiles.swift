import Foundation
import NIOCore
import PostgresNIO

/// Hosted media in PostgreSQL, in chunks of 1 MB (`media_chunks`), so that a 50 MB video is written and read a
/// chunk at a time, never whole in a node's memory.
public final class PostgresMediaFiles: SharedMediaFiles {
    let db: PostgresDatabase
    static let chunkSize = 1 << 20

    public init(database: PostgresDatabase) { db = database }

    public func put(name: String, file: URL, keepUntil: Date) async throws {
        if try await keep(name: name, until: keepUntil) { return }
        let handle = try FileHandle(forReadingFrom: file)
        // Closing a file read to the end has nothing to report.
        defer { try? handle.close() }
        let size = Int(try handle.seekToEnd())
        try handle.seek(toOffset: 0)
        let chunks = (size + Self.chunkSize - 1) / Self.chunkSize
        try await db.transaction { c in
            let logger = self.db.logger
            let claimed = try await c.query(
                """
                INSERT INTO media_files (name, size, chunks, keep_until) VALUES (\(name), \(Int64(size)), \(chunks), \(keepUntil))
                ON CONFLICT (name) DO NOTHING RETURNING name
                """,
                logger: logger
            ).collect()
            guard !claimed.isEmpty else { return }  // another node stored the same bytes meanwhile
            for seq in 0..<chunks {
                guard let data = try handle.read(upToCount: Self.chunkSize) else { break }
                _ = try await c.query(
                    "INSERT INTO media_chunks (name, seq, bytes) VALUES (\(name), \(seq), \(ByteBuffer(bytes: data)))",
                    logger: logger
                ).collect()
            }
        }
    }

    public func fetch(name: String, to destination: URL) async throws -> Date? {
        guard let row = try await db.rows("SELECT chunks, keep_until FROM media_files WHERE name = \(name)").first
        else { return nil }
        let (chunks, keepUntil) = try row.decode((Int, Date).self)
        FileManager.default.createFile(atPath: destination.path, contents: nil)
        let out = try FileHandle(forWritingTo: destination)
        // A failed write was thrown already; closing after it has nothing to add.
        defer { try? out.close() }
        // One chunk per query: memory holds one chunk, whatever the file's size.
        for seq in 0..<chunks {
            guard
                let buffer = try await db.rows("SELECT bytes FROM media_chunks WHERE name = \(name) AND seq = \(seq)")
                    .first?.decode(ByteBuffer.self)
            else {
                throw DatabaseUnavailable("media \(name) lacks its chunk \(seq)")
            }
            try out.write(contentsOf: buffer.readableBytesView)
        }
        return keepUntil
    }

    @discardableResult
    public func keep(name: String, until: Date) async throws -> Bool {
        !(try await db.rows(
            "UPDATE media_files SET keep_until = greatest(keep_until, \(until)) WHERE name = \(name) RETURNING name"
        )).isEmpty
    }

    public func sweep(before cutoff: Date) async throws -> (files: Int, bytes: Int) {
        let rows = try await db.rows("DELETE FROM media_files WHERE keep_until < \(cutoff) RETURNING size")
        return (rows.count, try rows.reduce(0) { $0 + Int(try $1.decode(Int64.self)) })
    }
}
