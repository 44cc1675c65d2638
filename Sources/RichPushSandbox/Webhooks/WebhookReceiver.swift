import Crypto
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import RichPushCore
import RichPushTransport

/// A local webhook receiver over TLS (HTTP/1.1, as most receivers speak): `POST /hooks/<name>` records what came,
/// as an app's backend would, and answers 200. It misbehaves on demand, as the push service emulators do: a share
/// of requests answered with an error and not recorded (``Mode/failShare``), a share never answered and not
/// recorded (``Mode/hangShare``: a receiver that hangs), or every request answered 410 (a receiver gone).
///
/// Given an endpoint's secret (``setSecret(_:for:)``), it checks each request's Standard Webhooks signature and
/// timestamp and says so in what it recorded.
///
/// ```swift
/// let hooks = try WebhookReceiver(credentials: creds)
/// let port = try await hooks.start()
/// // an endpoint's URL: https://127.0.0.1:\(port)/hooks/orders
/// hooks.setMode(.init(failShare: 0.3, hangShare: 0.05))
/// ```
public final class WebhookReceiver: Sendable {
    /// How it answers.
    public struct Mode: Sendable, Equatable {
        /// The share of requests answered `failStatus` and not recorded (0...1).
        public var failShare: Double
        /// The share of requests never answered and not recorded (0...1).
        public var hangShare: Double
        public var failStatus: Int
        /// Every request answered 410 Gone.
        public var gone: Bool

        public init(failShare: Double = 0, hangShare: Double = 0, failStatus: Int = 500, gone: Bool = false) {
            self.failShare = min(max(failShare, 0), 1)
            self.hangShare = min(max(hangShare, 0), 1)
            self.failStatus = (300...599).contains(failStatus) ? failStatus : 500
            self.gone = gone
        }
    }

    /// One request recorded.
    public struct Request: Sendable {
        public var hook: String
        public var id: String
        public var timestamp: String
        public var signature: String
        /// nil: no secret was given for this hook; else whether one signature verified and the timestamp was
        /// within five minutes.
        public var verified: Bool?
        public var receivedAt: Date
        /// Its events' ids, types and notifications, in body order.
        public var events: [Event]
        /// The body, kept for the last ``bodiesKept`` requests only.
        public var body: [UInt8]?
    }

    public struct Event: Sendable, Hashable {
        public var id: String
        public var type: String
        public var notificationID: String?
        public var deliveryID: Int64?
    }

    struct Data: Sendable {
        var requests: [Request] = []
        var mode = Mode()
        /// A hook's own mode, over the default.
        var modes: [String: Mode] = [:]
        var secrets: [String: String] = [:]
        /// Answers for the next requests, one each, before the mode applies (nothing of them recorded).
        var hostile: [HostileAnswer] = []
        var failed = 0
        var hung = 0
        var events = 0
    }

    let data = NIOLockedValueBox(Data())
    let server: EmulatorServer<WebhookReceiverLogic>
    /// Requests kept (the oldest go first).
    public static let requestsKept = 200_000
    public static let bodiesKept = 100

    public init(
        credentials: SandboxCredentials,
        eventLoopGroup: EventLoopGroup? = nil,
        logger: Logger = .disabled
    )
        throws
    {
        server = try EmulatorServer(
            logic: WebhookReceiverLogic(data: data),
            certificatePEM: credentials.serverCertificatePEM,
            keyPEM: credentials.serverKeyPEM,
            allowHTTP1: true,
            http1Only: true,
            group: eventLoopGroup,
            logger: logger
        )
    }

    @discardableResult
    public func start(port: Int = 0) async throws -> Int { try await server.start(port: port) }
    public var port: Int { server.port }
    public func stop() async { await server.stop() }

    /// The URL of a hook: what an endpoint names.
    public func url(_ hook: String) -> String { "https://127.0.0.1:\(port)/hooks/\(hook)" }

    /// How every hook answers, or (`hook` given) that one.
    public func setMode(_ mode: Mode, hook: String? = nil) {
        data.withLockedValue { d in
            if let hook { d.modes[hook] = mode } else { (d.mode, d.modes) = (mode, [:]) }
        }
    }
    public var mode: Mode { data.withLockedValue { $0.mode } }

    /// The next `count` requests get this answer, which no receiver should give (nothing of them is recorded).
    public func inject(_ answer: HostileAnswer, count: Int = 1) {
        data.withLockedValue { $0.hostile += Array(repeating: answer, count: max(0, min(count, 10_000))) }
    }

    /// Checks the signatures of the requests to `hook` with this secret from now on (nil: no more checks).
    public func setSecret(_ secret: String?, for hook: String) { data.withLockedValue { $0.secrets[hook] = secret } }

    /// What was recorded, oldest first.
    public func received() -> [Request] { data.withLockedValue { $0.requests } }

    /// Requests answered with an error, and left unanswered, so far.
    public var refusedCount: (failed: Int, hung: Int) { data.withLockedValue { ($0.failed, $0.hung) } }

    public func reset() {
        data.withLockedValue { d in
            d.requests.removeAll()
            (d.failed, d.hung, d.events) = (0, 0, 0)
        }
    }

    /// Whether a Standard Webhooks signature verifies: one of the `v1,` signatures is the HMAC-SHA256 of
    /// `id.timestamp.body` with the secret, and the timestamp is within five minutes of `now`.
    public static func verify(
        secret: String,
        id: String,
        timestamp: String,
        signatures: String,
        body: [UInt8],
        now: Date = Date()
    ) -> Bool {
        guard secret.hasPrefix("whsec_"), let key = Foundation.Data(base64Encoded: String(secret.dropFirst(6))),
            let t = Int64(timestamp), abs(now.timeIntervalSince1970 - Double(t)) <= 300
        else { return false }
        var content = Array("\(id).\(timestamp).".utf8)
        content += body
        let expected = Foundation.Data(HMAC<SHA256>.authenticationCode(for: content, using: SymmetricKey(data: key)))
        return signatures.split(separator: " ").contains { entry in
            guard entry.hasPrefix("v1,"), let given = Foundation.Data(base64Encoded: String(entry.dropFirst(3))) else {
                return false
            }
            return given.count == expected.count && zip(given, expected).reduce(0) { $0 | ($1.0 ^ $1.1) } == 0
        }
    }
}

struct WebhookReceiverLogic: EmulatorLogic {
    let data: NIOLockedValueBox<WebhookReceiver.Data>

    final class Connection {}
    var initialMaxConcurrentStreams: Int { 100 }
    var responseDelay: ResponseDelay { .none }
    func makeConnection(hasClientCertificate: Bool) -> Connection { Connection() }

    func handle(_ request: EmulatorRequest, connection: Connection, control: ConnectionControl) -> EmulatorAction {
        let parts = request.path.split(separator: "?", maxSplits: 1)[0].split(separator: "/")
        guard request.method == "POST", parts.count == 2, parts[0] == "hooks" else {
            return .respond(.json(404, ["error": "POST /hooks/<name> is the only route"]))
        }
        let hook = String(parts[1])
        if let answer = data.withLockedValue({ $0.hostile.isEmpty ? nil : $0.hostile.removeFirst() }) {
            data.withLockedValue { $0.failed += 1 }
            return .respond(answer.response(extraHeaders: []))
        }
        let mode = data.withLockedValue { $0.modes[hook] ?? $0.mode }
        if mode.gone { return .respond(.json(410, ["error": "this receiver is gone"])) }
        let roll = Double.random(in: 0..<1)
        if roll < mode.hangShare {
            data.withLockedValue { $0.hung += 1 }
            return .stall
        }
        if roll < mode.hangShare + mode.failShare {
            data.withLockedValue { $0.failed += 1 }
            return .respond(.json(mode.failStatus, ["error": "failing on purpose"]))
        }
        let id = request.header("webhook-id") ?? ""
        let timestamp = request.header("webhook-timestamp") ?? ""
        let signature = request.header("webhook-signature") ?? ""
        guard !id.isEmpty, !timestamp.isEmpty, !signature.isEmpty else {
            return .respond(.json(400, ["error": "webhook-id, webhook-timestamp and webhook-signature are required"]))
        }
        var events: [WebhookReceiver.Event] = []
        if let body = try? JSONValue.parse(request.body), let list = body["data"]?["events"]?.arrayValue {
            for e in list {
                events.append(
                    .init(
                        id: e["id"]?.stringValue ?? "",
                        type: e["type"]?.stringValue ?? "",
                        notificationID: e["data"]?["notification_id"]?.stringValue,
                        deliveryID: e["data"]?["delivery_id"]?.intValue
                    )
                )
            }
        }
        data.withLockedValue { d in
            let verified = d.secrets[hook].map {
                WebhookReceiver.verify(
                    secret: $0,
                    id: id,
                    timestamp: timestamp,
                    signatures: signature,
                    body: request.body
                )
            }
            d.requests.append(
                .init(
                    hook: hook,
                    id: id,
                    timestamp: timestamp,
                    signature: signature,
                    verified: verified,
                    receivedAt: Date(),
                    events: events,
                    body: request.body
                )
            )
            d.events += events.count
            if d.requests.count > WebhookReceiver.bodiesKept {
                d.requests[d.requests.count - WebhookReceiver.bodiesKept - 1].body = nil
            }
            if d.requests.count > WebhookReceiver.requestsKept { d.requests.removeFirst(d.requests.count / 10) }
        }
        return .respond(.json(200, ["received": events.count]))
    }
}
