import Foundation

/// Turns one notification for an audience into deliveries, page by page, so that memory stays bounded
/// however many devices match: the fan-out of any registry and queue (the in-memory twins'; a database backend
/// has its own inside the database).
public struct FanOut: Sendable {
    public var pageSize: Int

    public init(pageSize: Int = 2000) { self.pageSize = pageSize }

    /// Enqueues a delivery for every device of the audience; returns how many. With `spread` > 0 the deliveries'
    /// times run evenly from `notBefore` to `notBefore + spread` (so that the media downloads they cause spread too).
    public func enqueue(_ r: FanOutRequest, registry: DeviceRegistry, queue: DeliveryQueue) async throws -> Int {
        let (notificationID, appID, audience) = (r.notificationID, r.appID, r.audience)
        let (notBefore, expiresAt, spread) = (r.notBefore, r.expiresAt, r.spread)
        if let direct = audience.directTargets {
            let step = Spread.step(spread, count: direct.count)
            return try await queue.enqueue(
                direct.enumerated().map { i, t in
                    NewDelivery(
                        notificationID: notificationID,
                        appID: appID,
                        provider: t.0,
                        target: t.1,
                        notBefore: notBefore.addingTimeInterval(step * Double(i)),
                        expiresAt: expiresAt
                    )
                }
            )
        }
        // Pages of devices through Swift (a first pass counts them when the send is spread). A backend that can do
        // better inside its database does so in its own fan-out.
        var total = 0
        if spread > 0 { try await pages(appID: appID, audience: audience, registry: registry) { total += $0.count } }
        let step = Spread.step(spread, count: total)
        var done = 0
        try await pages(appID: appID, audience: audience, registry: registry) { devices in
            let batch = devices.enumerated().map { i, d in
                NewDelivery(
                    notificationID: notificationID,
                    appID: appID,
                    provider: d.provider,
                    target: .token(d.token),
                    notBefore: notBefore.addingTimeInterval(step * Double(done + i)),
                    expiresAt: expiresAt
                )
            }
            done += try await queue.enqueue(batch)
        }
        return done
    }

    /// How many deliveries each provider would get, without creating any (a dry run).
    public func count(
        appID: String,
        audience: Audience,
        registry: DeviceRegistry
    ) async throws -> [DeliveryProvider: Int] {
        var out: [DeliveryProvider: Int] = [:]
        if let direct = audience.directTargets {
            for (provider, _) in direct { out[provider, default: 0] += 1 }
            return out
        }
        try await pages(appID: appID, audience: audience, registry: registry) { devices in
            for d in devices { out[d.provider, default: 0] += 1 }
        }
        return out
    }

    func pages(
        appID: String,
        audience: Audience,
        registry: DeviceRegistry,
        _ body: ([Device]) async throws -> Void
    ) async throws {
        var cursor: Int64 = 0
        while true {
            let (devices, next) = try await registry.page(
                appID: appID,
                audience: audience,
                after: cursor,
                limit: pageSize
            )
            if !devices.isEmpty { try await body(devices) }
            guard let next else { return }
            cursor = next
        }
    }
}
