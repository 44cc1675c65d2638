import Foundation
import GRDB
import NIOConcurrencyHelpers
import RichPushCore

/// An update in place to accept: the update's own notification (id, message, the answer to store) and the root
/// it updates. It goes to every target the root was sent to, at once.
public struct UpdatePlan: Sendable {
    public var notification: StoredNotification
    public var rootID: String
    public var idempotencyKey: String?
    public var expiresAt: Date?
    /// How many versions the root may have, and how fast they may come.
    public var limits: UpdateLimits

    public init(
        notification: StoredNotification,
        rootID: String,
        idempotencyKey: String?,
        expiresAt: Date?,
        limits: UpdateLimits = UpdateLimits()
    ) {
        self.notification = notification
        self.rootID = rootID
        self.idempotencyKey = idempotencyKey
        self.expiresAt = expiresAt
        self.limits = limits
    }
}

/// What one notification's updates may make the server do: at most `maxVersions` versions (each copies the root's
/// deliveries: a million-device notification updated without end would queue without end), and at most `perSecond`
/// a second with bursts of `burst`, a token bucket per notification (`updates.max_versions`, `updates.per_second`,
/// `updates.burst`). Both are checked in the transaction that takes the version, from what the database holds (the
/// versions' creation times), so every node of a cluster counts the same.
public struct UpdateLimits: Sendable, Equatable {
    public var maxVersions: Int
    public var perSecond: Double
    public var burst: Double

    public init(maxVersions: Int = 100, perSecond: Double = 2, burst: Double = 10) {
        // Held to sane values: they are compared and divided by below.
        self.maxVersions = min(max(maxVersions, 1), 1_000_000)
        self.perSecond = perSecond.isFinite ? min(max(perSecond, 0.001), 1_000) : 2
        self.burst = burst.isFinite ? min(max(burst, 1), 1_000_000) : 10
    }

    /// Refuses the next version of a root whose newest is `latest`, created (the root, then each version in
    /// order) at `times`: past the count, or when the bucket replayed over those times holds less than one update.
    public func check(latest: Int, times: [Date], now: Date) throws(UpdateRefused) {
        guard latest < maxVersions else { throw .tooManyVersions(maxVersions) }
        var tokens = burst
        var last = times.first ?? now
        for t in times.dropFirst() {
            tokens = min(burst, tokens + max(0, t.timeIntervalSince(last)) * perSecond) - 1
            last = t
        }
        tokens = min(burst, tokens + max(0, now.timeIntervalSince(last)) * perSecond)
        guard tokens >= 1 else { throw .tooFast(retryAfter: (1 - tokens) / perSecond) }
    }
}

/// What accepting an update did.
public struct UpdateAccepted: Sendable {
    /// As stored (for a replayed idempotency key: the first, with its first answer).
    public var notification: StoredNotification
    public var created: Bool
    public var version: Int
    /// Deliveries queued for it.
    public var queued: Int
    /// Deliveries of the version before that were still queued and now will not be sent.
    public var superseded: Int
}

/// A notification's place among its versions.
public struct NotificationFamily: Sendable, Hashable {
    public var id: String
    public var rootID: String
    /// 0 for the root.
    public var version: Int
    /// The root's newest version.
    public var latest: Int
    public var appID: String
    /// The root's registry fan-out is still adding deliveries.
    public var fanOutPending: Bool
}

/// Why an update was not accepted.
public enum UpdateRefused: Error, Sendable, Hashable {
    /// The root is gone (swept) or belongs to another app.
    case noRoot
    /// The root's fan-out has not finished: its targets are not all known yet.
    case fanOutPending
    /// The root has the most versions it may have (``UpdateLimits/maxVersions``).
    case tooManyVersions(Int)
    /// Updates to the root came faster than ``UpdateLimits/perSecond``: the seconds until one more is allowed.
    case tooFast(retryAfter: TimeInterval)
}

/// What a worker does with a claimed delivery of a notification that has versions.
public enum VersionVerdict: Sendable, Hashable {
    /// A newer version exists: not sent.
    case superseded(by: Int)
    /// An older version to the same target is being sent: put back until it has ended.
    case wait
}

/// Updates in place: accepting a new version of a notification, and the check workers make before a send. One
/// implementation per backend, over the same statements (``NotificationVersions``); the conformance suite runs on
/// every one.
public protocol NotificationUpdates: Sendable {
    /// Where a notification stands among its versions; nil when there is no such notification.
    func family(of id: String) async throws -> NotificationFamily?

    /// Stores the update as the root's next version, queues it for the root's targets and supersedes what is
    /// still queued of the version before, in one transaction. `respond` makes the stored answer from the
    /// version, deliveries queued and deliveries superseded. Throws ``UpdateRefused``.
    func accept(
        _ plan: UpdatePlan,
        respond: @escaping @Sendable (_ version: Int, _ queued: Int, _ superseded: Int) -> JSONValue
    ) async throws -> UpdateAccepted

    /// For the deliveries of a claimed batch that belong to a family: superseded, or wait (those absent go).
    func verdicts(_ batch: [DeliveryRecord]) async throws -> [Int64: VersionVerdict]

    /// Puts deliveries `owner` holds back in the queue, due at `notBefore`, without counting the attempt;
    /// returns those put back.
    func release(_ ids: [Int64], owner: String, notBefore: Date, now: Date) async throws -> Set<Int64>
}

extension NotificationVersions {
    /// The verdicts for a batch, from its deliveries' families and what of their older versions is in flight
    /// (`inFlight(root, version)`: delivery id and target). Written once for every backend.
    static func verdicts(
        _ batch: [DeliveryRecord],
        families: [String: NotificationFamily],
        inFlight: (String, Int) throws -> [(Int64, String)]
    ) rethrows -> [Int64: VersionVerdict] {
        var out: [Int64: VersionVerdict] = [:]
        let mine = Set(batch.map(\.id))
        var busy: [String: Set<String>] = [:]
        for d in batch {
            guard let f = families[d.notificationID] else { continue }
            if f.version < f.latest {
                out[d.id] = .superseded(by: f.latest)
                continue
            }
            guard f.version > 0 else { continue }
            let key = "\(f.rootID)|\(f.version)"
            if busy[key] == nil {
                // This batch's own older deliveries are superseded above, not sent: they hold nothing up.
                busy[key] = Set(try inFlight(f.rootID, f.version).filter { !mine.contains($0.0) }.map(\.1))
            }
            if busy[key]?.contains(d.target.stored) == true { out[d.id] = .wait }
        }
        return out
    }

    static func family(_ row: Row) -> NotificationFamily {
        NotificationFamily(
            id: row[0],
            rootID: row[1],
            version: row[2],
            latest: row[3],
            appID: row[4],
            fanOutPending: (row[5] as String) == FanOutState.pending.rawValue
        )
    }
}

/// Updates in the server's SQLite database. An update is its own transaction (not the group commit: it copies the
/// root's targets, which may be many, and a refusal must not replay the group).
public final class SQLiteNotificationUpdates: NotificationUpdates {
    let pool: DatabasePool

    public init(pool: DatabasePool) { self.pool = pool }

    public func family(of id: String) async throws -> NotificationFamily? {
        try await pool.read { db in
            try Row.fetchAll(db, query: NotificationVersions.family(id)).first.map(NotificationVersions.family)
        }
    }

    public func accept(
        _ plan: UpdatePlan,
        respond: @escaping @Sendable (Int, Int, Int) -> JSONValue
    ) async throws -> UpdateAccepted {
        try await pool.write { db in
            guard
                let root = try Row.fetchAll(db, query: NotificationVersions.family(plan.rootID)).first.map(
                    NotificationVersions.family
                ), root.id == root.rootID, root.appID == plan.notification.appID
            else { throw UpdateRefused.noRoot }
            guard !root.fanOutPending else { throw UpdateRefused.fanOutPending }
            if let key = plan.idempotencyKey,
                let row = try Row.fetchAll(
                    db,
                    query: NotificationVersions.byIdempotencyKey(appID: root.appID, key: key)
                )
                .first
            {
                let first = try SQLiteServerStore.notification(row)
                let version = try Row.fetchAll(db, query: NotificationVersions.family(first.id)).first?[2] as Int?
                return UpdateAccepted(
                    notification: first,
                    created: false,
                    version: version ?? 0,
                    queued: 0,
                    superseded: 0
                )
            }
            let times = try Row.fetchAll(db, query: NotificationVersions.times(root: root.id)).map {
                Date(timeIntervalSince1970: $0[0] as Double)
            }
            try plan.limits.check(latest: root.latest, times: times, now: Date())
            let version = root.latest + 1
            try db.execute(query: NotificationVersions.bump(root: root.id, from: root.latest))
            let now = Date()
            var superseded = 0
            if let previous = try String.fetchOne(
                db,
                query: NotificationVersions.versionID(root: root.id, version: root.latest)
            ) {
                try db.execute(query: NotificationVersions.supersede(previous, by: version, now: now))
                superseded = db.changesCount
            }
            var n = plan.notification
            try db.execute(
                query: NotificationVersions.copyTargets(root: root.id, to: n.id, expiresAt: plan.expiresAt, now: now)
            )
            let queued = db.changesCount
            n.response = respond(version, queued, superseded)
            try db.execute(
                query: NotificationVersions.insert(
                    n,
                    idempotencyKey: plan.idempotencyKey,
                    root: root.id,
                    version: version
                )
            )
            return UpdateAccepted(
                notification: n,
                created: true,
                version: version,
                queued: queued,
                superseded: superseded
            )
        }
    }

    public func verdicts(_ batch: [DeliveryRecord]) async throws -> [Int64: VersionVerdict] {
        let ids = Array(Set(batch.map(\.notificationID)))
        guard !ids.isEmpty else { return [:] }
        return try await pool.read { db in
            let families = try Row.fetchAll(db, query: NotificationVersions.families(ids)).map(
                NotificationVersions.family
            )
            guard !families.isEmpty else { return [:] }
            return try NotificationVersions.verdicts(
                batch,
                families: Dictionary(families.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
            ) { root, version in
                try Row.fetchAll(db, query: NotificationVersions.inFlight(root: root, below: version)).map {
                    ($0[0] as Int64, $0[1] as String)
                }
            }
        }
    }

    public func release(_ ids: [Int64], owner: String, notBefore: Date, now: Date) async throws -> Set<Int64> {
        guard !ids.isEmpty else { return [] }
        return try await pool.write { db in
            Set(
                try Row.fetchAll(
                    db,
                    query: NotificationVersions.release(ids, owner: owner, notBefore: notBefore, now: now)
                ).map { $0[0] as Int64 }
            )
        }
    }
}

/// The in-memory twin: the same rules over the memory store and queue.
public final class MemoryNotificationUpdates: NotificationUpdates {
    struct Place {
        var root: String
        var version: Int
    }
    let store: MemoryServerStore
    let queue: MemoryDeliveryQueue
    let intake: any NotificationIntake
    /// Each update's place; a notification absent is a root (version 0).
    private let places = NIOLockedValueBox<[String: Place]>([:])
    /// Each root's newest version.
    private let latest = NIOLockedValueBox<[String: Int]>([:])
    /// One update at a time, as a database transaction would.
    private let accepting = AsyncSerial()

    init(store: MemoryServerStore, queue: MemoryDeliveryQueue, intake: any NotificationIntake) {
        self.store = store
        self.queue = queue
        self.intake = intake
    }

    public func family(of id: String) async throws -> NotificationFamily? {
        guard try await store.notification(id: id) != nil else { return nil }
        let place = places.withLockedValue { $0[id] } ?? Place(root: id, version: 0)
        guard let root = try await store.notification(id: place.root) else { return nil }
        let pending = try await intake.pendingFanOuts().contains(root.id)
        return NotificationFamily(
            id: id,
            rootID: root.id,
            version: place.version,
            latest: latest.withLockedValue { $0[root.id] } ?? 0,
            appID: root.appID,
            fanOutPending: pending
        )
    }

    public func accept(
        _ plan: UpdatePlan,
        respond: @escaping @Sendable (Int, Int, Int) -> JSONValue
    ) async throws -> UpdateAccepted {
        try await accepting.run {
            guard let root = try await self.family(of: plan.rootID), root.id == root.rootID,
                root.appID == plan.notification.appID
            else { throw UpdateRefused.noRoot }
            guard !root.fanOutPending else { throw UpdateRefused.fanOutPending }
            if let key = plan.idempotencyKey, let first = try await self.store.notification(appID: root.appID, key: key)
            {
                let v = self.places.withLockedValue { $0[first.id]?.version } ?? 0
                return UpdateAccepted(notification: first, created: false, version: v, queued: 0, superseded: 0)
            }
            try plan.limits.check(latest: root.latest, times: try await self.times(root: root.id), now: Date())
            let version = root.latest + 1
            var n = plan.notification
            // The answer is made before the insert, which keeps it for a replay: the counts are known first.
            let previous: String? =
                root.latest == 0
                ? root.id
                : self.places.withLockedValue { p -> String? in
                    p.first { $0.value.root == root.id && $0.value.version == root.latest }?.key
                }
            let targets = await self.queue.deliveries(notificationID: root.id).filter { $0.state != .pruned }
            var stillQueued = 0
            if let previous { stillQueued = await self.queue.counts(notificationID: previous)[.queued, default: 0] }
            n.response = respond(version, targets.count, stillQueued)
            let (stored, created) = try await self.store.insertNotification(n, idempotencyKey: plan.idempotencyKey)
            guard created else {
                let v = self.places.withLockedValue { $0[stored.id]?.version } ?? 0
                return UpdateAccepted(notification: stored, created: false, version: v, queued: 0, superseded: 0)
            }
            self.latest.withLockedValue { $0[root.id] = version }
            self.places.withLockedValue { $0[n.id] = Place(root: root.id, version: version) }
            let now = Date()
            var superseded = 0
            if let previous {
                superseded = await self.queue.supersede(notificationID: previous, by: version, now: now)
            }
            await self.queue.enqueue(
                targets.map {
                    NewDelivery(
                        notificationID: n.id,
                        appID: n.appID,
                        provider: $0.provider,
                        target: $0.target,
                        notBefore: now,
                        expiresAt: plan.expiresAt
                    )
                }
            )
            return UpdateAccepted(
                notification: n,
                created: true,
                version: version,
                queued: targets.count,
                superseded: superseded
            )
        }
    }

    /// The root's creation time, then each of its versions' in order.
    func times(root: String) async throws -> [Date] {
        let versions = places.withLockedValue {
            $0.filter { $0.value.root == root }.sorted { $0.value.version < $1.value.version }
        }
        var out: [Date] = []
        for id in [root] + versions.map(\.key) {
            if let n = try await store.notification(id: id) { out.append(n.createdAt) }
        }
        return out
    }

    public func verdicts(_ batch: [DeliveryRecord]) async throws -> [Int64: VersionVerdict] {
        var families: [String: NotificationFamily] = [:]
        for id in Set(batch.map(\.notificationID)) {
            if let f = try await family(of: id), f.version > 0 || f.latest > 0 { families[id] = f }
        }
        guard !families.isEmpty else { return [:] }
        let leased = await queue.leased()
        let places = self.places.withLockedValue { $0 }
        return NotificationVersions.verdicts(batch, families: families) { root, version in
            leased.filter { d in
                let p = places[d.notificationID] ?? Place(root: d.notificationID, version: 0)
                return p.root == root && p.version < version
            }.map { ($0.id, $0.target.stored) }
        }
    }

    public func release(_ ids: [Int64], owner: String, notBefore: Date, now: Date) async throws -> Set<Int64> {
        await queue.release(ids, owner: owner, notBefore: notBefore, now: now)
    }
}

/// Runs async work one piece at a time, in the order asked, each in its caller's task.
final class AsyncSerial: Sendable {
    private let state = NIOLockedValueBox((busy: false, waiting: [CheckedContinuation<Void, Never>]()))

    func run<T: Sendable>(_ body: @Sendable () async throws -> T) async throws -> T {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let now = state.withLockedValue { s -> Bool in
                if !s.busy {
                    s.busy = true
                    return true
                }
                s.waiting.append(c)
                return false
            }
            if now { c.resume() }
        }
        defer {
            let next = state.withLockedValue { s -> CheckedContinuation<Void, Never>? in
                guard !s.waiting.isEmpty else {
                    s.busy = false
                    return nil
                }
                return s.waiting.removeFirst()
            }
            next?.resume()
        }
        return try await body()
    }
}
