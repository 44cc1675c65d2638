import Foundation
import NIOConcurrencyHelpers
import RichPushCore

/// The in-memory twin of ``SQLiteBackend``, for fast tests: the twins of the store, registry and queue, and an
/// intake that behaves like SQLite's (a registry audience is accepted with its fan-out pending).
public struct MemoryBackend: StorageBackend {
    public var store: any ServerStore { memoryStore }
    public let registry: any DeviceRegistry
    public var queue: any DeliveryQueue { memoryQueue }
    public let intake: any NotificationIntake
    public var receipts: any ReceiptStore { memoryReceipts }
    public var liveTokens: any LiveTokenStore { memoryLiveTokens }
    public let updates: any NotificationUpdates
    public var uploads: any UploadLedger { memoryUploads }
    let memoryLiveTokens: MemoryLiveTokenStore
    let memoryUploads = MemoryUploadLedger()
    let memoryRegistry: MemoryDeviceRegistry
    let memoryStore: MemoryServerStore
    let memoryQueue: MemoryDeliveryQueue
    let memoryReceipts: MemoryReceiptStore
    let memoryWebhooks: MemoryWebhookStore
    public var webhooks: any WebhookStore { memoryWebhooks }
    public let health = DatabaseHealth()
    public let workQueued: WorkQueued

    public init() {
        // The webhooks ask the queue, store and intake made after them whether a notification has ended.
        let parts = NIOLockedValueBox<(MemoryDeliveryQueue, MemoryServerStore, any NotificationIntake)?>(nil)
        let webhooks = MemoryWebhookStore { id in
            guard let (queue, store, intake) = parts.withLockedValue({ $0 }),
                await store.notification(id: id) != nil
            else { return nil }
            let counts = await queue.counts(notificationID: id)
            let pending = (try? await intake.pendingFanOuts().contains(id)) ?? false
            let open = counts[.queued, default: 0] + counts[.leased, default: 0] > 0 || pending
            return (!open, counts.map { ($0.key.rawValue, $0.value) }.sorted { $0.0 < $1.0 })
        }
        memoryWebhooks = webhooks
        memoryLiveTokens = MemoryLiveTokenStore(webhooks: webhooks)
        let (store, registry, queue) = (
            MemoryServerStore(), MemoryDeviceRegistry(), MemoryDeliveryQueue(webhooks: webhooks)
        )
        memoryStore = store
        self.registry = registry
        memoryRegistry = registry
        memoryQueue = queue
        let workQueued = WorkQueued()
        self.workQueued = workQueued
        intake = MemoryIntake(store: store, registry: registry, queue: queue, webhooks: webhooks) { workQueued.tell() }
        memoryReceipts = MemoryReceiptStore(queue: queue)
        updates = MemoryNotificationUpdates(store: store, queue: queue, intake: intake, webhooks: webhooks) {
            workQueued.tell()
        }
        let intake = self.intake
        parts.withLockedValue { $0 = (queue, store, intake) }
    }

    public func sweepNotifications(before cutoff: Date, limit: Int) async throws -> Int {
        let pending = Set(try await intake.pendingFanOuts())
        var removed = 0
        for id in await memoryStore.notifications(before: cutoff, limit: limit) where !pending.contains(id) {
            let counts = await memoryQueue.counts(notificationID: id)
            guard counts[.queued, default: 0] + counts[.leased, default: 0] == 0 else { continue }
            await memoryQueue.remove(notificationID: id)
            memoryReceipts.remove(notificationID: id)
            await memoryStore.removeNotification(id: id)
            removed += 1
        }
        return removed
    }

    public func deleteApp(id: String) async throws -> Bool {
        guard await memoryStore.app(id: id) != nil else { return false }
        for key in await memoryStore.keys(appID: id, after: "", limit: Int.max) {
            _ = await memoryStore.revokeKey(appID: id, keyID: key.keyID)
        }
        await purge(id)
        return await memoryStore.removeApp(id: id)
    }

    public func purgeDeletedApps(now: Date) async throws -> Int {
        let watched = await memoryStore.watchedDeletions()
        for id in watched {
            await purge(id)
            await memoryStore.removeKeys(of: id)
        }
        if !watched.isEmpty {
            let kept = await memoryStore.notificationIDs()
            memoryReceipts.removeMinutes { kept.contains($0) }
        }
        await memoryStore.forgetDeletions(before: now.addingTimeInterval(-AppDeletion.watch))
        return watched.count
    }

    /// An app's notifications (with their deliveries and receipts), devices, live tokens and upload days.
    func purge(_ id: String) async {
        while case let ids = await memoryStore.notificationIDs(appID: id, limit: AppDeletion.chunk), !ids.isEmpty {
            for n in ids {
                await memoryQueue.remove(notificationID: n)
                memoryReceipts.remove(notificationID: n)
                await memoryStore.removeNotification(id: n)
            }
        }
        await memoryQueue.remove(appID: id)
        await memoryRegistry.remove(appID: id)
        memoryLiveTokens.remove(appID: id)
        memoryUploads.remove(app: id)
        memoryWebhooks.remove(appID: id)
    }

    /// No SQL here: every fan-out and count goes through the registry and the queue.
    public func fanOutInDatabase(_ request: FanOutRequest) async throws -> Int? { nil }

    public func countByProviderInDatabase(appID: String, audience: Audience) async throws -> [DeliveryProvider: Int]? {
        nil
    }
}
