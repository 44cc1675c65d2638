import Foundation
import Logging
import NIOConcurrencyHelpers
import RichPushCore

/// Sends one delivery; a worker calls it for each claimed delivery.
public protocol DeliverySender: Sendable {
    func send(_ delivery: DeliveryRecord) async -> SendResult

    /// The push service origin (`scheme://host:port`) the delivery would go to, which a worker bounds and keeps a
    /// circuit for; nil when the sender cannot say.
    func origin(of delivery: DeliveryRecord) async -> String?
}

extension DeliverySender {
    public func origin(of delivery: DeliveryRecord) async -> String? { nil }
}

/// Sends each delivery through the provider it names, with its app and its notification's message (each read once
/// and kept: a fan-out reads its message once, not once per delivery).
public final class ProviderDeliverySender: DeliverySender {
    public let providers: Providers
    /// Writes each delivery's receipt address into the payload (nil: receipts are off).
    public let receipts: DeviceReceipts?
    /// The app of an id (apps are created while the server runs); nil when there is no such app, thrown when it
    /// could not be read (the database away: the delivery is tried again, not failed).
    let app: @Sendable (String) async throws -> ServerApp?
    /// The message of a notification id (the server's notification store); thrown as ``app``.
    let message: @Sendable (String) async throws -> PushMessage?
    let messages = NIOLockedValueBox<[String: PushMessage]>([:])
    /// Each notification's receipt-address maker (nil: its payload has no address of ours).
    let stampers = NIOLockedValueBox<[String: ReceiptStamper?]>([:])
    /// Where a failure the operator must mend is said (credentials missing or refused), once per app and reason
    /// every ten minutes: a send of a million deliveries to an app without credentials is one line, not a million.
    let logger: Logger?
    let said = NIOLockedValueBox<[String: Date]>([:])

    public init(
        providers: Providers,
        receipts: DeviceReceipts? = nil,
        logger: Logger? = nil,
        app: @escaping @Sendable (String) async throws -> ServerApp?,
        message: @escaping @Sendable (String) async throws -> PushMessage?
    ) {
        self.providers = providers
        self.receipts = receipts
        self.logger = logger
        self.app = app
        self.message = message
    }

    /// Says a credentials failure in the log, once per app and reason every ten minutes.
    func tell(_ result: SendResult, app: String) {
        guard let logger, case .failed(.fixCredentials, let reason) = result else { return }
        let key = app + "\u{0}" + reason
        let now = Date()
        let due = said.withLockedValue { said -> Bool in
            if let last = said[key], now.timeIntervalSince(last) < 600 { return false }
            if said.count > 10_000 { said.removeAll() }
            said[key] = now
            return true
        }
        guard due else { return }
        logger.warning(
            "deliveries fail for want of working credentials",
            metadata: [
                "app_id": "\(app)", "reason": "\(reason)",
                "meaning": "\(DeliveryReasons.meaning(reason) ?? "the push service refused the app's credentials")",
            ]
        )
    }

    /// Keeps a message the API just accepted (it need not be read back for its first delivery).
    public func remember(_ id: String, _ message: PushMessage) {
        messages.withLockedValue { cache in
            if cache.count > 10_000 { cache.removeAll() }
            cache[id] = message
        }
    }

    /// Messages do not change once accepted: each is read and decoded once per fan-out, not once per delivery.
    func cachedMessage(_ id: String) async throws -> PushMessage? {
        if let hit = messages.withLockedValue({ $0[id] }) { return hit }
        guard let m = try await message(id) else { return nil }
        remember(id, m)
        return m
    }

    /// The notification's receipt-address maker, made once per notification (reading the address and starting the
    /// signature cost more than each delivery's part).
    func stamper(_ id: String, _ m: PushMessage) -> ReceiptStamper? {
        guard let receipts, m.receiptURL != nil else { return nil }
        if let hit = stampers.withLockedValue({ $0[id] }) { return hit }
        let made = receipts.stamper(address: m.receiptURL, notificationID: id)
        stampers.withLockedValue { cache in
            if cache.count > 10_000 { cache.removeAll() }
            cache[id] = made
        }
        return made
    }

    /// The origin its provider names for it, with its app (nil when either cannot be had now).
    public func origin(of d: DeliveryRecord) async -> String? {
        guard let provider = providers[d.provider], let app = try? await self.app(d.appID) else { return nil }
        return provider.origin(of: d, app: app)
    }

    public func send(_ d: DeliveryRecord) async -> SendResult {
        guard let provider = providers[d.provider] else { return .failed(.never, reason: "unknown_provider") }
        // A database that does not answer is not a missing app or message: the delivery waits for it (a send
        // during an outage once ended as failed "unknown_app").
        let app: ServerApp?
        let m: PushMessage?
        do {
            app = try await self.app(d.appID)
            m = try await cachedMessage(d.notificationID)
        } catch {
            return .failed(.retry, reason: DeliveryWorker.databaseUnavailable)
        }
        guard let app else { return .failed(.fixCredentials, reason: "unknown_app") }
        guard let m else { return .failed(.never, reason: "notification_missing") }
        let receipt = stamper(d.notificationID, m)?.stamp(delivery: d.id)
        let result = await provider.send(d, message: m, app: app, receipt: receipt)
        tell(result, app: d.appID)
        return result
    }
}
