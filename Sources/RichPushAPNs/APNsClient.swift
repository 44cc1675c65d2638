import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RichPushCore
import RichPushTransport

/// An accepted notification.
public struct APNsDelivery: Sendable, Hashable {
    public var apnsID: String?
    /// Sent by the sandbox environment only.
    public var uniqueID: String?
}

/// A notification APNs did not accept, or could not be sent.
public struct APNsFailure: Error, Sendable, CustomStringConvertible {
    public var status: Int?
    public var reason: APNsReason?
    /// For 410: when APNs learned the token was no longer valid.
    public var timestamp: Date?
    public var apnsID: String?
    public var transport: TransportError?
    public var retry: RetryDecision

    /// A stable label for metrics and stored outcomes.
    public var label: String { reason?.metricLabel ?? transport.map { "transport_\($0.label)" } ?? "unknown" }

    public var description: String {
        if let reason { return "APNs \(status ?? 0) \(reason)" + (timestamp.map { " since \($0)" } ?? "") }
        return transport?.description ?? "unknown failure"
    }
}

/// One rendered notification in the form the client sends, for many device tokens: rendered once (with no
/// token), its body in a buffer every send shares.
public struct APNsPreparedRequest: Sendable {
    public let headers: [(String, String)]
    public let body: ByteBuffer

    public init(_ request: APNsRequest) {
        headers = request.headers.map { ($0.name, $0.value) }
        var b = ByteBufferAllocator().buffer(capacity: request.body.count)
        b.writeBytes(request.body)
        body = b
    }
}

/// A provider connection to APNs: HTTP/2 over TLS, token or certificate authentication.
///
/// ```swift
/// let key = try APNsSigningKey(p8: p8Text, keyID: "ABC123DEFG", teamID: "DEF123GHIJ")
/// let client = APNsClient(configuration: .init(endpoint: .production, authentication: .token(key)))
/// let request = APNsRenderer(bundleID: "com.example.app").render(message, deviceToken: token)
/// do { let delivery = try await client.send(request) } catch { print(error.retry) }
/// await client.shutdown()
/// ```
public final class APNsClient: Sendable {
    public let configuration: APNsConfiguration
    let pool: HTTP2ConnectionPool<ProviderTokenSlot>
    let group: EventLoopGroup
    let ownsGroup: Bool

    public init(configuration: APNsConfiguration, eventLoopGroup: EventLoopGroup? = nil) {
        self.configuration = configuration
        ownsGroup = eventLoopGroup == nil
        group = eventLoopGroup ?? MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let (host, port) = configuration.endpoint.hostPort
        var identity: ClientIdentity?
        if case .certificate(let id) = configuration.authentication { identity = id }
        let poolConfig = HTTP2ConnectionPool<ProviderTokenSlot>.Configuration(
            target: .init(host: host, port: port, trust: configuration.trust, identity: identity),
            connections: configuration.connections,
            streamsPerConnection: configuration.streamsPerConnection,
            // Held to 1 ms...1 h (a ping at most daily) before the conversion, which traps past 64 bits.
            connectTimeout: .seconds(held: configuration.connectTimeout, to: 0.001...3600, otherwise: 10),
            requestTimeout: .seconds(held: configuration.requestTimeout, to: 0.001...3600, otherwise: 10),
            maxAttempts: configuration.maxAttempts,
            pingInterval: .seconds(held: configuration.pingInterval, to: 0.001...86_400, otherwise: 60),
            logger: configuration.logger
        )
        pool = HTTP2ConnectionPool(configuration: poolConfig, group: group) { ProviderTokenSlot() }
    }

    /// Sends a request rendered by ``APNsRenderer``.
    public func send(_ request: APNsRequest) async throws(APNsFailure) -> APNsDelivery {
        let prepared = APNsPreparedRequest(request)
        return try await send(path: request.path, headers: prepared.headers, body: prepared.body)
    }

    /// Sends a prepared request to one device token.
    public func send(_ prepared: APNsPreparedRequest, to deviceToken: String) async throws(APNsFailure) -> APNsDelivery
    {
        try await send(path: "/3/device/" + deviceToken, headers: prepared.headers, body: prepared.body)
    }

    /// Sends a body that is already in a buffer (for one payload to many tokens, render once).
    public func send(
        path: String,
        headers: [(String, String)],
        body: ByteBuffer
    ) async throws(APNsFailure) -> APNsDelivery {
        // The path names one device: not kept in the connection's HPACK table.
        let response = try await perform(method: "POST", path: path, headers: headers, body: body, indexesPath: false)
        return APNsDelivery(
            apnsID: response.headers.first(name: "apns-id"),
            uniqueID: response.headers.first(name: "apns-unique-id")
        )
    }

    /// One request with the connection's credentials; a 2xx answer is returned, any other thrown as APNs'
    /// reason with what to do next.
    func perform(
        method: String,
        path: String,
        headers: [(String, String)],
        body: ByteBuffer?,
        indexesPath: Bool = true
    ) async throws(APNsFailure) -> H2Response {
        var tokenRetried = false
        while true {
            let response: H2Response
            let pooled: HTTP2ConnectionPool<ProviderTokenSlot>.Pooled
            do {
                (response, pooled) = try await pool.execute { [configuration] pooled in
                    var h = headers
                    if case .token(let key) = configuration.authentication {
                        h.append(
                            (
                                "authorization",
                                "bearer " + (try pooled.extra.token(for: key, configuration: configuration))
                            )
                        )
                    }
                    return H2Request(method: method, path: path, headers: h, body: body, indexesPath: indexesPath)
                }
            } catch let error as TransportError {
                throw APNsFailure(transport: error, retry: error == .shutDown ? .never : .retry)
            } catch {
                throw APNsFailure(transport: .connectFailed("\(error)"), retry: .fixCredentials)
            }
            let apnsID = response.headers.first(name: "apns-id") ?? response.headers.first(name: "apns-request-id")
            if (200..<300).contains(response.status) { return response }
            let body = response.bodyBytes
            let json = (try? JSONValue.parse(body)) ?? .null
            let reason =
                json["reason"]?.stringValue.map(APNsReason.init(rawValue:)) ?? .unknown("HTTP \(response.status)")
            let timestamp = json["timestamp"]?.doubleValue.map { Date(timeIntervalSince1970: $0 / 1000) }
            let retryAfter = parseRetryAfter(response.headers.first(name: "retry-after"))
            // A token the server calls expired, or too many token changes on one connection: this connection
            // is spent (APNs keeps refusing on it); a fresh one with a fresh token gets one more try.
            if reason == .expiredProviderToken || reason == .tooManyProviderTokenUpdates
                || reason == .unrelatedKeyIdInToken
            {
                pooled.extra.invalidate()
                pool.retire(pooled)
                if !tokenRetried {
                    tokenRetried = true
                    continue
                }
            }
            throw APNsFailure(
                status: response.status,
                reason: reason,
                timestamp: timestamp,
                apnsID: apnsID,
                transport: nil,
                retry: reason.retryDecision(status: response.status, retryAfter: retryAfter)
            )
        }
    }

    /// Open connections and the stream limit each has from the server (for metrics and tests).
    public var connectionStates: [(id: Int, maxStreams: Int, inFlight: Int)] {
        pool.openConnections.map { ($0.id, $0.connection.remoteMaxStreams, $0.connection.inFlight) }
    }

    public func shutdown() async {
        await pool.shutdown()
        if ownsGroup { try? await group.shutdownGracefully() }
    }
}

/// One connection's provider token: minted when first needed, replaced after the refresh interval and never
/// sooner than 20 minutes after the last one on the same connection.
final class ProviderTokenSlot: Sendable {
    private let state = NIOLockedValueBox<(token: String, issued: Date)?>(nil)

    func token(for key: APNsSigningKey, configuration: APNsConfiguration) throws -> String {
        let now = configuration.now()
        return try state.withLockedValue { s in
            if let s, now.timeIntervalSince(s.issued) < configuration.tokenRefreshInterval { return s.token }
            if let old = s, now.timeIntervalSince(old.issued) < APNsConfiguration.minimumTokenAge { return old.token }
            let iat = Int(now.timeIntervalSince1970)
            let header = #"{"alg":"ES256","kid":"\#(key.keyID)"}"#
            let claims = #"{"iss":"\#(key.teamID)","iat":\#(iat)}"#
            let token = try JWT.es256(header: header, claims: claims, key: key.privateKey)
            s = (token, now)
            return token
        }
    }

    /// Forgets the token so that the next request mints one (after the connection is replaced).
    func invalidate() { state.withLockedValue { $0 = nil } }

    var issuedAt: Date? { state.withLockedValue { $0?.issued } }
}
