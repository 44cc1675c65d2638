import Foundation
import NIOCore
import NIOPosix
import RichPushSandbox
import RichPushTransport
import Testing

/// HTTP/1.1 to a server whose ALPN chooses it (the Web Push emulator offering HTTP/1.1 only), over real TLS on
/// 127.0.0.1: the negotiation follows the server, the pool never opens more than its connections, requests past
/// them wait their turn, a request that times out closes its connection, and a pool shut down refuses.
@Suite struct HTTP1ConnectionPoolTests {
    struct Peer {
        let push: WebPushEmulator
        let group: MultiThreadedEventLoopGroup
        var target: HTTP2ClientConnection.Target {
            .init(
                host: "127.0.0.1",
                port: push.port,
                trust: .certificateAuthority(pem: SandboxFixture.credentials.caCertificatePEM)
            )
        }

        static func start(http1Only: Bool) async throws -> Peer {
            let push = try WebPushEmulator(
                credentials: SandboxFixture.credentials,
                configuration: .init(http1Only: http1Only)
            )
            try await push.start()
            return Peer(push: push, group: MultiThreadedEventLoopGroup(numberOfThreads: 1))
        }

        func stop() async {
            await push.stop()
            try? await group.shutdownGracefully()
        }
    }

    /// A request the emulator answers at once (404: no such subscription), as a complete HTTP response.
    static let request = H2Request(method: "POST", path: "/push/none", headers: [("ttl", "60")], body: ByteBuffer())

    @Test func theServersChoiceDecidesTheProtocol() async throws {
        let only1 = try await Peer.start(http1Only: true)
        let both = try await Peer.start(http1Only: false)
        guard case .http1(let c1) = try await NegotiatedConnection.connect(to: only1.target, group: only1.group) else {
            Issue.record("an HTTP/1.1-only server was spoken to in HTTP/2")
            return
        }
        let answer = try await c1.send(Self.request, timeout: .seconds(5))
        #expect(answer.status == 404 && answer.headers.first(name: "content-type") == "application/json")
        // Kept alive: a second request on the same connection.
        #expect(try await c1.send(Self.request, timeout: .seconds(5)).status == 404)
        c1.close()
        guard case .http2(let c2) = try await NegotiatedConnection.connect(to: both.target, group: both.group) else {
            Issue.record("a server offering h2 was spoken to in HTTP/1.1")
            return
        }
        #expect(try await c2.send(Self.request, timeout: .seconds(5)).status == 404)
        c2.close()
        await only1.stop()
        await both.stop()
    }

    /// A server that refuses the connection (nothing listens on port 1): the connect fails with the address named,
    /// through either way in, and every promise made for the handshake is answered (one left unanswered was a crash
    /// of a debug build, found by an attack that registered a subscription at such an address).
    @Test func aRefusedConnectionFailsCleanly() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let target = HTTP2ClientConnection.Target(host: "127.0.0.1", port: 1, trust: .system)
        for _ in 0..<3 {
            await #expect(throws: TransportError.self) {
                _ = try await NegotiatedConnection.connect(to: target, group: group, timeout: .seconds(2))
            }
            await #expect(throws: TransportError.self) {
                _ = try await HTTP2ClientConnection.connect(to: target, group: group, timeout: .seconds(2))
            }
        }
        let pool = HTTP1ConnectionPool(configuration: .init(target: target, connections: 1), group: group)
        await #expect(throws: TransportError.self) { _ = try await pool.execute(Self.request) }
        try await group.shutdownGracefully()
    }

    @Test func thePoolOpensAtMostItsConnectionsAndRequestsWaitTheirTurn() async throws {
        let peer = try await Peer.start(http1Only: true)
        let pool = HTTP1ConnectionPool(configuration: .init(target: peer.target, connections: 2), group: peer.group)
        let statuses = try await withThrowingTaskGroup(of: Int.self) { g in
            for _ in 0..<20 { g.addTask { try await pool.execute(Self.request).status } }
            var all: [Int] = []
            for try await s in g { all.append(s) }
            return all
        }
        #expect(statuses == Array(repeating: 404, count: 20))
        #expect(pool.idleCount <= 2 && pool.busyCount == 0, "idle \(pool.idleCount) busy \(pool.busyCount)")

        // Silent now: a request times out, its connection is closed, and the pool lends nothing broken after.
        peer.push.setSilent(true)
        let slow = HTTP1ConnectionPool(
            configuration: .init(target: peer.target, connections: 1, requestTimeout: .milliseconds(300)),
            group: peer.group
        )
        await #expect(throws: TransportError.self) { try await slow.execute(Self.request) }
        #expect(slow.busyCount == 0)
        peer.push.setSilent(false)
        #expect(try await slow.execute(Self.request).status == 404)

        await pool.shutdown()
        await #expect(throws: TransportError.shutDown) { try await pool.execute(Self.request) }
        await slow.shutdown()
        await peer.stop()
    }
}
