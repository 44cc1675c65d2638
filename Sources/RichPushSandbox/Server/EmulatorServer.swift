import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOHTTP2
import NIOPosix
import NIOSSL
import NIOTLS

/// A TLS listener on loopback that speaks HTTP/2 (negotiated with ALPN `h2`, or by prior knowledge when the
/// client offers no ALPN) and, when allowed, HTTP/1.1, handing every request to an emulator's logic. With
/// `http1Only` it offers only `http/1.1` and speaks nothing else. While ``silent`` is set it completes the TLS
/// handshake of each new connection and then reads and drops whatever comes, answering nothing: a service that
/// accepts connections and never answers.
public final class EmulatorServer<Logic: EmulatorLogic>: Sendable {
    let logic: Logic
    let tls: TLSConfiguration
    let allowHTTP1: Bool
    let http1Only: Bool
    /// New connections get no answer at all (see the type's note).
    let silent = NIOLockedValueBox(false)
    let group: EventLoopGroup
    /// True when the server made its own event-loop group (and so shuts it down).
    private let ownsGroup: Bool
    private let channel: NIOLockedBox<Channel?> = NIOLockedBox(nil)
    let logger: Logger

    /// With no group given, the server runs its own one-thread group.
    init(
        logic: Logic,
        certificatePEM: String,
        keyPEM: String,
        clientCertificateAuthorityPEM: String? = nil,
        allowHTTP1: Bool,
        http1Only: Bool = false,
        group: EventLoopGroup?,
        logger: Logger
    ) throws {
        var tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMBytes(Array(certificatePEM.utf8)).map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(bytes: Array(keyPEM.utf8), format: .pem))
        )
        tls.applicationProtocols = http1Only ? ["http/1.1"] : allowHTTP1 ? ["h2", "http/1.1"] : ["h2"]
        self.http1Only = http1Only
        if let ca = clientCertificateAuthorityPEM {
            tls.certificateVerification = .noHostnameVerification
            tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMBytes(Array(ca.utf8)))
        }
        self.tls = tls
        self.logic = logic
        self.allowHTTP1 = allowHTTP1
        self.logger = logger
        ownsGroup = group == nil
        self.group = group ?? MultiThreadedEventLoopGroup(numberOfThreads: 1)
    }

    func start(host: String = "127.0.0.1", port: Int) async throws -> Int {
        let context = try NIOSSLContext(configuration: tls)
        let logic = self.logic
        let allowHTTP1 = self.allowHTTP1
        let http1Only = self.http1Only
        let silent = self.silent
        let logger = self.logger
        let ch = try await ServerBootstrap(group: group)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .serverChannelOption(ChannelOptions.backlog, value: 1024)
            .childChannelOption(ChannelOptions.tcpOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                let ssl = NIOSSLServerHandler(context: context)
                return channel.pipeline.addHandler(ssl).flatMap {
                    channel.pipeline.addHandler(
                        ProtocolSwitch(
                            logic: logic,
                            allowHTTP1: allowHTTP1,
                            http1Only: http1Only,
                            silent: silent,
                            logger: logger
                        )
                    )
                }
            }
            .bind(host: host, port: port).get()
        channel.value = ch
        logger.debug("listening", metadata: ["port": "\(ch.localAddress?.port ?? 0)"])
        return ch.localAddress?.port ?? 0
    }

    /// The port listened on, 0 before ``start(host:port:)``.
    var port: Int { channel.value?.localAddress?.port ?? 0 }

    func stop() async {
        try? await channel.value?.close().get()
        if ownsGroup { try? await group.shutdownGracefully() }
    }
}

/// After the TLS handshake: HTTP/2 for `h2` or no ALPN at all, HTTP/1.1 for `http/1.1` when allowed (and for
/// anything when HTTP/1.1 is all it speaks); nothing at all while the server is silent.
final class ProtocolSwitch<Logic: EmulatorLogic>: ChannelInboundHandler, RemovableChannelHandler, @unchecked Sendable {
    // @unchecked: lives on its channel's event loop.
    typealias InboundIn = NIOAny

    let logic: Logic
    let allowHTTP1: Bool
    let http1Only: Bool
    let silent: NIOLockedValueBox<Bool>
    var buffered: [NIOAny] = []
    var configured = false
    /// Silent: what comes is dropped, and nothing is ever written.
    var dropping = false
    let logger: Logger

    init(logic: Logic, allowHTTP1: Bool, http1Only: Bool, silent: NIOLockedValueBox<Bool>, logger: Logger) {
        self.logic = logic
        self.allowHTTP1 = allowHTTP1
        self.http1Only = http1Only
        self.silent = silent
        self.logger = logger
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case let TLSUserEvent.handshakeCompleted(negotiatedProtocol) = event {
            if silent.withLockedValue({ $0 }) {
                dropping = true
                buffered.removeAll()
            } else {
                configure(context: context, protocol: negotiatedProtocol)
            }
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if dropping { return }
        if configured { context.fireChannelRead(data) } else { buffered.append(data) }
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        // A client that fails the handshake or breaks the protocol is part of what the emulators are for (the
        // hostile tests do it on purpose): told at debug, and the connection closed.
        logger.debug("connection closed on an error", metadata: ["error": "\(error)"])
        context.close(promise: nil)
    }

    private func configure(context: ChannelHandlerContext, protocol negotiated: String?) {
        let channel = context.channel
        let hasCertificate =
            (try? channel.pipeline.syncOperations.handler(type: NIOSSLServerHandler.self).peerCertificate) != nil
        let connection = logic.makeConnection(hasClientCertificate: hasCertificate)
        do {
            if http1Only || (negotiated == "http/1.1" && allowHTTP1) {
                try channel.pipeline.syncOperations.configureHTTPServerPipeline(position: .after(self))
                try channel.pipeline.syncOperations.addHandler(
                    HTTP1EmulatorHandler(logic: logic, connection: connection)
                )
            } else {
                let logic = self.logic
                var connectionConfiguration = NIOHTTP2Handler.ConnectionConfiguration()
                connectionConfiguration.initialSettings = [
                    HTTP2Setting(parameter: .maxConcurrentStreams, value: logic.initialMaxConcurrentStreams),
                    HTTP2Setting(parameter: .maxHeaderListSize, value: 8000),
                ]
                connectionConfiguration.maximumBufferedControlFrames = 100_000
                // Streams run on the connection's event loop, the only place the connection state is touched.
                let bound = NIOLoopBound(connection, eventLoop: channel.eventLoop)
                let drain = NIOLoopBound(EmulatorDrain(), eventLoop: channel.eventLoop)
                _ = try channel.pipeline.syncOperations.configureHTTP2Pipeline(
                    mode: .server,
                    connectionConfiguration: connectionConfiguration,
                    streamConfiguration: .init(),
                    position: .after(self)
                ) { stream in
                    stream.eventLoop.makeCompletedFuture {
                        try stream.pipeline.syncOperations.addHandler(
                            HTTP2EmulatorStreamHandler(
                                logic: logic,
                                connection: bound.value,
                                drain: drain.value,
                                parent: channel
                            )
                        )
                    }
                }
            }
        } catch {
            logger.error("could not set up the connection's protocol", metadata: ["error": "\(error)"])
            context.close(promise: nil)
            return
        }
        configured = true
        for data in buffered { context.fireChannelRead(data) }
        buffered.removeAll()
        context.pipeline.syncOperations.removeHandler(self, promise: nil)
    }
}

/// A lock-protected box for a value set once at start and read at stop.
final class NIOLockedBox<T>: @unchecked Sendable {
    // @unchecked: every access goes through `lock`.
    private let lock = NSLock()
    private var _value: T
    init(_ v: T) { _value = v }
    var value: T {
        get { lock.withLock { _value } }
        set { lock.withLock { _value = newValue } }
    }
}
