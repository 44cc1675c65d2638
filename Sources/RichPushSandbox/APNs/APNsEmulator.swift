import Crypto
import Foundation
import Logging
import NIOCore
import NIOPosix
import RichPushCore
import RichPushTransport

/// A local APNs: HTTP/2 over TLS on loopback, validating requests the way Apple's service does, with a device
/// registry, a record of every accepted notification, and faults on demand.
///
/// ```swift
/// let creds = try SandboxCredentials.generate()
/// let apns = try APNsEmulator(credentials: creds)
/// let port = try await apns.start()
/// // point an APNsClient at .custom(host: "127.0.0.1", port: port), trusting creds.caCertificatePEM
/// apns.inject(.status(503, reason: "ServiceUnavailable"), count: 2)
/// print(apns.recorded(token: token))
/// ```
public final class APNsEmulator: Sendable {
    public enum Environment: String, Sendable, Hashable { case sandbox, production }

    public struct Configuration: Sendable {
        public var environment: Environment
        /// The stream limit announced after the first verified provider token (1 until then).
        public var maxConcurrentStreams: Int
        /// Accept a device token the first time it is used (for its topic and this environment).
        public var autoRegisterTokens: Bool
        /// Require 64-hex-character tokens.
        public var strictTokenLength: Bool
        /// Certificate authentication: no provider tokens; clients present a certificate.
        public var certificateMode: Bool
        /// Bundle ids each team may push to; teams not listed may push to any.
        public var teamTopics: [String: Set<String>]
        /// How many accepted notifications are kept for inspection (older ones are dropped; the count is not).
        public var recordLimit: Int
        /// The wait before each answer, as from a service a round trip away.
        public var responseDelay: ResponseDelay
        public var now: @Sendable () -> Date

        public init(
            environment: Environment = .sandbox,
            maxConcurrentStreams: Int = 1000,
            autoRegisterTokens: Bool = true,
            strictTokenLength: Bool = false,
            certificateMode: Bool = false,
            teamTopics: [String: Set<String>] = [:],
            recordLimit: Int = 100_000,
            responseDelay: ResponseDelay = .none,
            now: @escaping @Sendable () -> Date = { Date() }
        ) {
            self.responseDelay = responseDelay
            self.environment = environment
            self.maxConcurrentStreams = maxConcurrentStreams
            self.autoRegisterTokens = autoRegisterTokens
            self.strictTokenLength = strictTokenLength
            self.certificateMode = certificateMode
            self.teamTopics = teamTopics
            self.recordLimit = recordLimit
            self.now = now
        }
    }

    /// APNs refuses a new provider token on a connection within this many seconds of the last.
    public static let minimumTokenInterval: TimeInterval = 20 * 60

    public let configuration: Configuration
    let state: APNsEmulatorState
    let server: EmulatorServer<APNsEmulatorLogic>

    public init(
        credentials: SandboxCredentials,
        configuration: Configuration = Configuration(),
        eventLoopGroup: EventLoopGroup? = nil,
        logger: Logger = .disabled
    ) throws {
        self.configuration = configuration
        state = APNsEmulatorState(recordLimit: configuration.recordLimit)
        server = try EmulatorServer(
            logic: APNsEmulatorLogic(state: state, configuration: configuration),
            certificatePEM: credentials.serverCertificatePEM,
            keyPEM: credentials.serverKeyPEM,
            clientCertificateAuthorityPEM: configuration.certificateMode ? credentials.caCertificatePEM : nil,
            allowHTTP1: false,
            group: eventLoopGroup,
            logger: logger
        )
        registerKey(id: credentials.apnsKeyID, teamID: credentials.apnsTeamID, publicKey: credentials.apnsPublicKey)
    }

    /// Listens on 127.0.0.1; 0 picks a free port. Returns the port.
    @discardableResult
    public func start(port: Int = 0) async throws -> Int {
        try await server.start(port: port)
    }

    public var port: Int { server.port }

    public func stop() async { await server.stop() }

    // MARK: Keys and devices

    /// Accepts provider tokens signed by this key for this team (nil environment: both).
    public func registerKey(
        id: String,
        teamID: String,
        publicKey: P256.Signing.PublicKey,
        environment: Environment? = nil
    ) {
        state.data.withLockedValue {
            $0.keys[id] = .init(teamID: teamID, publicKey: publicKey, environment: environment)
        }
    }

    public func registerDevice(_ token: String, topic: String, environment: Environment? = nil) {
        state.data.withLockedValue {
            $0.devices[token.lowercased()] = .init(topic: topic, environment: environment ?? configuration.environment)
        }
    }

    /// Marks a token as no longer valid for its topic: later sends get `410 Unregistered` with this time.
    public func unregisterDevice(_ token: String, at date: Date? = nil) {
        let when = date ?? configuration.now()
        state.data.withLockedValue { d in
            if var dev = d.devices[token.lowercased()] {
                dev.unregisteredAt = when
                d.devices[token.lowercased()] = dev
            } else {
                d.devices[token.lowercased()] = .init(
                    topic: "",
                    environment: configuration.environment,
                    unregisteredAt: when
                )
            }
        }
    }

    // MARK: Faults

    /// The next `count` requests show this fault.
    public func inject(_ fault: APNsFault, count: Int = 1) {
        state.data.withLockedValue { $0.faults.add(fault, count: count) }
    }

    /// This share of requests (0...1) show this fault, until cleared.
    public func inject(_ fault: APNsFault, rate: Double) {
        state.data.withLockedValue { $0.faults.add(fault, rate: rate) }
    }

    public func clearFaults() { state.data.withLockedValue { $0.faults.clear() } }
    /// Faults injected with a count that requests have not met yet.
    public var pendingFaults: Int { state.data.withLockedValue { $0.faults.pending } }

    // MARK: What was received

    /// Accepted notifications, oldest first (at most `recordLimit`), optionally for one token.
    public func recorded(token: String? = nil) -> [RecordedAPNsNotification] {
        guard let token else { return state.data.withLockedValue { $0.records.ordered } }
        let wanted = token.lowercased()
        return state.data.withLockedValue { $0.records.items(withKey: wanted) }
    }

    public var acceptedCount: Int { state.data.withLockedValue { $0.records.total } }

    /// How many notifications are kept, and the newest `limit` of them, without copying the others.
    public func newest(_ limit: Int) -> (kept: Int, newest: [RecordedAPNsNotification]) {
        state.data.withLockedValue { ($0.records.count, $0.records.last(limit)) }
    }

    /// What a device's notification list shows, oldest first: every alert it was sent, but that one with an
    /// `apns-collapse-id` replaces the one shown with the same id (in its place at the top, as iOS does). Read
    /// from the kept records (at most `recordLimit`). Live Activity and background pushes are not in the list.
    public func notificationCenter(token: String) -> [RecordedAPNsNotification] {
        var shown: [RecordedAPNsNotification] = []
        for n in recorded(token: token) where n.pushType == "alert" {
            if let c = n.collapseID { shown.removeAll { $0.collapseID == c } }
            shown.append(n)
        }
        return shown
    }

    /// Rejections by reason.
    public var rejectedCounts: [String: Int] { state.data.withLockedValue { $0.rejected } }

    // MARK: Live Activities and channels

    /// Marks a token as a push-to-start token for this attributes type (nil: any); a start sent to any other
    /// token is ignored by the device unless tokens register on first use.
    public func registerPushToStartToken(_ token: String, attributesType: String? = nil) {
        state.data.withLockedValue { $0.live.pushToStart[token.lowercased()] = .some(attributesType) }
    }

    /// Activities the device shows, started by push or by the app, oldest state first.
    public func activities() -> [EmulatedActivity] {
        state.data.withLockedValue { Array($0.live.activities.values) }.sorted { $0.id < $1.id }
    }

    /// The activity an update token belongs to.
    public func activity(updateToken: String) -> EmulatedActivity? {
        state.data.withLockedValue { d in d.live.byToken[updateToken.lowercased()].flatMap { d.live.activities[$0] } }
    }

    /// Subscribes an activity (by its update token) to a channel, as `pushType: .channel(id)` does on device.
    @discardableResult
    public func subscribe(updateToken: String, channel: String) -> Bool {
        state.data.withLockedValue { d in
            guard let id = d.live.byToken[updateToken.lowercased()], d.live.channels[channel] != nil else {
                return false
            }
            d.live.channels[channel]?.subscribers.insert(id)
            d.live.activities[id]?.channel = channel
            return true
        }
    }

    /// The channels of an app (all apps: nil).
    public func channels(bundleID: String? = nil) -> [EmulatedChannel] {
        state.data.withLockedValue { d in d.live.channels.values.filter { bundleID == nil || $0.bundleID == bundleID } }
            .sorted { $0.id < $1.id }
    }

    /// Live Activity pushes APNs accepted that the device did not apply, by reason (`older-timestamp`, `ended`…).
    public var liveIgnoredCounts: [String: Int] { state.data.withLockedValue { $0.live.ignored } }

    public func resetRecords() {
        state.data.withLockedValue { d in
            d.records.removeAll()
            d.rejected.removeAll()
            d.live = LiveActivityModel()
        }
    }
}
