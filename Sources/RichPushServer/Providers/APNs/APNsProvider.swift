import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import RichPushAPNs
import RichPushCore
import RichPushTransport

/// Apple Push Notification service: HTTP/2 with token auth, one client per app built from the app's key, requests
/// rendered once per notification and sent to each device token.
public final class APNsProvider: PushProvider {
    public struct Configuration: Sendable {
        /// Where requests go instead of the app's environment (production or development): the sandbox emulator.
        public var endpoint: APNsConfiguration.Endpoint?
        public var trust: TLSTrust
        /// The client for apps without a key of their own (the sandbox's).
        public var fallback: APNsClient?
        /// Given to every client built for an app.
        public var logger: Logger

        public init(
            endpoint: APNsConfiguration.Endpoint? = nil,
            trust: TLSTrust = .system,
            fallback: APNsClient? = nil,
            logger: Logger = .disabled
        ) {
            self.endpoint = endpoint
            self.trust = trust
            self.fallback = fallback
            self.logger = logger
        }
    }

    public let id = DeliveryProvider.apns
    let configuration: Configuration
    let eventLoopGroup: EventLoopGroup?
    let clients = AppClients<APNsClient> { await $0.shutdown() }
    /// Clients of the channel management hosts, for apps with a key of their own.
    let channelClients = AppClients<APNsClient> { await $0.shutdown() }
    /// Each notification's request, rendered once for all its device tokens, with where the receipt address's
    /// placeholder stands in its body.
    let rendered = RenderCache<(request: APNsPreparedRequest, receiptOffset: Int?)>()

    public init(_ configuration: Configuration = .init(), eventLoopGroup: EventLoopGroup? = nil) {
        self.configuration = configuration
        self.eventLoopGroup = eventLoopGroup
    }

    /// The client an app sends with: its own (from its key), or the fallback when it has no key.
    public func client(for app: ServerApp) -> APNsClient? { client(for: app, in: clients) { $0 } }

    /// The client that manages an app's broadcast channels: on the channel host of the app's environment (the
    /// sandbox emulator serves both on one port, so the fallback does both).
    public func channelClient(for app: ServerApp) -> APNsClient? {
        client(for: app, in: channelClients) { $0.channelManagement }
    }

    /// An app's client from its key, kept in `cache`, to the app's environment's endpoint as `host` turns it.
    private func client(
        for app: ServerApp,
        in cache: AppClients<APNsClient>,
        host: (APNsConfiguration.Endpoint) -> APNsConfiguration.Endpoint
    ) -> APNsClient? {
        guard app.apns != nil else { return configuration.fallback }
        return cache.client(for: app) { app in
            guard let c = app.apns else { return nil }
            let key = try APNsSigningKey(p8: c.keyPEM, keyID: c.keyID, teamID: c.teamID)
            return APNsClient(
                configuration: .init(
                    endpoint: host(configuration.endpoint ?? (c.environment == .production ? .production : .sandbox)),
                    authentication: .token(key),
                    trust: configuration.trust,
                    logger: configuration.logger
                ),
                eventLoopGroup: eventLoopGroup
            )
        }.client
    }

    public func missingCredentials(for app: ServerApp, audience: Audience) -> ValidationIssue? {
        guard audience.mayUseAPNs, app.apns == nil, configuration.fallback == nil else { return nil }
        return ValidationIssue(
            path: "audience",
            rule: "no-apns-credentials",
            message:
                "this app has no APNs credentials (and the server is not in sandbox mode): its deliveries to iOS devices will fail apns_not_configured; give them with PATCH /v1/apps/{app} {\"apns\": …}",
            severity: .warning
        )
    }

    public func tokenProblem(_ token: String) -> (rule: String, message: String)? {
        MessageValidator.apnsTokenProblem(token).map { ("apns-token", $0) }
    }

    public func sizeIssues(
        _ message: PushMessage,
        audience: Audience,
        now: @escaping @Sendable () -> Date
    ) -> [ValidationIssue] {
        guard audience.mayUseAPNs else { return [] }
        return MessageValidator.sizeIssues(message, apns: true, fcm: nil, now: now)
    }

    public func dryRun(_ message: PushMessage, app: ServerApp, audience: Audience) async -> ProviderDryRun? {
        guard audience.mayUseAPNs else { return nil }
        let sample = audience.directTargets?.first { $0.0 == .apns }?.1.token ?? "<device token>"
        let r = APNsRenderer(bundleID: app.bundleID).render(message, deviceToken: sample)
        let headers = Dictionary(
            r.headers.map { ($0.name, JSONValue.string($0.value)) },
            uniquingKeysWith: { a, _ in a }
        )
        return ProviderDryRun(
            request: [
                "path": .string(r.path), "headers": .object(headers), "payload": r.payload,
                "bytes": .int(Int64(r.body.count)),
            ]
        )
    }

    public func send(
        _ d: DeliveryRecord,
        message: PushMessage,
        app: ServerApp,
        receipt: ReceiptStamp?
    ) async -> SendResult {
        guard let client = client(for: app) else { return .failed(.fixCredentials, reason: "apns_not_configured") }
        let prepared = rendered.value(d.notificationID) {
            let request = APNsRenderer(bundleID: app.bundleID).render(message, deviceToken: "")
            let offset = message.receiptURL.flatMap { ReceiptStamp.placeholderOffset(of: $0, in: request.body) }
            return (APNsPreparedRequest(request), offset)
        }
        var body = prepared.request.body
        if let receipt, let offset = prepared.receiptOffset {
            // The shared body stays as rendered; this delivery's copy gets its own receipt address.
            var own = ByteBufferAllocator().buffer(capacity: body.readableBytes)
            own.writeImmutableBuffer(body)
            own.setString(receipt.value, at: own.readerIndex + offset)
            body = own
        }
        // APNs has no topics: a delivery to one is a broadcast on the Live Activity channel of that id.
        if case .topic(let channel) = d.target {
            do {
                let request = APNsRenderer(bundleID: app.bundleID).render(message, deviceToken: "")
                let delivery = try await client.broadcast(request, bundleID: app.bundleID, channelID: channel)
                return .delivered(providerID: delivery.apnsID)
            } catch {
                return .failed(error.retry, reason: error.label)
            }
        }
        guard let token = d.target.token else { return .failed(.never, reason: "apns_needs_a_device_token") }
        do {
            let delivery = try await client.send(
                path: "/3/device/" + token,
                headers: prepared.request.headers,
                body: body
            )
            return .delivered(providerID: delivery.apnsID)
        } catch {
            return .failed(error.retry, reason: error.label)
        }
    }

    /// The APNs host of the app's environment (or the endpoint every request goes to instead).
    public func origin(of delivery: DeliveryRecord, app: ServerApp) -> String? {
        if let endpoint = configuration.endpoint { return endpoint.origin }
        guard let c = app.apns else { return nil }
        return (c.environment == .production ? APNsConfiguration.Endpoint.production : .sandbox).origin
    }

    public func shutdown() async {
        await clients.shutdown()
        await channelClients.shutdown()
    }
}

/// A value per notification, made once (a fan-out renders its request once for every device), holding the last
/// 10,000 notifications.
final class RenderCache<Value: Sendable>: Sendable {
    private let cache = NIOLockedValueBox<[String: Value]>([:])

    func value(_ id: String, make: () -> Value) -> Value {
        if let hit = cache.withLockedValue({ $0[id] }) { return hit }
        let value = make()
        cache.withLockedValue { cache in
            if cache.count > 10_000 { cache.removeAll() }
            cache[id] = value
        }
        return value
    }
}
