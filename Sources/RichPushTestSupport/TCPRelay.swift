import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// A TCP relay on a loopback port to another port, that a test can cut: every connection through it is closed and
/// new ones are refused until it is restored. Put between one node and its database, it takes that node off the
/// network while the others keep theirs.
public final class TCPRelay: Sendable {
    public let port: Int
    let target: Int
    let server: Channel
    private let state = NIOLockedValueBox((cut: false, open: [Channel](), attempts: [ContinuousClock.Instant]()))

    /// When each connection to the relay came, refused ones included (how often a client tries while it is cut).
    public var attempts: [ContinuousClock.Instant] { state.withLockedValue { $0.attempts } }

    public static func start(to targetPort: Int) async throws -> TCPRelay {
        let box = NIOLockedValueBox<TCPRelay?>(nil)
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { inbound in
                guard let relay = box.withLockedValue({ $0 }) else { return inbound.close() }
                return relay.accept(inbound)
            }
            .bind(host: "127.0.0.1", port: 0).get()
        let relay = TCPRelay(port: server.localAddress?.port ?? 0, target: targetPort, server: server)
        box.withLockedValue { $0 = relay }
        return relay
    }

    init(port: Int, target: Int, server: Channel) {
        self.port = port
        self.target = target
        self.server = server
    }

    func accept(_ inbound: Channel) -> EventLoopFuture<Void> {
        let cut = state.withLockedValue { s -> Bool in
            s.attempts.append(.now)
            return s.cut
        }
        if cut { return inbound.close() }
        _ = inbound.setOption(.autoRead, value: false)
        return ClientBootstrap(group: inbound.eventLoop)
            .connect(host: "127.0.0.1", port: target)
            .flatMap { outbound in
                // A cut while this connection was being made closes it too: checked with the list under one lock,
                // or a connection accepted just before a cut outlived it (a pool filling up as the test cut).
                let cutMeanwhile = self.state.withLockedValue { s -> Bool in
                    if !s.cut { s.open += [inbound, outbound] }
                    return s.cut
                }
                if cutMeanwhile {
                    outbound.close(promise: nil)
                    return inbound.close()
                }
                return inbound.pipeline.addHandler(Forward(peer: outbound)).flatMap {
                    outbound.pipeline.addHandler(Forward(peer: inbound))
                }.map { _ = inbound.setOption(.autoRead, value: true) }
            }
    }

    /// Closes every connection through the relay and refuses new ones.
    public func cut() {
        let open = state.withLockedValue { s -> [Channel] in
            s.cut = true
            defer { s.open = [] }
            return s.open
        }
        for c in open { c.close(promise: nil) }
    }

    /// Lets connections through again.
    public func restore() { state.withLockedValue { $0.cut = false } }

    public func stop() {
        cut()
        server.close(promise: nil)
    }

    /// Writes what one side reads to the other; closes the other when one closes.
    final class Forward: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let peer: Channel
        init(peer: Channel) { self.peer = peer }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            peer.writeAndFlush(data, promise: nil)
        }

        func channelInactive(context: ChannelHandlerContext) {
            peer.close(promise: nil)
        }

        func errorCaught(context: ChannelHandlerContext, error: Error) {
            context.close(promise: nil)
        }
    }
}
