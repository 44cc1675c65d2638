import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RichPushCore
import RichPushTransport
import _CryptoExtras

/// How an ``FCMClient`` connects.
public struct FCMConfiguration: Sendable {
    public enum Endpoint: Sendable {
        case production
        case custom(host: String, port: Int)

        var hostPort: (String, Int) {
            switch self {
            case .production: return ("fcm.googleapis.com", 443)
            case .custom(let h, let p): return (h, p)
            }
        }

        /// `https://host:port`: the push service's origin, as a node's circuits and bounds name it.
        public var origin: String {
            let (host, port) = hostPort
            return "https://\(host.lowercased()):\(port)"
        }
    }

    public var serviceAccount: ServiceAccount
    public var endpoint: Endpoint
    public var trust: TLSTrust
    /// The most connections opened (as load needs them).
    public var connections: Int
    /// Requests in flight on one connection before the next connection is opened.
    public var streamsPerConnection: Int
    public var requestTimeout: TimeInterval
    /// A connection to FCM made (TCP, TLS and its first SETTINGS) within this, or it fails.
    public var connectTimeout: TimeInterval
    /// A cached access token is replaced this long before it expires.
    public var tokenRefreshMargin: TimeInterval
    public var scope: String
    public var now: @Sendable () -> Date
    /// Where the client tells of its connections and of access tokens it could not get.
    public var logger: Logger

    public init(
        serviceAccount: ServiceAccount,
        endpoint: Endpoint = .production,
        trust: TLSTrust = .system,
        connections: Int = HTTP2PoolDefaults.connections,
        streamsPerConnection: Int = HTTP2PoolDefaults.streamsPerConnection,
        requestTimeout: TimeInterval = 10,
        connectTimeout: TimeInterval = 10,
        tokenRefreshMargin: TimeInterval = 300,
        scope: String = "https://www.googleapis.com/auth/firebase.messaging",
        now: @escaping @Sendable () -> Date = { Date() },
        logger: Logger = .disabled
    ) {
        self.serviceAccount = serviceAccount
        self.endpoint = endpoint
        self.trust = trust
        self.connections = connections
        self.streamsPerConnection = streamsPerConnection
        self.requestTimeout = requestTimeout
        self.connectTimeout = connectTimeout
        self.tokenRefreshMargin = tokenRefreshMargin
        self.scope = scope
        self.now = now
        self.logger = logger
    }
}

/// FCM HTTP v1 over HTTP/2: service-account auth with one shared, cached access token, and FCM's error model
/// mapped to ``RetryDecision``.
///
/// ```swift
/// let account = try ServiceAccount(contentsOf: URL(fileURLWithPath: "service-account.json"))
/// let client = FCMClient(configuration: .init(serviceAccount: account))
/// let request = FCMRenderer(projectID: account.projectID).render(message, to: .token(token))
/// let name = try await client.send(request)     // "projects/…/messages/…"
/// ```
public final class FCMClient: Sendable {
    public let configuration: FCMConfiguration
    let pool: HTTP2ConnectionPool<Void>
    let tokenPool: HTTP2ConnectionPool<Void>
    let tokens: AccessTokenCache
    let group: EventLoopGroup
    let ownsGroup: Bool
    let tokenPath: String

    public init(configuration: FCMConfiguration, eventLoopGroup: EventLoopGroup? = nil) {
        self.configuration = configuration
        ownsGroup = eventLoopGroup == nil
        group = eventLoopGroup ?? MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let (host, port) = configuration.endpoint.hostPort
        // Held to 1 ms...1 h before the conversion, which traps past 64 bits.
        let timeout = TimeAmount.seconds(held: configuration.requestTimeout, to: 0.001...3600, otherwise: 10)
        let connect = TimeAmount.seconds(held: configuration.connectTimeout, to: 0.001...3600, otherwise: 10)
        pool = HTTP2ConnectionPool(
            configuration: .init(
                target: .init(host: host, port: port, trust: configuration.trust),
                connections: configuration.connections,
                streamsPerConnection: configuration.streamsPerConnection,
                connectTimeout: connect,
                requestTimeout: timeout,
                logger: configuration.logger
            ),
            group: group
        ) {}
        let tokenURL = URL(string: configuration.serviceAccount.tokenURI)
        let tokenHost = tokenURL?.host ?? "oauth2.googleapis.com"
        tokenPath = tokenURL.map { $0.path.isEmpty ? "/token" : $0.path } ?? "/token"
        tokenPool = HTTP2ConnectionPool(
            configuration: .init(
                target: .init(host: tokenHost, port: tokenURL?.port ?? 443, trust: configuration.trust),
                connections: 1,
                requestTimeout: timeout,
                logger: configuration.logger
            ),
            group: group
        ) {}
        tokens = AccessTokenCache()
    }

    /// Sends a request rendered by ``FCMRenderer``; returns the message name.
    public func send(_ request: FCMRequest) async throws(FCMFailure) -> String {
        var body = ByteBufferAllocator().buffer(capacity: request.bodyBytes.count)
        body.writeBytes(request.bodyBytes)
        return try await send(path: request.path, body: body)
    }

    /// Sends a `{"message": …}` body to a project (several projects may share one client and account).
    public func send(
        message: JSONValue,
        projectID: String? = nil,
        validateOnly: Bool = false
    ) async throws(FCMFailure) -> String {
        var root: [String: JSONValue] = ["message": message]
        if validateOnly { root["validate_only"] = true }
        var body = ByteBufferAllocator().buffer(capacity: 512)
        body.writeBytes(JSONValue.object(root).serialized())
        return try await send(
            path: "/v1/projects/\(projectID ?? configuration.serviceAccount.projectID)/messages:send",
            body: body
        )
    }

    /// Sends a prepared body to a `messages:send` path.
    public func send(path: String, body: ByteBuffer) async throws(FCMFailure) -> String {
        var refreshed = false
        while true {
            let token = try await accessToken(forceRefresh: false)
            let response: H2Response
            do {
                (response, _) = try await pool.execute { _ in
                    H2Request(
                        path: path,
                        headers: [
                            ("authorization", "Bearer " + token), ("content-type", "application/json; charset=UTF-8"),
                        ],
                        body: body
                    )
                }
            } catch let error as TransportError {
                throw FCMFailure(
                    message: error.description,
                    fieldViolations: [],
                    transport: error,
                    retry: error == .shutDown ? .never : .retry
                )
            } catch {
                throw FCMFailure(message: "\(error)", fieldViolations: [], retry: .retry)
            }
            if response.status == 200 {
                guard let name = (try? JSONValue.parse(response.bodyBytes))?["name"]?.stringValue else {
                    throw FCMFailure(
                        httpStatus: 200,
                        message: "a 200 answer without a message name",
                        fieldViolations: [],
                        retry: .never
                    )
                }
                return name
            }
            // A token the server no longer takes (revoked, expired early): fetch a fresh one, once.
            if response.status == 401 && !refreshed {
                refreshed = true
                tokens.invalidate(token)
                continue
            }
            throw FCMFailure.from(
                status: response.status,
                body: response.bodyBytes,
                retryAfter: parseRetryAfter(response.headers.first(name: "retry-after"))
            )
        }
    }

    /// The cached access token, fetched when missing or about to expire; concurrent callers share one fetch.
    public func accessToken(forceRefresh: Bool = false) async throws(FCMFailure) -> String {
        let now = configuration.now()
        let margin = configuration.tokenRefreshMargin
        if !forceRefresh, let cached = tokens.cached(now: now, margin: margin) { return cached }
        let task: Task<(String, Date), Error> = tokens.task(now: now, margin: margin, force: forceRefresh) { [self] in
            try await self.exchangeToken()
        }
        do {
            return try await task.value.0
        } catch let f as FCMFailure {
            tokens.clear(task)
            configuration.logger.warning("could not get an access token", metadata: ["error": "\(f)"])
            throw f
        } catch {
            tokens.clear(task)
            configuration.logger.warning("could not get an access token", metadata: ["error": "\(error)"])
            throw FCMFailure(message: "\(error)", fieldViolations: [], retry: .retry)
        }
    }

    /// How many times this client asked the token endpoint for a token.
    public var tokenFetches: Int { tokens.fetches }

    private func exchangeToken() async throws -> (String, Date) {
        let account = configuration.serviceAccount
        let now = configuration.now()
        let iat = Int(now.timeIntervalSince1970)
        var header = #"{"alg":"RS256","typ":"JWT""#
        if let kid = account.privateKeyID { header += #","kid":"\#(kid)""# }
        header += "}"
        let claims =
            #"{"iss":"\#(account.clientEmail)","scope":"\#(configuration.scope)","aud":"\#(account.tokenURI)","iat":\#(iat),"exp":\#(iat + 3600)}"#
        let assertion = try JWT.rs256(header: header, claims: claims, key: account.privateKey)
        let form = "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=" + assertion
        var buffer = ByteBufferAllocator().buffer(capacity: form.utf8.count)
        buffer.writeString(form)
        let body = buffer
        let path = tokenPath
        let (response, _) = try await tokenPool.execute { _ in
            H2Request(path: path, headers: [("content-type", "application/x-www-form-urlencoded")], body: body)
        }
        let json = (try? JSONValue.parse(response.bodyBytes)) ?? .null
        guard response.status == 200, let token = json["access_token"]?.stringValue else {
            // The endpoint's words go into messages and metrics: held to a short printable prefix.
            let error = String((json["error"]?.stringValue ?? "HTTP \(response.status)").prefix(64))
            let description = String((json["error_description"]?.stringValue ?? "").prefix(200))
            throw FCMFailure(
                httpStatus: response.status,
                code: .status("OAUTH_\(error.uppercased())"),
                message: "token exchange failed: \(error) \(description)",
                fieldViolations: [],
                retry: response.status >= 500 ? .retry : .fixCredentials
            )
        }
        return (token, now.addingTimeInterval(Self.tokenLifetime(json["expires_in"])))
    }

    /// A token's `expires_in`, held to a minute...a day: a lifetime of 0 or less would fetch a token for every
    /// send, a huge one overflow; anything but a finite number is the usual hour.
    static func tokenLifetime(_ value: JSONValue?) -> TimeInterval {
        guard let seconds = value?.doubleValue, !seconds.isNaN else { return 3600 }
        return min(max(seconds, 60), 86_400)
    }

    public func shutdown() async {
        await pool.shutdown()
        await tokenPool.shutdown()
        if ownsGroup { try? await group.shutdownGracefully() }
    }
}

/// The access token and the fetch in flight, shared by every sender of a client.
final class AccessTokenCache: Sendable {
    struct State {
        var task: Task<(String, Date), Error>?
        var value: (token: String, expires: Date)?
        var fetches = 0
    }

    private let state = NIOLockedValueBox(State())

    func task(
        now: Date,
        margin: TimeInterval,
        force: Bool,
        fetch: @escaping @Sendable () async throws -> (String, Date)
    ) -> Task<(String, Date), Error> {
        state.withLockedValue { s in
            if !force, let v = s.value, v.expires.timeIntervalSince(now) > margin {
                let value = v
                return Task { (value.token, value.expires) }
            }
            if let t = s.task, !force { return t }
            s.fetches += 1
            let box = state
            let t = Task {
                let v = try await fetch()
                box.withLockedValue {
                    $0.value = (v.0, v.1)
                    $0.task = nil
                }
                return v
            }
            s.task = t
            return t
        }
    }

    /// The token when it is fresh enough: the path every send takes, without a task.
    func cached(now: Date, margin: TimeInterval) -> String? {
        state.withLockedValue { s in
            guard let v = s.value, v.expires.timeIntervalSince(now) > margin else { return nil }
            return v.token
        }
    }

    func clear(_ task: Task<(String, Date), Error>) {
        state.withLockedValue { s in if s.task == task { s.task = nil } }
    }

    func invalidate(_ token: String) { state.withLockedValue { s in if s.value?.token == token { s.value = nil } } }

    var fetches: Int { state.withLockedValue { $0.fetches } }
}
