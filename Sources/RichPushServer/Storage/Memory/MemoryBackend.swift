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
    public let liveTokens: any LiveTokenStore = MemoryLiveTokenStore()
    public let updates: any NotificationUpdates
    public let uploads: any UploadLedger = MemoryUploadLedger()
    let memoryStore: MemoryServerStore
    let memoryQueue: MemoryDeliveryQueue
    let memoryReceipts: MemoryReceiptStore
    public let health = DatabaseHealth()
    public let workQueued: WorkQueued

    public init() {
        let (store, registry, queue) = (MemoryServerStore(), MemoryDeviceRegistry(), MemoryDeliveryQueue())
        memoryStore = store
        self.registry = registry
        memoryQueue = queue
        let workQueued = WorkQueued()
        self.workQueued = workQueued
        intake = MemoryIntake(store: store, registry: registry, queue: queue) { workQueued.tell() }
        memoryReceipts = MemoryReceiptStore(queue: queue)
        updates = MemoryNotificationUpdates(store: store, queue: queue, intake: intake) { workQueued.tell() }
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

    /// No SQL here: every fan-out and count goes through the registry and the queue.
    public func fanOutInDatabase(_ request: FanOutRequest) async throws -> Int? { nil }

    public func countByProviderInDatabase(appID: String, audience: Audience) async throws -> [DeliveryProvider: Int]? {
        nil
    }
}
