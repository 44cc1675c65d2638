import Crypto
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import RichPushCore
import RichPushTransport
import RichPushWebPush

/// A local Web Push service (RFC 8030) over TLS with HTTP/2 or HTTP/1.1 (the client's choice by ALPN), or HTTP/1.1
/// alone (``Configuration/http1Only``, as a service that offers only that). It makes subscriptions as a browser's
/// push service does (keeping each one's private key), and checks a push as a service does: the subscription,
/// `TTL`, `Urgency` and `Topic`, the `aes128gcm` coding, the VAPID token (RFC 8292) against the key the
/// subscription was made with, the 4,096-byte limit; then it decrypts the message (RFC 8291) and records what the
/// browser would get. It misbehaves on demand: a subscription gone (410), too many requests (429 with
/// Retry-After), errors, slow answers, and silence (``setSilent(_:)``: connections accepted, TLS completed,
/// nothing ever answered).
///
/// ```swift
/// let push = try WebPushEmulator(credentials: creds)
/// let port = try await push.start()
/// let subscription = push.subscribe(applicationServerKey: vapidPublicKey)   // PushSubscription.toJSON()
/// push.unregister(subscription["endpoint"])   // later pushes: 410
/// ```
public final class WebPushEmulator: Sendable {
    public struct Configuration: Sendable {
        public var recordLimit: Int
        public var responseDelay: ResponseDelay
        /// Offer and speak HTTP/1.1 only (ALPN `http/1.1`), as some push services do.
        public var http1Only: Bool
        public var now: @Sendable () -> Date

        public init(
            recordLimit: Int = 100_000,
            responseDelay: ResponseDelay = .none,
            http1Only: Bool = false,
            now: @escaping @Sendable () -> Date = { Date() }
        ) {
            self.recordLimit = recordLimit
            self.responseDelay = responseDelay
            self.http1Only = http1Only
            self.now = now
        }
    }

    public let configuration: Configuration
    let state: WebPushEmulatorState
    let server: EmulatorServer<WebPushEmulatorLogic>

    public init(
        credentials: SandboxCredentials,
        configuration: Configuration = Configuration(),
        eventLoopGroup: EventLoopGroup? = nil,
        logger: Logger = .disabled
    ) throws {
        self.configuration = configuration
        state = WebPushEmulatorState(recordLimit: configuration.recordLimit)
        server = try EmulatorServer(
            logic: WebPushEmulatorLogic(state: state, configuration: configuration),
            certificatePEM: credentials.serverCertificatePEM,
            keyPEM: credentials.serverKeyPEM,
            allowHTTP1: true,
            http1Only: configuration.http1Only,
            group: eventLoopGroup,
            logger: logger
        )
    }

    @discardableResult
    public func start(port: Int = 0) async throws -> Int {
        let bound = try await server.start(port: port)
        state.data.withLockedValue { $0.port = bound }
        return bound
    }
    public var port: Int { server.port }
    public func stop() async { await server.stop() }

    /// A new subscription, as `PushSubscription.toJSON()` gives it, for a site whose VAPID public key is
    /// `applicationServerKey` (base64url; nil: pushes need no VAPID token, as with a subscription made without one).
    public func subscribe(applicationServerKey: String? = nil) -> JSONValue {
        let id = UUID().uuidString.lowercased()
        let key = P256.KeyAgreement.PrivateKey()
        let auth = (0..<16).map { _ in UInt8.random(in: 0...255) }
        state.data.withLockedValue {
            $0.subscriptions[id] = .init(key: key, auth: auth, applicationServerKey: applicationServerKey)
        }
        return [
            "endpoint": .string("https://127.0.0.1:\(port)/push/\(id)"), "expirationTime": .null,
            "keys": [
                "p256dh": .string(JWT.base64URL(key.publicKey.x963Representation)),
                "auth": .string(JWT.base64URL(auth)),
            ],
        ]
    }

    /// Later pushes to this subscription (its endpoint or id) are answered 410 Gone, as when the user revoked it.
    public func unregister(_ endpoint: String) {
        let id = String(endpoint.split(separator: "/").last ?? "")
        state.data.withLockedValue { $0.subscriptions[id]?.gone = true }
    }

    /// Silent: new connections complete TLS and are never answered (what they send is read and dropped), and no
    /// request on a connection already open is answered either. Off again: new connections are served; requests
    /// left unanswered stay so (their clients time out).
    public func setSilent(_ silent: Bool) {
        server.silent.withLockedValue { $0 = silent }
        state.data.withLockedValue { $0.silent = silent }
    }

    public var isSilent: Bool { server.silent.withLockedValue { $0 } }

    /// Requests that came while silent (left unanswered).
    public var unansweredCount: Int { state.data.withLockedValue { $0.unanswered } }

    /// The next `count` pushes show this fault.
    public func inject(_ fault: WebPushFault, count: Int = 1) {
        state.data.withLockedValue { $0.faults.add(fault, count: count) }
    }
    public func clearFaults() { state.data.withLockedValue { $0.faults.clear() } }

    /// Messages accepted, oldest first (at most `recordLimit`), decrypted.
    public func recorded() -> [RecordedWebPush] { state.data.withLockedValue { $0.records.ordered } }
    public var acceptedCount: Int { state.data.withLockedValue { $0.records.total } }
    /// Refusals by reason.
    public var errorCounts: [String: Int] { state.data.withLockedValue { $0.errors } }
}

/// What the emulator does instead of accepting a push.
public enum WebPushFault: Sendable {
    /// 429 with `Retry-After`.
    case tooManyRequests(retryAfter: Int)
    /// 500, or 503 with `Retry-After`.
    case internalError
    case unavailable(retryAfter: Int)
    /// No answer at all.
    case stall
}

/// One accepted push: what the browser would get, and how it was sent.
public struct RecordedWebPush: Sendable {
    public var subscription: String
    public var plaintext: [UInt8]
    public var ttl: Int
    public var urgency: String
    public var topic: String?
    /// The VAPID token's contact, when one was sent.
    public var subject: String?
    /// Whether it replaced a message with the same topic not yet delivered.
    public var replacedPending: Bool
    public var receivedAt: Date

    /// The message as JSON, when it is JSON.
    public var json: JSONValue? { try? JSONValue.parse(plaintext) }
}

final class WebPushEmulatorState: Sendable {
    struct Subscription {
        var key: P256.KeyAgreement.PrivateKey
        var auth: [UInt8]
        var applicationServerKey: String?
        var gone = false
        /// Topics of messages held for this subscription (the emulator keeps them all as pending).
        var topics: Set<String> = []
    }
    struct Data {
        var subscriptions: [String: Subscription] = [:]
        var records: RecordRing<RecordedWebPush>
        var faults = FaultPlan<WebPushFault>()
        var errors: [String: Int] = [:]
        /// The port listened on: the origin VAPID tokens are signed for.
        var port = 0
        /// No request is answered (``WebPushEmulator/setSilent(_:)``).
        var silent = false
        var unanswered = 0
    }
    let data: NIOLockedValueBox<Data>
    init(recordLimit: Int) { data = NIOLockedValueBox(Data(records: RecordRing(capacity: recordLimit))) }

    /// Headers verified lately, by header, origin and the subscription's key. A sender sends one token to a
    /// service for hours, and a service checks its signature once: a header seen before is only checked for
    /// expiry again. At most 1,024 are kept.
    private let verified = NIOLockedValueBox<[String: VAPID.Verified]>([:])

    func verify(_ header: String, endpoint: URL, subscribedWith key: String?, now: Date) throws -> VAPID.Verified {
        let cacheKey = header + "|" + (VAPID.audience(of: endpoint) ?? "") + "|" + (key ?? "")
        if let v = verified.withLockedValue({ $0[cacheKey] }), v.expires > now,
            v.expires.timeIntervalSince(now) <= VAPID.maxLifetime
        {
            return v
        }
        let v = try VAPID.verify(header, endpoint: endpoint, subscribedWith: key, now: now)
        verified.withLockedValue { all in
            if all.count >= 1024 { all.removeAll() }
            all[cacheKey] = v
        }
        return v
    }
}

final class WebPushConnectionState {}

struct WebPushEmulatorLogic: EmulatorLogic {
    let state: WebPushEmulatorState
    let configuration: WebPushEmulator.Configuration

    var initialMaxConcurrentStreams: Int { 1000 }
    var responseDelay: ResponseDelay { configuration.responseDelay }
    func makeConnection(hasClientCertificate: Bool) -> WebPushConnectionState { WebPushConnectionState() }

    func handle(
        _ request: EmulatorRequest,
        connection: WebPushConnectionState,
        control: ConnectionControl
    ) -> EmulatorAction {
        let parts = request.path.split(separator: "?", maxSplits: 1)[0].split(separator: "/")
        guard request.method == "POST", parts.count == 2, parts[0] == "push" else {
            return refuse(404, "not-found", "POST /push/<subscription> is the only route")
        }
        let id = String(parts[1])
        let silent = state.data.withLockedValue { d -> Bool in
            if d.silent { d.unanswered += 1 }
            return d.silent
        }
        if silent { return .stall }
        if let fault = state.data.withLockedValue({ $0.faults.next() }) {
            switch fault {
            case .tooManyRequests(let after):
                return refuse(429, "too-many-requests", "slow down", headers: [("retry-after", String(after))])
            case .internalError: return refuse(500, "internal", "the push service failed")
            case .unavailable(let after):
                return refuse(503, "unavailable", "try again later", headers: [("retry-after", String(after))])
            case .stall: return .stall
            }
        }
        guard let subscription = state.data.withLockedValue({ $0.subscriptions[id] }) else {
            return refuse(404, "no-subscription", "no such subscription")
        }
        if subscription.gone { return refuse(410, "gone", "the subscription has expired or was revoked") }
        let ttl: Int
        let urgency: String
        let topic: String?
        let subject: String?
        let plaintext: [UInt8]
        do throws(Refusal) {
            (ttl, urgency, topic) = try Self.readHeaders(request)
            subject = try verify(request, id: id, subscription: subscription)
            plaintext = try Self.open(request, subscription: subscription)
        } catch {
            return refuse(error.status, error.reason, error.message)
        }
        state.data.withLockedValue { d in
            var replaced = false
            if let topic {
                replaced = d.subscriptions[id]?.topics.contains(topic) ?? false
                d.subscriptions[id]?.topics.insert(topic)
            }
            d.records.append(
                RecordedWebPush(
                    subscription: id,
                    plaintext: plaintext,
                    ttl: ttl,
                    urgency: urgency,
                    topic: topic,
                    subject: subject,
                    replacedPending: replaced,
                    receivedAt: configuration.now()
                )
            )
        }
        let port = state.data.withLockedValue { $0.port }
        let location = "https://127.0.0.1:\(port)/message/\(RequestID.uuid())"
        return .respond(EmulatorResponse(status: 201, headers: [("location", location), ("ttl", String(ttl))]))
    }

    /// A push refused with its status, the reason counted and the message shown.
    struct Refusal: Error {
        var status: Int
        var reason: String
        var message: String
        init(_ status: Int, _ reason: String, _ message: String) {
            self.status = status
            self.reason = reason
            self.message = message
        }
    }

    /// TTL, Urgency and Topic, as RFC 8030 §5.2–5.4 define them.
    static func readHeaders(_ request: EmulatorRequest) throws(Refusal) -> (ttl: Int, urgency: String, topic: String?) {
        // RFC 8030 §5.2: TTL is required, a number of seconds.
        guard let ttlText = request.header("ttl"), !ttlText.isEmpty, ttlText.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }),
            ttlText.count <= 10, let ttl = Int(ttlText)
        else { throw Refusal(400, "ttl", "TTL is required: a whole number of seconds (RFC 8030 §5.2)") }
        // RFC 8030 §5.3.
        let urgency = request.header("urgency") ?? "normal"
        guard WebPushRequest.Urgency(rawValue: urgency) != nil else {
            throw Refusal(400, "urgency", "Urgency must be very-low, low, normal or high (RFC 8030 §5.3)")
        }
        // RFC 8030 §5.4: at most 32 characters of the URL-safe base64 alphabet.
        let topic = request.header("topic")
        if let topic, !WebPushRequest.isValidTopic(topic) {
            throw Refusal(
                400,
                "topic",
                "Topic must be 1 to 32 characters of the URL-safe base64 alphabet (RFC 8030 §5.4)"
            )
        }
        return (ttl, urgency, topic)
    }

    /// The VAPID authorization (RFC 8292): a subscription made with a key takes only pushes that key signed (§4.2);
    /// the subject of a verified one.
    func verify(
        _ request: EmulatorRequest,
        id: String,
        subscription: WebPushEmulatorState.Subscription
    ) throws(Refusal) -> String? {
        let port = state.data.withLockedValue { $0.port }
        guard let endpoint = URL(string: "https://127.0.0.1:\(port)/push/\(id)") else {
            throw Refusal(500, "internal", "no endpoint")
        }
        guard let authorization = request.header("authorization") else {
            if subscription.applicationServerKey != nil {
                throw Refusal(
                    401,
                    "vapid-missing",
                    "this subscription was made with a VAPID key: send Authorization: vapid"
                )
            }
            return nil
        }
        do {
            return try state.verify(
                authorization,
                endpoint: endpoint,
                subscribedWith: subscription.applicationServerKey,
                now: configuration.now()
            ).subject
        } catch let failure as VAPID.Failure {
            // RFC 8292 §4.2: 401 when the authentication is absent, 403 when it is invalid.
            throw Refusal(403, failure.rule, failure.description)
        } catch {
            throw Refusal(403, "vapid", "\(error)")
        }
    }

    /// The body opened with the subscription's keys (RFC 8291, aes128gcm); at most 4,096 bytes are taken (RFC 8030
    /// §7.2 asks for at least that; more are refused here, as the strictest services do).
    static func open(
        _ request: EmulatorRequest,
        subscription: WebPushEmulatorState.Subscription
    ) throws(Refusal) -> [UInt8] {
        guard request.body.count <= 4096 else {
            throw Refusal(413, "payload-too-large", "the body is \(request.body.count) bytes; at most 4096")
        }
        guard !request.body.isEmpty else { return [] }
        guard request.header("content-encoding")?.lowercased() == "aes128gcm" else {
            throw Refusal(
                415,
                "content-encoding",
                "a body must be encrypted with Content-Encoding: aes128gcm (RFC 8291)"
            )
        }
        do {
            return try WebPushEncryption.decrypt(request.body, privateKey: subscription.key, auth: subscription.auth)
        } catch let failure as WebPushEncryption.Failure {
            throw Refusal(400, "decryption-" + failure.rule, failure.description)
        } catch {
            throw Refusal(400, "decryption", "\(error)")
        }
    }

    private func refuse(
        _ status: Int,
        _ reason: String,
        _ message: String,
        headers: [(String, String)] = []
    ) -> EmulatorAction {
        state.data.withLockedValue { $0.errors[reason, default: 0] += 1 }
        let body: JSONValue = ["reason": .string(reason), "message": .string(message)]
        return .respond(
            EmulatorResponse(
                status: status,
                headers: headers + [("content-type", "application/json")],
                body: body.serialized()
            )
        )
    }
}
