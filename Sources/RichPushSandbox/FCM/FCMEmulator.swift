import Foundation
import Logging
import NIOCore
import NIOPosix
import RichPushCore
import RichPushTransport
import _CryptoExtras

/// A local FCM: Google's service-account token endpoint and FCM HTTP v1 `messages:send`, over TLS with
/// HTTP/2 or HTTP/1.1, validating what the real service validates, with a token registry, quotas, a record
/// of every accepted message, and faults on demand.
///
/// ```swift
/// let fcm = try FCMEmulator(credentials: creds)
/// let port = try await fcm.start()
/// // service account token_uri: https://127.0.0.1:\(port)/token; messages at https://127.0.0.1:\(port)/v1/...
/// fcm.unregister(token: "…")                 // later sends: 404 UNREGISTERED
/// fcm.inject(.unavailable(retryAfter: 3))    // the next send: 503 with Retry-After
/// ```
public final class FCMEmulator: Sendable {
    public struct Configuration: Sendable {
        public var accessTokenLifetime: TimeInterval
        public var autoRegisterTokens: Bool
        /// Shorter registration tokens are answered `INVALID_ARGUMENT`.
        public var minimumTokenLength: Int
        public var projectMessagesPerMinute: Int
        public var deviceMessagesPerMinute: Int
        public var recordLimit: Int
        /// The wait before each answer (the token endpoint's too), as from a service a round trip away.
        public var responseDelay: ResponseDelay
        public var now: @Sendable () -> Date

        public init(
            accessTokenLifetime: TimeInterval = 3600,
            autoRegisterTokens: Bool = true,
            minimumTokenLength: Int = 8,
            projectMessagesPerMinute: Int = 600_000,
            deviceMessagesPerMinute: Int = 240,
            recordLimit: Int = 100_000,
            responseDelay: ResponseDelay = .none,
            now: @escaping @Sendable () -> Date = { Date() }
        ) {
            self.responseDelay = responseDelay
            self.accessTokenLifetime = accessTokenLifetime
            self.autoRegisterTokens = autoRegisterTokens
            self.minimumTokenLength = minimumTokenLength
            self.projectMessagesPerMinute = projectMessagesPerMinute
            self.deviceMessagesPerMinute = deviceMessagesPerMinute
            self.recordLimit = recordLimit
            self.now = now
        }
    }

    public let configuration: Configuration
    let state: FCMEmulatorState
    let server: EmulatorServer<FCMEmulatorLogic>

    public init(
        credentials: SandboxCredentials,
        configuration: Configuration = Configuration(),
        eventLoopGroup: EventLoopGroup? = nil,
        logger: Logger = .disabled
    ) throws {
        self.configuration = configuration
        state = FCMEmulatorState(recordLimit: configuration.recordLimit)
        server = try EmulatorServer(
            logic: FCMEmulatorLogic(state: state, configuration: configuration),
            certificatePEM: credentials.serverCertificatePEM,
            keyPEM: credentials.serverKeyPEM,
            allowHTTP1: true,
            group: eventLoopGroup,
            logger: logger
        )
        registerServiceAccount(
            email: credentials.fcmClientEmail,
            publicKey: credentials.fcmPublicKey,
            projects: [credentials.fcmProjectID]
        )
    }

    @discardableResult
    public func start(port: Int = 0) async throws -> Int {
        try await server.start(port: port)
    }

    public var port: Int { server.port }
    public var tokenURI: String { "https://127.0.0.1:\(port)/token" }

    public func stop() async { await server.stop() }

    /// Accepts assertions signed by this account, for messages to these projects.
    public func registerServiceAccount(email: String, publicKey: _RSA.Signing.PublicKey, projects: Set<String>) {
        state.data.withLockedValue { $0.accounts[email] = .init(publicKey: publicKey, projects: projects) }
    }

    public func registerDevice(_ token: String, project: String) {
        state.data.withLockedValue { $0.devices[token] = .init(project: project, removed: false) }
    }

    /// Later sends to this token get `404 UNREGISTERED`.
    public func unregister(token: String) {
        state.data.withLockedValue { d in
            var dev = d.devices[token] ?? .init(project: "", removed: true)
            dev.removed = true
            d.devices[token] = dev
        }
    }

    /// The next `count` sends show this fault.
    public func inject(_ fault: FCMFault, count: Int = 1) {
        state.data.withLockedValue { $0.faults.add(fault, count: count) }
    }
    /// This share of sends (0...1) show this fault, until cleared.
    public func inject(_ fault: FCMFault, rate: Double) {
        state.data.withLockedValue { $0.faults.add(fault, rate: rate) }
    }
    public func clearFaults() { state.data.withLockedValue { $0.faults.clear() } }
    /// Faults injected with a count that requests have not met yet.
    public var pendingFaults: Int { state.data.withLockedValue { $0.faults.pending } }

    /// Accepted messages, oldest first (at most `recordLimit`).
    public func recorded() -> [RecordedFCMMessage] { state.data.withLockedValue { $0.records.ordered } }

    public var acceptedCount: Int { state.data.withLockedValue { $0.records.total } }
    public var tokenExchangeCount: Int { state.data.withLockedValue { $0.tokenExchanges } }
    public var errorCounts: [String: Int] { state.data.withLockedValue { $0.errors } }

    public func resetRecords() {
        state.data.withLockedValue { d in
            d.records.removeAll()
            d.errors.removeAll()
        }
    }
}
