import Foundation
import RichPushCore
import Testing

@testable import RichPushServer

/// The sender tells a database that does not answer from an app or a message that does not exist: the first is
/// tried again, the others end the delivery.
@Suite struct DeliverySenderTests {
    struct Away: Error {}

    static let delivery = DeliveryRecord(
        id: 1,
        notificationID: "n1",
        appID: "app",
        provider: .apns,
        target: "ab",
        state: .leased,
        attempts: 1,
        notBefore: Date(),
        expiresAt: nil,
        leaseOwner: "w",
        leaseUntil: nil,
        reason: nil,
        providerID: nil,
        updatedAt: Date()
    )

    @Test func aDatabaseAwayIsRetriedNotFailed() async throws {
        let providers = Providers([APNsProvider(), FCMProvider()])
        let app = ServerApp(id: "app", name: "A", bundleID: "com.example.app")
        let away = ProviderDeliverySender(providers: providers, app: { _ in throw Away() }, message: { _ in nil })
        #expect(await away.send(Self.delivery) == .failed(.retry, reason: "database_unavailable"))
        let messageAway = ProviderDeliverySender(
            providers: providers,
            app: { _ in app },
            message: { _ in throw Away() }
        )
        #expect(await messageAway.send(Self.delivery) == .failed(.retry, reason: "database_unavailable"))
        let noApp = ProviderDeliverySender(providers: providers, app: { _ in nil }, message: { _ in nil })
        #expect(await noApp.send(Self.delivery) == .failed(.fixCredentials, reason: "unknown_app"))
        let noMessage = ProviderDeliverySender(providers: providers, app: { _ in app }, message: { _ in nil })
        #expect(await noMessage.send(Self.delivery) == .failed(.never, reason: "notification_missing"))
        await providers.shutdown()
    }
}
