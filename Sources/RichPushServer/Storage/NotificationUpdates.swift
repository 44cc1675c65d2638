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
