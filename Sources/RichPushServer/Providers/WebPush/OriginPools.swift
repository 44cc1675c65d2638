import Foundation
import NIOConcurrencyHelpers
import NIOCore
import RichPushTransport
import RichPushWebPush

/// Connections to push services, one pool per origin, at most `maxOrigins` of them. An origin's first connection
/// offers HTTP/2 and HTTP/1.1 by ALPN and the service's choice makes the pool: HTTP/2 (a few connections, each
/// multiplexed) or HTTP/1.1 (a bounded number of connections, one request each at a time). The choice is kept while
/// the pool is; a pool whose connects fail is dropped, and the next send chooses again.
final class OriginPools: Sendable {
    /// One origin's pool, of the protocol its service chose.
    enum Pool: Sendable {
        case http2(HTTP2ConnectionPool<Void>)
        case http1(HTTP1ConnectionPool)

        func shutdown() async {
            switch self {
            case .http2(let p): await p.shutdown()
            case .http1(let p): await p.shutdown()
            }
        }

        /// Starts closing the pool's connections without waiting for them.
        func close() {
            switch self {
            case .http2(let p): p.close()
            case .http1(let p): p.close()
            }
        }

        /// The protocol's name, as ALPN says it.
        var protocolName: String {
            switch self {
            case .http2: return "h2"
            case .http1: return "http/1.1"
            }
        }
    }

    struct Entry {
        var pool: Pool
        var lastUse: UInt64
    }

    struct SendFailure: Error {
        var decision: RetryDecision
        var reason: String
    }

    let configuration: WebPushProvider.Configuration
    let group: EventLoopGroup
    private let state = NIOLockedValueBox<(pools: [String: Entry], clock: UInt64)>(([:], 0))
    /// Origins being opened (their host resolved and checked, the first connection made): one at a time per origin,
    /// shared by every send waiting on it.
    private let opening = SingleFlight<String, Result<Pool, SendFailure>>()

    init(configuration: WebPushProvider.Configuration, group: EventLoopGroup) {
        self.configuration = configuration
        self.group = group
    }

    /// `scheme://host:port`, the host lowercased and the port always written.
    static func origin(scheme: String, host: String, port: Int?) -> String {
        "\(scheme)://\(host.lowercased()):\(port ?? (scheme == "http" ? 80 : 443))"
    }

    func post(_ request: WebPushRequest) async -> SendResult {
        let url = request.endpoint
        guard let host = url.host, let scheme = url.scheme?.lowercased() else {
            return .failed(.dropToken, reason: "webpush_bad_subscription")
        }
        let port = url.port ?? (scheme == "http" ? 80 : 443)
        let origin = Self.origin(scheme: scheme, host: host, port: port)
        let pool: Pool
        switch await self.pool(origin: origin, host: host, port: port) {
        case .success(let p): pool = p
        case .failure(let f): return .failed(f.decision, reason: f.reason)
        }
        let encodedPath = url.path(percentEncoded: true)
        let path = (encodedPath.isEmpty ? "/" : encodedPath) + (url.query(percentEncoded: true).map { "?" + $0 } ?? "")
        let body = ByteBuffer(bytes: request.body)
        let headers = request.headers.map { ($0.name, $0.value) }
        // The path names one subscription: not kept in the connection's HPACK table.
        let h2Request = H2Request(method: "POST", path: path, headers: headers, body: body, indexesPath: false)
        do {
            let response: H2Response
            switch pool {
            case .http2(let p): (response, _) = try await p.execute { _ in h2Request }
            case .http1(let p): response = try await p.execute(h2Request)
            }
            guard
                let decision = WebPushRequest.decision(
                    status: response.status,
                    retryAfter: response.headers.first(name: "retry-after")
                )
            else {
                return .delivered(providerID: response.headers.first(name: "location"))
            }
            return .failed(decision, reason: "webpush_\(response.status)")
        } catch let error as TransportError {
            if case .connectFailed = error { forget(origin) }
            return .failed(.retry, reason: "webpush_transport_" + error.label)
        } catch {
            return .failed(.retry, reason: "webpush_transport")
        }
    }

    /// The origin's pool, made after its host resolved to an address the policy allows and a first connection said
    /// which protocol the service speaks.
    func pool(origin: String, host: String, port: Int) async -> Result<Pool, SendFailure> {
        let found = state.withLockedValue { s -> Pool? in
            s.clock += 1
            guard var e = s.pools[origin] else { return nil }
            e.lastUse = s.clock
            s.pools[origin] = e
            return e.pool
        }
        if let found { return .success(found) }
        // Sends to an origin that has no pool yet wait for one opening, in the first one's task.
        switch await opening.run(origin, { await self.open(origin: origin, host: host, port: port) }) {
        case .led(let opened), .joined(let opened): return opened
        case .full: return .failure(SendFailure(decision: .retry, reason: "webpush_transport_opening_full"))
        }
    }

    /// Resolves and checks the host, connects offering both protocols, and keeps the pool of the one chosen (the
    /// least recently used origin closed when there are too many).
    private func open(origin: String, host: String, port: Int) async -> Result<Pool, SendFailure> {
        let address: SocketAddress
        switch await allowedAddress(host: host, port: port) {
        case .success(let a): address = a
        case .failure(let f): return .failure(f)
        }
        if let existing = state.withLockedValue({ $0.pools[origin]?.pool }) { return .success(existing) }
        let target = HTTP2ClientConnection.Target(host: host, port: port, trust: configuration.trust, address: address)
        let first: NegotiatedConnection
        do {
            first = try await NegotiatedConnection.connect(
                to: target,
                group: group,
                timeout: configuration.connectTimeout
            )
        } catch {
            configuration.logger.info(
                "could not connect to a push service",
                metadata: ["origin": .string(origin), "error": .string("\(error)")]
            )
            let label = (error as? TransportError)?.label ?? ConnectStage.tcp.label
            return .failure(SendFailure(decision: .retry, reason: "webpush_transport_" + label))
        }
        let made: Pool
        switch first {
        case .http2(let connection):
            let p = HTTP2ConnectionPool<Void>(
                configuration: .init(
                    target: target,
                    connections: configuration.connectionsPerOrigin,
                    connectTimeout: configuration.connectTimeout,
                    requestTimeout: configuration.requestTimeout,
                    logger: configuration.logger
                ),
                group: group,
                makeExtra: {}
            )
            if !p.adopt(connection) { connection.close() }
            made = .http2(p)
        case .http1(let connection):
            let p = HTTP1ConnectionPool(
                configuration: .init(
                    target: target,
                    connections: configuration.http1ConnectionsPerOrigin,
                    connectTimeout: configuration.connectTimeout,
                    requestTimeout: configuration.requestTimeout,
                    logger: configuration.logger
                ),
                group: group
            )
            p.adopt(connection)
            made = .http1(p)
        }
        var evicted: Pool?
        var loser: Pool?
        let pool = state.withLockedValue { s -> Pool in
            s.clock += 1
            if let e = s.pools[origin] {
                loser = made
                return e.pool
            }
            if s.pools.count >= configuration.maxOrigins,
                let oldest = s.pools.min(by: { $0.value.lastUse < $1.value.lastUse })
            {
                evicted = oldest.value.pool
                s.pools[oldest.key] = nil
            }
            s.pools[origin] = Entry(pool: made, lastUse: s.clock)
            return made
        }
        if let evicted { await evicted.shutdown() }
        if let loser { await loser.shutdown() }
        return .success(pool)
    }

    /// The first address of the host that the policy allows.
    func allowedAddress(host: String, port: Int) async -> Result<SocketAddress, SendFailure> {
        if case .refused(let why) = configuration.policy.check(hostName: host) {
            return .failure(SendFailure(decision: .dropToken, reason: "webpush_address_refused_\(why)"))
        }
        let addresses: [IPAddress]
        if let literal = IPAddress(host: host) {
            addresses = [literal]
        } else {
            do { addresses = try await configuration.resolver.resolve(host, port: port) } catch {
                return .failure(SendFailure(decision: .retry, reason: "webpush_dns"))
            }
        }
        var refusal = "none"
        for a in addresses {
            switch configuration.policy.check(a, port: port) {
            case .allowed:
                if let s = try? SocketAddress(ipAddress: a.description, port: port) { return .success(s) }
            case .refused(let why): refusal = why
            }
        }
        return .failure(SendFailure(decision: .dropToken, reason: "webpush_address_refused_\(refusal)"))
    }

    /// Drops an origin's pool (its connects failed): the next send resolves and chooses its protocol again.
    func forget(_ origin: String) {
        let gone = state.withLockedValue { $0.pools.removeValue(forKey: origin) }
        // Its connections close on their own event loops; nothing needs to wait for that.
        gone?.pool.close()
    }

    var count: Int { state.withLockedValue { $0.pools.count } }

    /// The protocol an origin's pool speaks (nil: no pool).
    func protocolName(of origin: String) -> String? {
        state.withLockedValue { $0.pools[origin]?.pool.protocolName }
    }

    func shutdown() async {
        let all = state.withLockedValue { s -> [Pool] in
            defer { s.pools.removeAll() }
            return s.pools.values.map(\.pool)
        }
        for p in all { await p.shutdown() }
    }
}
