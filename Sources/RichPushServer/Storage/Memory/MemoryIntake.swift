import Foundation
import NIOConcurrencyHelpers
import RichPushCore

/// The intake over the in-memory twins, with SQLite's behaviour: tokens, FCM topics and conditions are queued with
/// the notification; a registry audience (all, user, tag, topic) is accepted with its fan-out pending, listed by
/// ``pendingFanOuts()`` until ``completeFanOut(notificationID:)`` runs it (once).
public final class MemoryIntake: NotificationIntake {
    let store: any ServerStore
    let registry: any DeviceRegistry
    let queue: any DeliveryQueue
    /// Accepted notifications whose fan-out has not run, oldest first.
    private let pending = NIOLockedValueBox<[(id: String, plan: AcceptPlan)]>([])
    /// Told when deliveries were queued (``WorkQueued``).
    let queued: @Sendable () -> Void
    /// Opens a notification that queued no delivery for `notification.completed`, as the databases' intakes do.
    let webhooks: MemoryWebhookStore?

    public init(
        store: any ServerStore,
        registry: any DeviceRegistry,
        queue: any DeliveryQueue,
        webhooks: MemoryWebhookStore? = nil,
        queued: @escaping @Sendable () -> Void = {}
    ) {
        self.queued = queued
        self.webhooks = webhooks
        self.store = store
        self.registry = registry
        self.queue = queue
    }

    public func accept(_ plan: AcceptPlan, respond: @escaping @Sendable (Int?) -> JSONValue) async throws -> Accepted {
        let accepted = try await insert(plan, respond: respond)
        if accepted.created && accepted.queued > 0 { queued() }
        return accepted
    }

    /// Stores one notification with its deliveries, without telling the workers.
    private func insert(_ plan: AcceptPlan, respond: (Int?) -> JSONValue) async throws -> Accepted {
        var n = plan.notification
        var count: Int?
        if let direct = plan.audience.directTargets { count = direct.count }
        if case .tokens(let ts) = plan.audience {
            count = 0
            for t in Set(ts) where try await registry.device(appID: n.appID, token: t) != nil { count! += 1 }
        }
        n.response = respond(count)
        let (stored, created) = try await store.insertNotification(n, idempotencyKey: plan.idempotencyKey)
        guard created else { return Accepted(notification: stored, created: false, queued: 0, fanOutPending: false) }
        guard count != nil else {
            pending.withLockedValue { $0.append((n.id, plan)) }
            return Accepted(notification: stored, created: true, queued: 0, fanOutPending: true)
        }
        let added = try await FanOut().enqueue(plan.fanOut, registry: registry, queue: queue)
        if added == 0 { webhooks?.open(notificationID: n.id, appID: n.appID, now: Date()) }
        return Accepted(notification: stored, created: true, queued: added, fanOutPending: false)
    }

    /// One by one: the twin has no transaction to share (a failure part way leaves the earlier ones stored).
    public func acceptAll(
        _ plans: [AcceptPlan],
        respond: @escaping @Sendable (Int, Int?) -> JSONValue
    ) async throws
        -> [Accepted]
    {
        var all: [Accepted] = []
        for (i, plan) in plans.enumerated() { all.append(try await insert(plan, respond: { respond(i, $0) })) }
        if all.contains(where: { $0.created && $0.queued > 0 }) { queued() }
        return all
    }

    public func completeFanOut(notificationID: String) async throws -> Int {
        let taken = pending.withLockedValue { all -> AcceptPlan? in
            guard let i = all.firstIndex(where: { $0.id == notificationID }) else { return nil }
            return all.remove(at: i).plan
        }
        guard let plan = taken else { return 0 }
        do {
            let added = try await FanOut().enqueue(plan.fanOut, registry: registry, queue: queue)
            if added > 0 {
                queued()
            } else {
                webhooks?.open(notificationID: notificationID, appID: plan.notification.appID, now: Date())
            }
            return added
        } catch {
            // Still pending, as a fan-out cut short is in the database.
            pending.withLockedValue { $0.insert((notificationID, plan), at: 0) }
            throw error
        }
    }

    public func pendingFanOuts() async throws -> [String] { pending.withLockedValue { $0.map(\.id) } }
}
