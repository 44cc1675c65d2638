import Crypto
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import RichPushCore
import RichPushTransport
import RichPushWebPush

extension DeliveryProvider {
    public static let webPush = DeliveryProvider(rawValue: "webpush")
}

/// Web Push (RFC 8030), sent by the server itself to each browser's push service: the message encrypted for the
/// subscription (RFC 8291), signed with the app's VAPID key (RFC 8292), posted to the subscription's endpoint over
/// HTTP/2, or HTTP/1.1 when the service's ALPN chooses it.
///
/// An endpoint is an address a user chose (any page can register a subscription), so it is reached only through
/// the outbound address policy: its host is resolved, every address checked, and the connection made to an
/// allowed one while TLS still checks the host's name. Connections are pooled per push service origin (a bounded
/// pool of either protocol, as the first connection found); at most ``Configuration/maxOrigins`` are kept, the
/// least recently used closed first.
///
/// A web device's token is its subscription in one string (``WebPushSubscription/token``).
public final class WebPushProvider: PushProvider {
    public struct Configuration: Sendable {
        public var policy: AddressPolicy
        public var resolver: any HostResolver
        public var trust: TLSTrust
        /// Admits `http:` endpoints: never outside tests (the emulator speaks TLS).
        public var allowHTTP: Bool
        /// Push service origins with connections kept open.
        public var maxOrigins: Int
        /// HTTP/2 connections per origin (each carries up to a hundred requests at once).
        public var connectionsPerOrigin: Int
        /// HTTP/1.1 connections per origin, for a service whose ALPN chooses HTTP/1.1 (one request at a time each:
        /// the most requests in flight to it).
        public var http1ConnectionsPerOrigin: Int
        /// A connection made (TCP, TLS and, for HTTP/2, the service's first SETTINGS) within this, or it fails.
        public var connectTimeout: TimeAmount
        public var requestTimeout: TimeAmount
        public var logger: Logger

        public init(
            policy: AddressPolicy = AddressPolicy(),
            resolver: any HostResolver = SystemResolver(),
            trust: TLSTrust = .system,
            allowHTTP: Bool = false,
            maxOrigins: Int = 64,
            connectionsPerOrigin: Int = 2,
            http1ConnectionsPerOrigin: Int = 8,
            connectTimeout: TimeAmount = .seconds(10),
            requestTimeout: TimeAmount = .seconds(15),
            logger: Logger = .disabled
        ) {
            self.policy = policy
            self.resolver = resolver
            self.trust = trust
            self.allowHTTP = allowHTTP
            self.maxOrigins = max(1, maxOrigins)
            self.connectionsPerOrigin = max(1, connectionsPerOrigin)
            self.http1ConnectionsPerOrigin = min(max(1, http1ConnectionsPerOrigin), 256)
            self.connectTimeout = connectTimeout
            self.requestTimeout = requestTimeout
            self.logger = logger
        }
    }

    public let id = DeliveryProvider.webPush
    let configuration: Configuration
    let eventLoopGroup: EventLoopGroup
    let signers = AppClients<VAPIDSigner> { _ in }
    let origins: OriginPools
    /// Each notification's payload, rendered and serialized once for all its subscriptions, with where the receipt
    /// address's placeholder stands in it. Each subscription's encryption, receipt address and `TTL` stay its own;
    /// the payload's `timestamp` is when this node first rendered the notification.
    let rendered = RenderCache<Prepared>()

    /// A notification's payload as every subscription gets it before encryption.
    struct Prepared: Sendable {
        let payload: [UInt8]
        let receiptOffset: Int?
        let urgency: WebPushRequest.Urgency
        let topic: String?
    }

    public init(_ configuration: Configuration = .init(), eventLoopGroup: EventLoopGroup) {
        self.configuration = configuration
        self.eventLoopGroup = eventLoopGroup
        origins = OriginPools(configuration: configuration, group: eventLoopGroup)
    }

    /// The app's signer, from its VAPID key (nil: the app has none).
    func signer(for app: ServerApp) -> (signer: VAPIDSigner?, problem: String?) {
        let built = signers.client(for: app) { app in
            guard let c = app.webPush else { return nil }
            let key = try P256.Signing.PrivateKey(rawRepresentation: c.privateKey)
            return try VAPIDSigner(key: key, subject: c.subject)
        }
        return (built.client, built.problem)
    }

    public func tokenProblem(_ token: String) -> (rule: String, message: String)? {
        do {
            let s = try WebPushSubscription(token: token, allowHTTP: configuration.allowHTTP)
            // What can be known without a DNS lookup is refused now: an internal address written as such, or a
            // name the policy refuses (localhost, metadata). A name is resolved and checked again at each send.
            let host = s.endpoint.host ?? ""
            var verdict = configuration.policy.check(hostName: host)
            if verdict == .allowed, let literal = IPAddress(host: host) {
                verdict = configuration.policy.check(literal, port: s.endpoint.port ?? 443)
            }
            if case .refused(let why) = verdict {
                return (
                    "webpush-endpoint-address",
                    "the endpoint's host is an internal address (\(why)): a push service is on the public internet"
                )
            }
            return nil
        } catch let f as WebPushEncryption.Failure {
            return ("webpush-" + f.rule.replacingOccurrences(of: "webpush-", with: ""), f.description)
        } catch {
            return ("webpush-token", "\(error)")
        }
    }

    public func sizeIssues(
        _ message: PushMessage,
        audience: Audience,
        now: @escaping @Sendable () -> Date
    ) -> [ValidationIssue] {
        guard audience.mayUseWebPush else { return [] }
        // The receipt address is written in at send time: counted here at the length it will have.
        let rendered = WebPushMessage(message, receiptURL: message.receiptURL, now: now())
        guard let problem = rendered.sizeProblem else { return [] }
        return [ValidationIssue(path: "", rule: "webpush-size", message: problem)]
    }

    public func dryRun(_ message: PushMessage, app: ServerApp, audience: Audience) async -> ProviderDryRun? {
        guard audience.mayUseWebPush else { return nil }
        let r = WebPushMessage(
            message,
            defaultURL: app.webPush?.defaultURL
        )
        var headers: [String: JSONValue] = [
            "TTL": .string(String(r.ttl)), "Urgency": .string(r.urgency.rawValue),
            "Content-Encoding": "aes128gcm", "Authorization": "vapid t=<token for the push service>,k=<app's key>",
        ]
        if let t = r.topic { headers["Topic"] = .string(t) }
        var extra: [String: JSONValue] = [:]
        if app.webPush == nil {
            extra["webpush_problem"] = "the app has no VAPID key: POST /v1/apps/{app}/webpush/keys"
        }
        return ProviderDryRun(
            request: [
                "method": "POST", "endpoint": "<the subscription's endpoint>", "headers": .object(headers),
                "payload": r.payload, "bytes": .int(Int64(r.bytes.count)),
                "bytes_encrypted": .int(Int64(r.bytes.count + WebPushEncryption.headerLength + 17)),
            ],
            extra: extra
        )
    }

    public func send(
        _ d: DeliveryRecord,
        message: PushMessage,
        app: ServerApp,
        receipt: ReceiptStamp?
    ) async -> SendResult {
        guard case .token(let token) = d.target else { return .failed(.dropToken, reason: "webpush_bad_subscription") }
        // Keyed by the app's default URL too: an operator who mends it mid-send has the rest rendered with it.
        let prepared = rendered.value(d.notificationID + "\n" + (app.webPush?.defaultURL ?? "")) {
            let r = WebPushMessage(message, defaultURL: app.webPush?.defaultURL)
            let payload = r.bytes
            return Prepared(
                payload: payload,
                receiptOffset: message.receiptURL.flatMap { ReceiptStamp.placeholderOffset(of: $0, in: payload) },
                urgency: r.urgency,
                topic: r.topic
            )
        }
        var payload = prepared.payload
        if let receipt, let offset = prepared.receiptOffset {
            // This delivery's copy gets its own receipt address, as long as the placeholder (sizes stay exact); a
            // value of another length, which no stamp makes, leaves the placeholder rather than overrunning it.
            let value = Array(receipt.value.utf8)
            let end = offset + DeviceReceipts.placeholder.utf8.count
            if value.count == DeviceReceipts.placeholder.utf8.count, offset >= 0, end <= payload.count {
                payload.replaceSubrange(offset..<end, with: value)
            }
        }
        return await send(
            token: token,
            payload: payload,
            ttl: WebPushMessage.ttl(for: message, now: Date()),
            urgency: prepared.urgency,
            topic: prepared.topic,
            app: app
        )
    }

    /// Sends a message to one subscription (its token form) with the app's VAPID key: what a delivery does, and
    /// what `richpush send --webpush-subscription` does without a server.
    public func send(token: String, message: PushMessage, app: ServerApp, receiptURL: String?) async -> SendResult {
        let rendered = WebPushMessage(
            message,
            defaultURL: app.webPush?.defaultURL,
            receiptURL: receiptURL
        )
        return await send(
            token: token,
            payload: rendered.bytes,
            ttl: rendered.ttl,
            urgency: rendered.urgency,
            topic: rendered.topic,
            app: app
        )
    }

    /// Encrypts a rendered payload for one subscription, signs and posts it.
    func send(
        token: String,
        payload: [UInt8],
        ttl: Int,
        urgency: WebPushRequest.Urgency,
        topic: String?,
        app: ServerApp
    ) async -> SendResult {
        let (signer, problem) = signer(for: app)
        guard let signer else {
            if let problem { configuration.logger.error("the app's VAPID key cannot be used: \(problem)") }
            return .failed(.fixCredentials, reason: "webpush_not_configured")
        }
        guard let subscription = try? WebPushSubscription(token: token, allowHTTP: configuration.allowHTTP) else {
            return .failed(.dropToken, reason: "webpush_bad_subscription")
        }
        if payload.count > WebPushEncryption.maxPlaintext {
            return .failed(.fixRequest, reason: "webpush_payload_too_large")
        }
        let request: WebPushRequest
        do {
            request = try WebPushRequest(
                subscription: subscription,
                payload: payload,
                signer: signer,
                ttl: ttl,
                urgency: urgency,
                topic: topic
            )
        } catch {
            return .failed(.fixRequest, reason: "webpush_request")
        }
        return await origins.post(request)
    }

    /// The subscription's push service: its endpoint's scheme, host and port (a user's choice: bounded and
    /// circuited per origin so that one that never answers holds only its own sends).
    public func origin(of delivery: DeliveryRecord, app: ServerApp) -> String? {
        guard case .token(let token) = delivery.target, let endpoint = WebPushSubscription.endpoint(ofToken: token),
            let url = URL(string: String(endpoint)), let host = url.host, let scheme = url.scheme?.lowercased()
        else { return nil }
        return OriginPools.origin(scheme: scheme, host: host, port: url.port)
    }

    public func shutdown() async {
        await signers.shutdown()
        await origins.shutdown()
    }
}

extension Audience {
    /// Whether deliveries may go to browsers: registry audiences (which may hold web devices).
    public var mayUseWebPush: Bool {
        switch self {
        case .all, .user, .tag, .topic, .tokens: return true
        case .providerTokens, .fcmTopic, .fcmCondition, .apnsChannel: return false
        }
    }
}
