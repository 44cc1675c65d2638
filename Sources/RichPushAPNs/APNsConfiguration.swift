import Crypto
import Foundation
import Logging
import RichPushTransport

/// A token-auth signing key: the `.p8` file, its key id and the team id.
public struct APNsSigningKey: Sendable {
    public var privateKey: P256.Signing.PrivateKey
    public var keyID: String
    public var teamID: String

    public init(privateKey: P256.Signing.PrivateKey, keyID: String, teamID: String) {
        self.privateKey = privateKey
        self.keyID = keyID
        self.teamID = teamID
    }

    /// Reads a `.p8` file's PEM text.
    public init(p8 pem: String, keyID: String, teamID: String) throws {
        self.init(privateKey: try P256.Signing.PrivateKey(pemRepresentation: pem), keyID: keyID, teamID: teamID)
    }
}

/// How an ``APNsClient`` connects and authenticates.
public struct APNsConfiguration: Sendable {
    public enum Endpoint: Sendable {
        case production
        case sandbox
        /// Any host, such as the RichPush sandbox emulator on loopback.
        case custom(host: String, port: Int)
        /// Broadcast channel management (create, read, delete, list), on hosts of its own.
        case productionChannels
        case sandboxChannels

        var hostPort: (String, Int) {
            switch self {
            case .production: return ("api.push.apple.com", 443)
            case .sandbox: return ("api.sandbox.push.apple.com", 443)
            case .productionChannels: return ("api-manage-broadcast.push.apple.com", 2196)
            case .sandboxChannels: return ("api-manage-broadcast.sandbox.push.apple.com", 2195)
            case .custom(let h, let p): return (h, p)
            }
        }

        /// `https://host:port`: the push service's origin, as a node's circuits and bounds name it.
        public var origin: String {
            let (host, port) = hostPort
            return "https://\(host.lowercased()):\(port)"
        }

        /// Where this environment manages its broadcast channels (a custom host serves both).
        public var channelManagement: Endpoint {
            switch self {
            case .production, .productionChannels: return .productionChannels
            case .sandbox, .sandboxChannels: return .sandboxChannels
            case .custom: return self
            }
        }
    }

    public enum Authentication: Sendable {
        case token(APNsSigningKey)
        case certificate(ClientIdentity)

        /// Token authentication from a `.p8` key.
        public static func key(_ key: APNsSigningKey) -> Authentication { .token(key) }
    }

    public var endpoint: Endpoint
    public var authentication: Authentication
    public var trust: TLSTrust
    /// The most connections opened (as load needs them); each follows the server's live stream limit.
    public var connections: Int
    /// Requests in flight on one connection before the next connection is opened: below APNs's limit of 1,000,
    /// since HTTP/2 bookkeeping costs more per request the more streams one connection holds.
    public var streamsPerConnection: Int
    public var requestTimeout: TimeInterval
    public var connectTimeout: TimeInterval
    /// A connection's provider token is replaced after this long (APNs: between 20 and 60 minutes).
    public var tokenRefreshInterval: TimeInterval
    /// Sends per request that the server did not process (refused streams, GOAWAY, connects).
    public var maxAttempts: Int
    public var pingInterval: TimeInterval
    /// The clock tokens are dated with; injected so tests control time.
    public var now: @Sendable () -> Date
    /// Where the client's connections tell what happens to them.
    public var logger: Logger

    public static let minimumTokenAge: TimeInterval = 20 * 60
    public static let maximumTokenAge: TimeInterval = 60 * 60

    public init(
        endpoint: Endpoint,
        authentication: Authentication,
        trust: TLSTrust = .system,
        connections: Int = HTTP2PoolDefaults.connections,
        streamsPerConnection: Int = HTTP2PoolDefaults.streamsPerConnection,
        requestTimeout: TimeInterval = 10,
        connectTimeout: TimeInterval = 10,
        tokenRefreshInterval: TimeInterval = 50 * 60,
        maxAttempts: Int = 3,
        pingInterval: TimeInterval = 60,
        now: @escaping @Sendable () -> Date = { Date() },
        logger: Logger = .disabled
    ) {
        self.endpoint = endpoint
        self.authentication = authentication
        self.trust = trust
        self.connections = connections
        self.streamsPerConnection = streamsPerConnection
        self.requestTimeout = requestTimeout
        self.connectTimeout = connectTimeout
        self.tokenRefreshInterval = min(max(tokenRefreshInterval, Self.minimumTokenAge), Self.maximumTokenAge - 60)
        self.maxAttempts = maxAttempts
        self.pingInterval = pingInterval
        self.now = now
        self.logger = logger
    }
}
