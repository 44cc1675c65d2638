import Foundation
import NIOConcurrencyHelpers
import NIOCore
import RichPushAPNs
import RichPushCore
import RichPushFCM
import RichPushTransport

/// The result of one attempt.
public enum SendResult: Sendable, Hashable {
    case delivered(providerID: String?)
    case failed(RetryDecision, reason: String)
}

/// Sends one delivery; a worker calls it for each claimed delivery.
public protocol DeliverySender: Sendable {
    func send(_ delivery: DeliveryRecord) async -> SendResult
}

/// Sends through RichPushAPNs and RichPushFCM, rendering each notification once per provider.
public final class ProviderDeliverySender: DeliverySender {
    public struct App: Sendable {
        public var apns: APNsClient?
        public var bundleID: String
        public var fcm: FCMClient?
        public var fcmProjectID: String
        public var chartImageURL: String?

        public init(
            apns: APNsClient?,
            bundleID: String,
            fcm: FCMClient?,
            fcmProjectID: String,
            chartImageURL: String? = nil
        ) {
            self.apns = apns
            self.bundleID = bundleID
            self.fcm = fcm
            self.fcmProjectID = fcmProjectID
            self.chartImageURL = chartImageURL
        }
    }

    /// The provider setup of an app id (apps are created while the server runs).
    let app: @Sendable (String) async -> App?
    /// The message of a notification id (the server's notification store).
    let message: @Sendable (String) async -> PushMessage?
    let rendered = RenderCache()
    let messages = NIOLockedValueBox<[String: PushMessage]>([:])

    /// Keeps a message the API just accepted (it need not be read back for its first delivery).
    public func remember(_ id: String, _ message: PushMessage) {
        messages.withLockedValue { cache in
            if cache.count > 10_000 { cache.removeAll() }
            cache[id] = message
        }
    }

    /// Messages do not change once accepted: each is read and decoded once per fan-out, not once per delivery.
    func cachedMessage(_ id: String) async -> PushMessage? {
        if let hit = messages.withLockedValue({ $0[id] }) { return hit }
        guard let m = await message(id) else { return nil }
        messages.withLockedValue { cache in
            if cache.count > 10_000 { cache.removeAll() }
            cache[id] = m
        }
        return m
    }

    public init(
        app: @escaping @Sendable (String) async -> App?,
        message: @escaping @Sendable (String) async -> PushMessage?
    ) {
        self.app = app
        self.message = message
    }

    public convenience init(apps: [String: App], message: @escaping @Sendable (String) async -> PushMessage?) {
        self.init(app: { apps[$0] }, message: message)
    }

    public func send(_ d: DeliveryRecord) async -> SendResult {
        guard let app = await app(d.appID) else { return .failed(.fixCredentials, reason: "unknown_app") }
        guard let m = await cachedMessage(d.notificationID) else {
            return .failed(.never, reason: "notification_missing")
        }
        switch d.provider {
        case .apns:
            guard let client = app.apns else { return .failed(.fixCredentials, reason: "apns_not_configured") }
            let prepared = rendered.apns(d.notificationID) {
                APNsPreparedRequest(APNsRenderer(bundleID: app.bundleID).render(m, deviceToken: ""))
            }
            do {
                let delivery = try await client.send(prepared, to: d.target)
                return .delivered(providerID: delivery.apnsID)
            } catch {
                return .failed(error.retry, reason: error.label)
            }
        case .fcm:
            guard let client = app.fcm else { return .failed(.fixCredentials, reason: "fcm_not_configured") }
            let request = FCMRenderer(projectID: app.fcmProjectID, chartImageURL: app.chartImageURL).render(
                m,
                to: FCMTarget(storedForm: d.target)
            )
            do {
                return .delivered(providerID: try await client.send(request))
            } catch {
                return .failed(error.retry, reason: error.label)
            }
        }
    }
}

/// Rendered APNs requests by notification, so that a fan-out renders once.
final class RenderCache: Sendable {
    private let apnsCache = NIOLockedValueBox<[String: APNsPreparedRequest]>([:])

    func apns(_ id: String, render: () -> APNsPreparedRequest) -> APNsPreparedRequest {
        if let hit = apnsCache.withLockedValue({ $0[id] }) { return hit }
        let value = render()
        apnsCache.withLockedValue { cache in
            if cache.count > 10_000 { cache.removeAll() }
            cache[id] = value
        }
        return value
    }
}
