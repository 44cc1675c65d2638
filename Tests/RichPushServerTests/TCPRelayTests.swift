import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RichPushTestSupport
import Testing

/// The relay the outage tests cut: a cut closes every connection through it, those still being made included.
/// (A connection accepted just before a cut, whose onward connect finished after it, used to be kept: a database
/// pool filling up as a test cut stayed connected, and the node read as up for the whole outage.)
@Suite struct TCPRelayTests {
    final class Hold: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
    }

    @Test func aCutClosesTheConnectionsBeingMade() async throws {
        let group = MultiThreadedEventLoopGroup.singleton
        let target = try await ServerBootstrap(group: group)
            .childChannelInitializer { $0.pipeline.addHandler(Hold()) }
            .bind(host: "127.0.0.1", port: 0).get()
        defer { target.close(promise: nil) }
        let relay = try await TCPRelay.start(to: target.localAddress?.port ?? 0)
        defer { relay.stop() }
        for round in 0..<20 {
            relay.restore()
            var clients: [Channel] = []
            for _ in 0..<20 {
                clients.append(
                    try await ClientBootstrap(group: group).connect(host: "127.0.0.1", port: relay.port).get()
                )
            }
            // Cut while the relay is still making the onward connections of the last ones.
            relay.cut()
            let deadline = ContinuousClock.now + .seconds(5)
            while clients.contains(where: \.isActive), ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(20))
            }
            let open = clients.filter(\.isActive).count
            #expect(open == 0, "round \(round): \(open) of 20 connections outlived the cut")
            for c in clients { c.close(promise: nil) }
            if open > 0 { break }
        }
    }
}
