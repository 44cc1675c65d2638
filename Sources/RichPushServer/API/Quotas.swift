import Foundation
import NIOConcurrencyHelpers

/// What one app may make the server spend on media: bytes uploaded per UTC day, and fetches of other servers'
/// media (preflight checks, the media of a send) at once; and a cap on fetches at once for the whole node. Past a
/// limit the request is answered 429 with `Retry-After` (the next UTC day for uploads, a second for fetches).
/// The admin key is not counted.
///
/// Each counts what it protects. Uploads are bytes stored: counted where they are kept, in the database
/// (``UploadLedger``), so a cluster of N nodes allows the figure once, not N times. Fetches are this node's
/// outbound connections: only media that must be fetched takes a place (the server's own hosted media, read from
/// its store, and a URL whose kept verdict answers, take none), and on a cluster each of N live nodes allows
/// 1 / N of the figures (``share(among:)``, as ``RateLimiter`` shares a key's rate).
public final class Quotas: Sendable {
    public struct Limits: Sendable, Equatable {
        /// Bytes one app may upload to `/v1/media` in a UTC day, on all nodes together.
        public var uploadBytesPerDay: Int
        /// Media fetches one app may have running at once (a cluster's nodes share it).
        public var fetchesPerApp: Int
        /// Media fetches the node runs at once, all apps together (a cluster's nodes share it).
        public var fetches: Int

        public init(uploadBytesPerDay: Int = 1 << 30, fetchesPerApp: Int = 8, fetches: Int = 64) {
            self.uploadBytesPerDay = uploadBytesPerDay
            self.fetchesPerApp = fetchesPerApp
            self.fetches = fetches
        }
    }

    private struct State {
        var fetching: [String: Int] = [:]
        var fetchingTotal = 0
        /// Live nodes sharing the fetch limits.
        var nodes = 1
    }

    public let limits: Limits
    /// Where uploaded bytes are counted.
    public let ledger: any UploadLedger
    private let state = NIOLockedValueBox(State())

    public init(_ limits: Limits = Limits(), ledger: any UploadLedger = MemoryUploadLedger()) {
        self.limits = limits
        self.ledger = ledger
    }

    static func day(_ now: Date) -> Int { Int((now.timeIntervalSince1970 / 86_400).rounded(.down)) }

    /// Shares the fetch limits among `nodes` live nodes (1: this node alone): each allows its part, at least one.
    public func share(among nodes: Int) {
        state.withLockedValue { $0.nodes = min(max(nodes, 1), 10_000) }
    }

    /// The fetch limits on this node now: per app, and for the node.
    public var nodeFetchLimits: (perApp: Int, node: Int) {
        let n = state.withLockedValue { $0.nodes }
        return (max(1, limits.fetchesPerApp / n), max(1, limits.fetches / n))
    }

    /// An upload's charge for `app` (nil: the admin key, not counted): ``UploadCharge/add(_:)`` each part as it
    /// arrives, ``UploadCharge/close()`` at the end.
    func upload(app: String?, now: @escaping @Sendable () -> Date = { Date() }) -> UploadCharge {
        UploadCharge(app: app, limit: limits.uploadBytesPerDay, ledger: ledger, now: now)
    }

    /// Counts `bytes` more uploaded by `app` (nil: the admin key); 429 once the day's bytes would pass the limit
    /// (what arrived before stays counted: it was received).
    func chargeUpload(app: String?, bytes: Int, now: Date = Date()) async throws {
        let charge = upload(app: app, now: { now })
        do { try await charge.add(bytes, step: 0) } catch {
            await charge.close()
            throw error
        }
        await charge.close()
    }

    /// Bytes `app` uploaded today, on every node.
    public func uploaded(app: String, now: Date = Date()) async throws -> Int {
        try await ledger.used(app: app, day: Self.day(now))
    }

    /// Runs `body`, which fetches `count` media URLs for `app` (nil: the admin key, counted only node-wide), when
    /// neither the app's nor the node's limit of fetches at once would pass; else 429 with `Retry-After: 1`.
    func fetching<T>(app: String?, count: Int, _ body: () async throws -> T) async throws -> T {
        guard count > 0 else { return try await body() }
        let refused: String? = state.withLockedValue { s in
            let perApp = max(1, limits.fetchesPerApp / s.nodes)
            let node = max(1, limits.fetches / s.nodes)
            let shared = s.nodes > 1 ? " on this node, one of \(s.nodes) sharing quotas.fetches_per_app" : ""
            let mine = app.map { s.fetching[$0, default: 0] } ?? 0
            if let app, mine + count > perApp {
                return
                    "app \(app) has \(mine) media fetches running and asks for \(count) more (at most \(perApp) at once\(shared); quotas.fetches_per_app)"
            }
            if s.fetchingTotal + count > node {
                return
                    "the server has \(s.fetchingTotal) media fetches running (at most \(node) at once; quotas.fetches)"
            }
            s.fetchingTotal += count
            if let app { s.fetching[app] = mine + count }
            return nil
        }
        if let refused { throw APIError(.quotaExceeded, refused + "; retry after 1 s", retryAfter: 1) }
        defer {
            state.withLockedValue { s in
                s.fetchingTotal -= count
                if let app {
                    let left = s.fetching[app, default: count] - count
                    s.fetching[app] = left > 0 ? left : nil
                }
            }
        }
        return try await body()
    }

    /// Fetches running now: for one app, and on the node.
    public func fetchesRunning(app: String? = nil) -> Int {
        state.withLockedValue { s in app.map { s.fetching[$0, default: 0] } ?? s.fetchingTotal }
    }
}

/// One upload's part of its app's bytes for the day. The ledger is asked for room a step at a time (a mebibyte, or
/// what a part needs), not once per part: an upload of 50 MB costs the database about 50 small writes; what was
/// taken and not used goes back at ``close()``.
final class UploadCharge: Sendable {
    private struct State {
        /// Bytes taken from the ledger and not yet used, and the day they were taken on.
        var room = 0
        var day: Int?
    }
    let app: String?
    let limit: Int
    let ledger: any UploadLedger
    let now: @Sendable () -> Date
    private let state = NIOLockedValueBox(State())
    static let step = 1 << 20

    init(app: String?, limit: Int, ledger: any UploadLedger, now: @escaping @Sendable () -> Date) {
        self.app = app
        self.limit = limit
        self.ledger = ledger
        self.now = now
    }

    /// Counts `bytes` more; 429 `quota-exceeded` with `Retry-After` (until the next UTC day) past the day's limit.
    func add(_ bytes: Int, step: Int = UploadCharge.step) async throws {
        guard let app, bytes > 0 else { return }
        let t = now()
        let today = Quotas.day(t)
        let (room, day) = state.withLockedValue { ($0.room, $0.day) }
        if day != today, let day, room > 0 {
            // A new UTC day: what the old one had left goes back to it.
            try await ledger.release(app: app, day: day, bytes: room)
            state.withLockedValue { $0 = State() }
        }
        if state.withLockedValue({ $0.room }) < bytes {
            let want = max(bytes - state.withLockedValue { $0.room }, step)
            let granted = try await ledger.reserve(app: app, day: today, bytes: want, limit: limit)
            state.withLockedValue {
                $0.room += granted
                $0.day = today
            }
        }
        let enough: Bool = state.withLockedValue { s in
            guard s.room >= bytes else { return false }
            s.room -= bytes
            return true
        }
        guard enough else {
            let nextDay = Double(today + 1) * 86_400
            let wait = max(1, Int((nextDay - t.timeIntervalSince1970).rounded(.up)))
            throw APIError(
                .quotaExceeded,
                "this app has uploaded its \(limit) bytes for today (UTC; quotas.upload_megabytes_per_day, counted on every node); retry after \(wait) s",
                retryAfter: wait
            )
        }
    }

    /// Gives back what was taken and not used.
    func close() async {
        let (room, day) = state.withLockedValue { s -> (Int, Int?) in
            defer { s = State() }
            return (s.room, s.day)
        }
        guard let app, let day, room > 0 else { return }
        try? await ledger.release(app: app, day: day, bytes: room)
    }
}

/// Bytes uploaded per app and UTC day, counted where every node sees them: the database. The statements are the
/// same on SQLite and PostgreSQL (``UploadSQL``); the memory twin counts alike.
public protocol UploadLedger: Sendable {
    /// Adds up to `bytes` to `app`'s count for `day`, never past `limit`; returns how many were added (0: none
    /// left). Counts of days before the one before `day` are dropped as they are met.
    func reserve(app: String, day: Int, bytes: Int, limit: Int) async throws -> Int
    /// Takes back bytes added and not used.
    func release(app: String, day: Int, bytes: Int) async throws
    /// What `app` has counted for `day`.
    func used(app: String, day: Int) async throws -> Int
}

/// The in-memory twin (and a node alone without a database).
public final class MemoryUploadLedger: UploadLedger {
    private let counts = NIOLockedValueBox<[String: Int]>([:])

    public init() {}

    static func key(_ app: String, _ day: Int) -> String { "\(app)\u{0}\(day)" }

    public func reserve(app: String, day: Int, bytes: Int, limit: Int) async throws -> Int {
        counts.withLockedValue { c in
            c = c.filter { ($0.key.split(separator: "\u{0}").last.flatMap { Int($0) } ?? day) >= day - 1 }
            let used = c[Self.key(app, day), default: 0]
            let granted = max(0, min(bytes, limit - used))
            c[Self.key(app, day)] = used + granted
            return granted
        }
    }

    public func release(app: String, day: Int, bytes: Int) async throws {
        counts.withLockedValue { c in
            let left = c[Self.key(app, day), default: 0] - bytes
            c[Self.key(app, day)] = max(0, left)
        }
    }

    public func used(app: String, day: Int) async throws -> Int {
        counts.withLockedValue { $0[Self.key(app, day), default: 0] }
    }

    /// Forgets an app's days (its deletion).
    func remove(app: String) {
        counts.withLockedValue { c in c = c.filter { !$0.key.hasPrefix(app + "\u{0}") } }
    }
}

/// The ledger's statements, written once for both databases.
enum UploadSQL {
    static let table = """
        CREATE TABLE media_upload_days (app_id TEXT NOT NULL, day INTEGER NOT NULL, bytes BIGINT NOT NULL,
            PRIMARY KEY (app_id, day))
        """

    /// Makes the day's row (nothing when it is there), and drops days before the one before it.
    static func open(app: String, day: Int) -> SQL {
        "INSERT INTO media_upload_days (app_id, day, bytes) VALUES (\(app), \(day), 0) ON CONFLICT (app_id, day) DO NOTHING"
    }
    static func dropOld(before day: Int) -> SQL { "DELETE FROM media_upload_days WHERE day < \(day - 1)" }
    static func used(app: String, day: Int) -> SQL {
        "SELECT bytes FROM media_upload_days WHERE app_id = \(app) AND day = \(day)"
    }
    static func set(app: String, day: Int, bytes: Int) -> SQL {
        "UPDATE media_upload_days SET bytes = \(bytes) WHERE app_id = \(app) AND day = \(day)"
    }
    /// Gives bytes back, never below nothing.
    static func release(app: String, day: Int, bytes: Int) -> SQL {
        """
        UPDATE media_upload_days SET bytes = CASE WHEN bytes > \(bytes) THEN bytes - \(bytes) ELSE 0 END
        WHERE app_id = \(app) AND day = \(day)
        """
    }
}
