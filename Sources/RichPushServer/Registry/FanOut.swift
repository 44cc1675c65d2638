import Foundation

/// Turns one notification for an audience into deliveries, page by page, so that memory stays bounded
/// however many devices match.
public struct FanOut: Sendable {
    public var pageSize: Int

    public init(pageSize: Int = 2000) { self.pageSize = pageSize }

    /// Enqueues a delivery for every device of the audience; returns how many.
    public func enqueue(notificationID: String, appID: String, audience: Audience, registry: DeviceRegistry, queue: DeliveryQueue, notBefore: Date = Date(), expiresAt: Date? = nil) async throws -> Int {
        if let r = registry as? SQLiteDeviceRegistry, let q = queue as? SQLiteDeliveryQueue, r.pool === q.pool,
            let n = try await r.fanOutInDatabase(notificationID: notificationID, appID: appID, audience: audience, notBefore: notBefore, expiresAt: expiresAt, chunk: 50_000)
        {
            return n
        }
        var cursor: Int64 = 0
        var total = 0
        while true {
            let (devices, next) = try await registry.page(appID: appID, audience: audience, after: cursor, limit: pageSize)
            if !devices.isEmpty {
                total += try await queue.enqueue(devices.map {
                    NewDelivery(notificationID: notificationID, appID: appID, provider: $0.provider, target: $0.token, notBefore: notBefore, expiresAt: expiresAt)
                })
            }
            guard let next else { return total }
            cursor = next
        }
    }
}
