import Foundation
import NIOConcurrencyHelpers
import NIOCore
import RichPushTransport

/// POSTs webhook requests: HTTPS only, to an address the policy allows (the host is resolved and each address
/// checked before connecting; a literal address is checked as it is), no redirect followed (a 3xx is a failure,
/// as the Standard Webhooks specification advises), every answer bounded in size and time. One connection per
/// endpoint is kept between requests, at most ``Configuration/maxConnections`` of them (the least recently used
/// closes first).
final class WebhookClient: Sendable {
    struct Configuration: Sendable {
        var policy: AddressPolicy
        var resolver: any HostResolver
        var trust: TLSTrust
        var connectTimeout: TimeAmount = .seconds(5)
        /// The specification recommends 15 to 30 seconds for a receiver to answer.
        var requestTimeout: TimeAmount = .seconds(15)
        var maxConnections = 256
    }

    /// How a request ended.
    enum Answer: Sendable, Equatable {
        case status(Int, retryAfter: TimeInterval?)
        /// Not sent or not answered: the reason, for the endpoint's `last_error`.
        case failed(String)
    }

    let configuration: Configuration
    let group: EventLoopGroup
    private let connections = NIOLockedValueBox<
        [String: (origin: String, connection: HTTP1ClientConnection, used: UInt64)]
    >(
        [:]
    )
    private let clock = NIOLockedValueBox<UInt64>(0)

    init(configuration: Configuration, group: EventLoopGroup) {
        self.configuration = configuration
        self.group = group
    }

    /// Sends `body` to the endpoint's URL with `headers`.
    func post(endpoint: String, url: String, headers: [(String, String)], body: [UInt8]) async -> Answer {
        guard let u = URL(string: url), u.scheme?.lowercased() == "https", let host = u.host, !host.isEmpty else {
            return .failed("the URL is not https")
        }
        let port = u.port ?? 443
        let origin = "\(host.lowercased()):\(port)"
        let connection: HTTP1ClientConnection
        switch await self.connection(endpoint: endpoint, origin: origin, host: host, port: port) {
        case .success(let c): connection = c
        case .failure(let f): return .failed(f.reason)
        }
        let encodedPath = u.path(percentEncoded: true)
        let path = (encodedPath.isEmpty ? "/" : encodedPath) + (u.query(percentEncoded: true).map { "?" + $0 } ?? "")
        let request = H2Request(method: "POST", path: path, headers: headers, body: ByteBuffer(bytes: body))
        do {
            // A 2xx is the receiver's acknowledgement whatever its body says: a long body is cut, not a failure.
            let response = try await connection.send(
                request,
                timeout: configuration.requestTimeout,
                longBody: .truncate
            )
            // Read as the provider clients read it: seconds or an HTTP date, at most a day (a number too large for
            // any integer is a day, not none).
            return .status(response.status, retryAfter: parseRetryAfter(response.headers.first(name: "retry-after")))
        } catch {
            forget(endpoint)
            return .failed(Self.describe(error, timeout: configuration.requestTimeout))
        }
    }

    /// A failure in stable words (the error's own text can carry a library's file path).
    static func describe(_ error: any Error, timeout: TimeAmount) -> String {
        switch error {
        case TransportError.timedOut: return "no answer within \(timeout.nanoseconds / 1_000_000_000) s"
        case TransportError.responseTooLarge: return "the answer was too large"
        case TransportError.malformedResponse: return "the answer was not HTTP/1.1"
        case TransportError.connectionClosed, TransportError.notSent: return "the connection closed before an answer"
        default: return "the connection failed"
        }
    }

    struct Refused: Error { var reason: String }

    private func connection(
        endpoint: String,
        origin: String,
        host: String,
        port: Int
    ) async
        -> Result<HTTP1ClientConnection, Refused>
    {
        let tick = clock.withLockedValue { c -> UInt64 in
            c += 1
            return c
        }
        let kept = connections.withLockedValue { all -> HTTP1ClientConnection? in
            guard let entry = all[endpoint], entry.origin == origin, entry.connection.isUsable else { return nil }
            all[endpoint]?.used = tick
            return entry.connection
        }
        if let kept { return .success(kept) }
        forget(endpoint)
        let address: SocketAddress
        switch await allowedAddress(host: host, port: port) {
        case .success(let a): address = a
        case .failure(let f): return .failure(f)
        }
        let target = HTTP2ClientConnection.Target(host: host, port: port, trust: configuration.trust, address: address)
        do {
            let made = try await NegotiatedConnection.connect(
                to: target,
                group: group,
                protocols: ["http/1.1"],
                timeout: configuration.connectTimeout
            )
            guard case .http1(let c) = made else {
                if case .http2(let h2) = made { h2.close() }
                return .failure(Refused(reason: "the receiver chose HTTP/2 though only HTTP/1.1 was offered"))
            }
            var evicted: HTTP1ClientConnection?
            connections.withLockedValue { all in
                if all.count >= configuration.maxConnections,
                    let oldest = all.min(by: { $0.value.used < $1.value.used })
                {
                    evicted = oldest.value.connection
                    all[oldest.key] = nil
                }
                all[endpoint] = (origin, c, tick)
            }
            evicted?.close()
            return .success(c)
        } catch {
            let text = String(describing: error)
            let tls = text.contains("CERTIFICATE") || text.contains("SSL")
            return .failure(
                Refused(reason: tls ? "TLS with \(origin) failed (its certificate)" : "could not connect to \(origin)")
            )
        }
    }

    /// The first address of the host that the policy allows.
    private func allowedAddress(host: String, port: Int) async -> Result<SocketAddress, Refused> {
        if case .refused(let why) = configuration.policy.check(hostName: host) {
            return .failure(Refused(reason: "the address policy refuses \(host): \(why)"))
        }
        let addresses: [IPAddress]
        if let literal = IPAddress(host: host) {
            addresses = [literal]
        } else {
            do { addresses = try await configuration.resolver.resolve(host, port: port) } catch {
                return .failure(Refused(reason: "\(host) did not resolve"))
            }
        }
        var refusal = "no address"
        for a in addresses {
            switch configuration.policy.check(a, port: port) {
            case .allowed:
                if let s = try? SocketAddress(ipAddress: a.description, port: port) { return .success(s) }
            case .refused(let why): refusal = why
            }
        }
        return .failure(Refused(reason: "the address policy refuses \(host): \(refusal)"))
    }

    /// Closes the endpoint's connection (it failed, or the endpoint's turn ended badly).
    func forget(_ endpoint: String) {
        let gone = connections.withLockedValue { $0.removeValue(forKey: endpoint) }
        gone?.connection.close()
    }

    func shutdown() {
        let all = connections.withLockedValue { c -> [HTTP1ClientConnection] in
            defer { c.removeAll() }
            return c.values.map(\.connection)
        }
        for c in all { c.close() }
    }
}
