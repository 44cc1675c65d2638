import Foundation
import NIOConcurrencyHelpers
import RichPushCore

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

    /// Told when deliveries were queued (``WorkQueued``).
    let queued: @Sendable () -> Void
    /// Opens an update that queued no delivery for `notification.completed`, as the databases' updates do.
    let webhooks: MemoryWebhookStore?

    init(
        store: MemoryServerStore,
        queue: MemoryDeliveryQueue,
        intake: any NotificationIntake,
        webhooks: MemoryWebhookStore? = nil,
        queued: @escaping @Sendable () -> Void = {}
    ) {
        self.webhooks = webhooks
        self.queued = queued
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
        let accepted = try await accepting.run {
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
            if targets.isEmpty { self.webhooks?.open(notificationID: n.id, appID: n.appID, now: now) }
            return UpdateAccepted(
                notification: n,
                created: true,
                version: version,
                queued: targets.count,
                superseded: superseded
            )
        }
        if accepted.created && accepted.queued > 0 { queued() }
        return accepted
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
