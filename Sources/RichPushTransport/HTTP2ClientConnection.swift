import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL

/// One long-lived HTTP/2 connection, as APNs and FCM want them: it follows the server's live stream limit,
/// notices GOAWAY and tells which in-flight requests were not processed, answers health-check pings, and
/// bounds every request by a timeout.
public final class HTTP2ClientConnection: Sendable {
    /// The largest response body read: APNs and FCM answer in a few hundred bytes, an OAuth token in about two
    /// kilobytes. A longer one is a broken or hostile peer, and reading it would let a peer choose our memory.
    public static let maxResponseBytes = 64 * 1024

    public struct Target: Sendable {
        public var host: String
        public var port: Int
        public var trust: TLSTrust
        public var identity: ClientIdentity?
        /// Where to connect when not to `host` itself: an address resolved and checked beforehand (a server named by
        /// a user is connected to only at an address the caller's policy allows). TLS still names and checks `host`.
        public var address: SocketAddress?

        public init(
            host: String,
            port: Int,
            trust: TLSTrust = .system,
            identity: ClientIdentity? = nil,
            address: SocketAddress? = nil
        ) {
            self.host = host
            self.port = port
            self.trust = trust
            self.identity = identity
            self.address = address
        }

        /// `host`, or `host:port` unless the port is 443: what `:authority` and `Host` say.
        public var authority: String { port == 443 ? host : "\(host):\(port)" }

        /// The TLS context for this server, offering these ALPN protocols.
        func tlsContext(alpn: [String]) throws -> NIOSSLContext {
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.applicationProtocols = alpn
            try trust.apply(to: &tls)
            if let id = identity {
                tls.certificateChain = try NIOSSLCertificate.fromPEMBytes(Array(id.certificateChainPEM.utf8)).map {
                    .certificate($0)
                }
                tls.privateKey = .privateKey(try NIOSSLPrivateKey(bytes: Array(id.privateKeyPEM.utf8), format: .pem))
            }
            return try NIOSSLContext(configuration: tls)
        }

        /// The TLS handler, naming the host (SNI) unless it is an address.
        func tlsHandler(_ context: NIOSSLContext) throws -> NIOSSLClientHandler {
            let isIP = host.allSatisfy { $0.isNumber || $0 == "." } || host.contains(":")
            return try NIOSSLClientHandler(context: context, serverHostname: isIP ? nil : host)
        }

        /// A TCP connection to the checked address (or the host), set up by `channelInitializer`.
        func connect<Output: Sendable>(
            group: EventLoopGroup,
            timeout: TimeAmount,
            channelInitializer: @escaping @Sendable (Channel) -> EventLoopFuture<Output>
        ) async throws -> Output {
            let bootstrap = ClientBootstrap(group: group)
                .connectTimeout(timeout)
                .channelOption(ChannelOptions.tcpOption(.tcp_nodelay), value: 1)
            if let address {
                return try await bootstrap.connect(to: address, channelInitializer: channelInitializer)
            }
            return try await bootstrap.connect(host: host, port: port, channelInitializer: channelInitializer)
        }
    }

    let channel: Channel
    /// Used on the channel's event loop only.
    let streams: HTTP2StreamTable
    let state: NIOLockedValueBox<HTTP2ConnectionState>
    let authority: String
    /// Set once the server's first SETTINGS frame has arrived.
    let ready: EventLoopFuture<Void>

    init(
        channel: Channel,
        streams: HTTP2StreamTable,
        state: NIOLockedValueBox<HTTP2ConnectionState>,
        authority: String,
        ready: EventLoopFuture<Void>
    ) {
        self.channel = channel
        self.streams = streams
        self.state = state
        self.authority = authority
        self.ready = ready
    }

    /// Connects, negotiates `h2` and waits for the server's SETTINGS.
    public static func connect(
        to target: Target,
        group: EventLoopGroup,
        timeout: TimeAmount = .seconds(10)
    ) async throws -> HTTP2ClientConnection {
        let context = try target.tlsContext(alpn: ["h2"])
        let state = NIOLockedValueBox(HTTP2ConnectionState())
        do {
            let initialize:
                @Sendable (Channel) -> EventLoopFuture<
                    (Channel, HTTP2StreamTable, EventLoopFuture<Void>)
                > = { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(target.tlsHandler(context))
                        let (streams, ready) = try installHTTP2(on: channel, state: state)
                        return (channel, streams, ready)
                    }
                }
            let (channel, streams, ready) = try await target.connect(
                group: group,
                timeout: timeout,
                channelInitializer: initialize
            )
            return try await started(
                channel: channel,
                streams: streams,
                state: state,
                ready: ready,
                target: target,
                timeout: timeout
            )
        } catch {
            throw TransportError.connectFailure(error, context: "\(target.host):\(target.port)")
        }
    }

    /// The HTTP/2 handler's settings. A request that times out resets its stream, and its answer may still come:
    /// RFC 9113 (section 5.1, "closed") has the client ignore frames on a stream it reset. The handler ignores them on
    /// its most recent resets only (32 by default) and takes a frame on an older one as an error of the whole
    /// connection, which it closes, failing every other request in flight (each then sent again). A burst of
    /// timeouts, a service answering at the deadline, reset more streams than that. The list now covers every stream
    /// a connection can have in flight at once (APNs allows 1,000).
    static var clientConfiguration: NIOHTTP2Handler.ConnectionConfiguration {
        var c = NIOHTTP2Handler.ConnectionConfiguration()
        c.maximumRecentlyResetStreams = 1_024
        return c
    }

    /// The HTTP/2 client handlers, after TLS: called on the channel's event loop. Returns the table of streams and
    /// the future of the server's first SETTINGS.
    static func installHTTP2(
        on channel: Channel,
        state: NIOLockedValueBox<HTTP2ConnectionState>
    ) throws -> (HTTP2StreamTable, EventLoopFuture<Void>) {
        let readyPromise = channel.eventLoop.makePromise(of: Void.self)
        let streams = HTTP2StreamTable(connectionState: state)
        try channel.pipeline.syncOperations.addHandlers([
            FlushCoalescer(),
            NIOHTTP2Handler(mode: .client, connectionConfiguration: clientConfiguration, streamConfiguration: .init()),
            streams,
            ConnectionObserver(state: state, ready: readyPromise),
        ])
        return (streams, readyPromise.futureResult)
    }

    /// The connection once its server's SETTINGS came (the channel closed if they do not come within `timeout`).
    static func started(
        channel: Channel,
        streams: HTTP2StreamTable,
        state: NIOLockedValueBox<HTTP2ConnectionState>,
        ready: EventLoopFuture<Void>,
        target: Target,
        timeout: TimeAmount
    ) async throws -> HTTP2ClientConnection {
        let connection = HTTP2ClientConnection(
            channel: channel,
            streams: streams,
            state: state,
            authority: target.authority,
            ready: ready
        )
        // A channel already closed (its event loops shut down while it connected: a provider closed under a send
        // still connecting) gets no timer: one scheduled on a loop that is shut down never runs, and its promise
        // was left unfulfilled (a debug build traps on that; the test run caught it).
        guard channel.isActive else {
            // Its failure came first (a certificate refused, the server closing at once, a loop shut down under it):
            // said as the error that ended it when there was one.
            throw state.withLockedValue { $0.startError }
                ?? TransportError.connectFailed(
                    "\(target.host):\(target.port): closed before its TLS and HTTP/2 handshakes had ended",
                    stage: .closedInHandshake
                )
        }
        let expired = NIOLockedValueBox(false)
        let deadline = channel.eventLoop.scheduleTask(in: timeout) {
            expired.withLockedValue { $0 = true }
            channel.close(promise: nil)
        }
        defer { deadline.cancel() }
        do {
            try await ready.get()
        } catch TransportError.connectionClosed where expired.withLockedValue({ $0 }) {
            // Closed by the deadline above, not by the server: say so (a loaded server that has not finished the
            // TLS and HTTP/2 handshakes in time read as "connection closed with the request in flight").
            throw TransportError.connectFailed(
                "\(target.host):\(target.port): the TCP connection was made but its TLS and HTTP/2 handshakes had not "
                    + "ended within \(Double(timeout.nanoseconds) / 1e9) s",
                stage: .handshakeTimedOut
            )
        } catch TransportError.connectionClosed {
            // The server closed it before its first SETTINGS: not a request's connection closing in flight.
            throw TransportError.connectFailed(
                "\(target.host):\(target.port): the server closed the connection before its HTTP/2 SETTINGS",
                stage: .closedInHandshake
            )
        }
        return connection
    }

    /// True while new requests may be sent.
    public var isUsable: Bool { state.withLockedValue { $0.isUsable } }

    /// True once the channel has closed (either side).
    public var isClosed: Bool { state.withLockedValue { $0.lifecycle == .closed } }

    /// Streams that may still be opened before the server's limit.
    public var availableStreams: Int { state.withLockedValue { max(0, $0.remoteMaxStreams - $0.inFlight) } }

    public var inFlight: Int { state.withLockedValue { $0.inFlight } }

    /// The server's reason in its GOAWAY, once one came ("" when it gave none).
    public var goAwayReason: String? { state.withLockedValue { $0.goAway.map { $0.reason ?? "" } } }

    /// Why the client stopped sending on the connection, if it did (its budget of stream resets spent).
    public var retiredBecause: String? { state.withLockedValue { $0.retiredBecause } }

    /// Requests in flight and the server's stream limit, read together.
    public struct Load: Sendable {
        public var inFlight: Int
        public var remoteMaxStreams: Int
        /// No request has ended on it yet: a server that starts with a low stream limit (APNs allows one stream
        /// until it has verified a provider token) has not had the chance to raise it.
        public var isFresh: Bool
        /// Streams that may be opened before `cap` or the server's limit, whichever is lower.
        public func room(cap: Int) -> Int { min(cap, remoteMaxStreams) - inFlight }
    }

    /// Takes one stream for a request about to be sent, if fewer than `cap` (and the server's limit) are in flight;
    /// with `cap` nil, always (the request then waits in the HTTP/2 layer for a stream). The next ``send(_:timeout:)``
    /// uses it; ``releaseReservation()`` gives it back unsent. Callers choosing among connections at once then never
    /// all choose the same free stream.
    public func reserveStream(cap: Int?) -> Bool {
        state.withLockedValue { $0.reserve(cap: cap) }
    }

    public func releaseReservation() {
        state.withLockedValue { $0.releaseReservation() }
    }

    public var load: Load {
        state.withLockedValue {
            Load(inFlight: $0.inFlight, remoteMaxStreams: $0.remoteMaxStreams, isFresh: $0.completed == 0)
        }
    }

    /// Whether any request on it was answered (with a final status, whatever it was).
    public var hasAnswered: Bool { state.withLockedValue { $0.answered > 0 } }

    /// The server's current MAX_CONCURRENT_STREAMS.
    public var remoteMaxStreams: Int { state.withLockedValue { $0.remoteMaxStreams } }

    public var idleTime: TimeAmount { state.withLockedValue { NIODeadline.now() - $0.lastActivity } }

    /// Sends one request and waits for its whole response.
    public func send(_ request: H2Request, timeout: TimeAmount) -> EventLoopFuture<H2Response> {
        let loop = channel.eventLoop
        let promise = loop.makePromise(of: H2Response.self)
        // A reservation already counts in flight; it is either sent now or given back.
        switch state.withLockedValue({ $0.admit() }).orAssert() {
        case .send: break
        case .goingAway(let reason):
            promise.fail(TransportError.goingAway(reason: reason, processed: false))
            return promise.futureResult
        case .closed, nil:
            // Nothing was written: the request is not sent, and may go on another connection (it failed as closed
            // "with the request in flight", which is not sent again, when the connection closed between the pool's
            // choice and the send).
            promise.fail(TransportError.notSent)
            return promise.futureResult
        }
        let requestHeaders = Self.headers(of: request, authority: authority)
        let body = request.body
        let streams = self.streams
        // The timeout runs from that turn of the loop: a request the connection cannot take (it closed meanwhile)
        // ends at once. The stream's place among those in flight is given back when it leaves the table.
        loop.execute { streams.open(headers: requestHeaders, body: body, timeout: timeout, promise: promise) }
        return promise.futureResult
    }

    /// The request's HEADERS: the pseudo-headers, then its own.
    static func headers(of request: H2Request, authority: String) -> HPACKHeaders {
        var headers = HPACKHeaders()
        headers.reserveCapacity(request.headers.count + 4)
        headers.add(name: ":method", value: request.method)
        headers.add(name: ":scheme", value: "https")
        headers.add(name: ":path", value: request.path, indexing: request.indexesPath ? .indexable : .nonIndexable)
        headers.add(name: ":authority", value: authority)
        for (n, v) in request.headers { headers.add(name: n, value: v) }
        return headers
    }

    public func send(_ request: H2Request, timeout: TimeAmount) async throws -> H2Response {
        try await send(request, timeout: timeout).get()
    }

    /// Sends a PING and waits for its acknowledgement: a health check for an idle connection.
    public func ping(timeout: TimeAmount = .seconds(5)) -> EventLoopFuture<Void> {
        let loop = channel.eventLoop
        let channel = self.channel
        return loop.flatSubmit {
            guard let observer = try? channel.pipeline.syncOperations.handler(type: ConnectionObserver.self) else {
                return loop.makeFailedFuture(TransportError.connectionClosed)
            }
            let promise = loop.makePromise(of: Void.self)
            observer.pendingPings.append(promise)
            let timer = loop.scheduleTask(in: timeout) { promise.fail(TransportError.timedOut) }
            promise.futureResult.whenComplete { _ in timer.cancel() }
            channel.writeAndFlush(
                HTTP2Frame(streamID: .rootStream, payload: .ping(HTTP2PingData(withInteger: 0x5250), ack: false)),
                promise: nil
            )
            return promise.futureResult
        }
    }

    /// Closes the connection; requests in flight fail with ``TransportError/connectionClosed``.
    public func close() {
        _ = state.withLockedValue { $0.closed() }
        channel.close(promise: nil)
    }

    public var closeFuture: EventLoopFuture<Void> { channel.closeFuture }
}

/// Watches the connection-level frames: SETTINGS (the live stream limit), GOAWAY, PING acknowledgements.
final class ConnectionObserver: ChannelInboundHandler, @unchecked Sendable {
    // @unchecked: lives on its channel's event loop; shared state goes through the locked box.
    typealias InboundIn = HTTP2Frame

    let state: NIOLockedValueBox<HTTP2ConnectionState>
    let ready: EventLoopPromise<Void>
    var pendingPings: [EventLoopPromise<Void>] = []

    init(state: NIOLockedValueBox<HTTP2ConnectionState>, ready: EventLoopPromise<Void>) {
        self.state = state
        self.ready = ready
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.payload {
        case .settings(.settings(let settings)):
            let limit = settings.last { $0.parameter == .maxConcurrentStreams }?.value
            if state.withLockedValue({ $0.settingsReceived(maxConcurrentStreams: limit) }).orAssert() == .succeedReady {
                ready.succeed(())
            }
        case .goAway(let last, _, let opaque):
            var reason: String?
            if var data = opaque, let bytes = data.readBytes(length: data.readableBytes),
                let json = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any]
            {
                reason = json["reason"] as? String
            }
            state.withLockedValue { $0.goAwayReceived(lastStreamID: Int(last), reason: reason) }
        case .ping(_, ack: true):
            if !pendingPings.isEmpty { pendingPings.removeFirst().succeed(()) }
        default:
            break
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        if state.withLockedValue({ $0.closed() }) == .failReady { ready.fail(TransportError.connectionClosed) }
        for p in pendingPings { p.fail(TransportError.connectionClosed) }
        pendingPings.removeAll()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        // A request's HEADERS that the HTTP/2 handler held back (the server's stream limit) and let go after the
        // server's GOAWAY fail their own write only: that request was not sent, and goes on another connection. The
        // connection still carries the answers the server said it would give, so it is not closed for it (it was,
        // and the request the server was still answering failed as processed).
        if error is NIOHTTP2Errors.CreatedStreamAfterGoaway { return }
        let failure = TransportError.connectFailure(error, connected: true)
        if state.withLockedValue({ s in
            guard s.lifecycle == .starting else { return false }
            s.startError = s.startError ?? failure
            return true
        }) {
            ready.fail(failure)
        }
        context.close(promise: nil)
    }

    /// A channel that never became active (its connect was refused or timed out) closes without `channelInactive`:
    /// the handler leaves the pipeline then, and whatever waits on it is told.
    func handlerRemoved(context: ChannelHandlerContext) {
        // Only a connection still starting: after `channelInactive`, the state is the connection's to keep.
        if state.withLockedValue({ $0.lifecycle == .starting ? $0.closed() : .none }) == .failReady {
            ready.fail(TransportError.connectionClosed)
        }
        for p in pendingPings { p.fail(TransportError.connectionClosed) }
        pendingPings.removeAll()
    }
}

/// Turns the flushes asked for during one turn of the event loop into one: every request's stream flushes on its
/// own, and each flush would otherwise be its own TLS record and system call. The flush is passed on at the end of
/// the tasks already queued on the loop, so requests sent together leave together; nothing waits longer than that.
public final class FlushCoalescer: ChannelOutboundHandler, RemovableChannelHandler, @unchecked Sendable {
    // @unchecked: lives on its channel's event loop.
    public typealias OutboundIn = NIOAny
    public typealias OutboundOut = NIOAny

    private var pending = false

    public init() {}

    public func flush(context: ChannelHandlerContext) {
        guard !pending else { return }
        pending = true
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        context.eventLoop.execute {
            let (handler, context) = bound.value
            handler.pending = false
            context.flush()
        }
    }
}
