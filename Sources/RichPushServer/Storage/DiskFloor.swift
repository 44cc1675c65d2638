import Foundation
import GRDB
import NIOConcurrencyHelpers
import PostgresNIO

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Writes stop before the disk is full: while a watched folder's file system (the SQLite database's, the hosted
/// media's) has less than `minimumFree` bytes free for this process, the API refuses requests that store
/// something with 507 `insufficient-storage`; reads, deletions and the deliveries already accepted go on (their
/// outcomes are small updates in place, and the floor leaves room for them). A database write that finds the disk
/// full all the same (another process filled it between two looks) is answered 507 too, never 500, and SQLite
/// rolls the transaction back: nothing half written.
///
/// The free space is read with `statvfs` at most once a second, whatever the request rate.
public final class DiskFloor: Sendable {
    public let folders: [(name: String, path: String)]
    public let minimumFree: Int64
    let metrics: ServerMetrics?
    private struct State {
        var readAt: Date = .distantPast
        var low: (name: String, free: Int64)?
    }
    private let state = NIOLockedValueBox(State())
    let now: @Sendable () -> Date

    /// `folders`: a name for metrics and messages, and a path on the file system to watch.
    public init(
        folders: [(name: String, path: String)],
        minimumFree: Int64,
        metrics: ServerMetrics? = nil,
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.folders = folders
        self.minimumFree = max(0, minimumFree)
        self.metrics = metrics
        self.now = now
    }

    /// Bytes an unprivileged writer may still use on the file system holding `path` (nil: it cannot be read).
    public static func freeBytes(_ path: String) -> Int64? {
        var s = statvfs()
        guard statvfs(path, &s) == 0 else { return nil }
        let (blocks, size) = (UInt64(s.f_bavail), UInt64(s.f_frsize))
        let (bytes, overflow) = blocks.multipliedReportingOverflow(by: size)
        return overflow || bytes > UInt64(Int64.max) ? Int64.max : Int64(bytes)
    }

    /// The refusal to give a write now, or nil while every watched disk has room.
    func refusal() -> APIError? {
        guard minimumFree > 0, !folders.isEmpty else { return nil }
        let t = now()
        let stale = state.withLockedValue { s -> Bool in
            guard t.timeIntervalSince(s.readAt) >= 1 || t < s.readAt else { return false }
            s.readAt = t
            return true
        }
        if stale { read() }
        guard let low = state.withLockedValue({ $0.low }) else { return nil }
        metrics?.writeRefused(reason: "disk")
        return APIError(
            .insufficientStorage,
            "the \(low.name) disk has \(low.free >> 20) MB free, below the floor of \(minimumFree >> 20) MB "
                + "(disk.min_free_megabytes): nothing was stored; free space on the server, then try again",
            retryAfter: 60
        )
    }

    /// Reads every watched folder's free space now.
    func read() {
        var low: (String, Int64)?
        for folder in folders {
            guard let free = Self.freeBytes(folder.path) else { continue }
            metrics?.diskFree(folder.name, bytes: free)
            if free < minimumFree, low == nil || free < low!.1 { low = (folder.name, free) }
        }
        state.withLockedValue { $0.low = low }
    }

    /// Whether an error is the database saying its disk is full (SQLite's SQLITE_FULL, PostgreSQL's 53100).
    public static func isDiskFull(_ error: any Error) -> Bool {
        if let e = error as? DatabaseError { return e.resultCode == .SQLITE_FULL }
        if let p = error as? PSQLError, p.code == .server { return p.serverInfo?[.sqlState] == "53100" }
        if let e = error as? PostgresTransactionError {
            return [e.beginError, e.closureError, e.commitError].contains { $0.map(isDiskFull) ?? false }
        }
        return false
    }
}
