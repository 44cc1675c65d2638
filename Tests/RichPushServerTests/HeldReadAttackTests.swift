import Foundation
import NIOCore
import RichPushTestSupport
import Testing

@testable import RichPushServer

#if canImport(Glibc)
import Glibc
#endif

/// An outsider's attacks on ``ReadDemand`` (the server's own wait for a body is not counted against its client). A
/// request with `Connection: close` makes the HTTP layer read no more of its connection once it has answered: the
/// body that follows fills the inbound stream's buffer (10 parts), reads are held for good, and a byte sent after
/// that waits unread in the kernel. Before the wait was taken only while the answer was pending, the guard's body
/// rule and the fast path's idle rule saw "held and unread" at every look and kept such a connection, with no key,
/// for as long as the client liked (a minute watched, nothing closed).
@Suite(.serialized) struct HeldReadAttackTests {
    /// What happened to the node's end of one connection.
    struct Outcome: CustomStringConvertible {
        var heldFor: Double
        var state: String
        var open: Int
        var closes: String
        var answer: String
        var description: String {
            "node side \(state) after \(String(format: "%.1f", heldFor)) s, node holds \(open) connection(s); "
                + "closes: \(closes); answer: \(answer)"
        }
    }

    /// A request with a declared body of 1 MB, no key: the answer is read; then 30 body pieces of 10 bytes, 30 ms
    /// apart (one part each), a pause, one byte, and nothing more. Watched for `watch` seconds from the node's side.
    static func attack(
        _ node: NodeProtectionTests.Node,
        request: String,
        close: Bool,
        watch: Double,
        pieces: Int = 30,
        chunked: Bool = false,
        extra: String = ""
    ) async throws
        -> Outcome
    {
        let server = node.server
        let fd = try RawHTTP.connected(server.port)
        defer { Glibc.close(fd) }
        let clientPort = NodeProtectionTests.localPort(fd)
        let head =
            "\(request) HTTP/1.1\r\nHost: x\r\n" + (close ? "Connection: close\r\n" : "")
            + "Content-Type: application/json\r\n" + extra
            + (chunked ? "Transfer-Encoding: chunked\r\n\r\n" : "Content-Length: 1000000\r\n\r\n")
        let piece = chunked ? Array("a\r\n          \r\n".utf8) : [UInt8](repeating: 32, count: 10)
        #expect(RawHTTP.write(fd, Array(head.utf8)))
        let answer = await RawHTTP.receive(fd, within: 5) { $0.firstRange(of: Array("\r\n\r\n".utf8)) != nil }
        let status = String(decoding: answer.prefix(12), as: UTF8.self)
        let started = Date()
        let wrote = await offThePool { () -> Bool in
            for _ in 0..<pieces {
                guard RawHTTP.write(fd, piece) else { return false }
                usleep(30_000)
            }
            usleep(300_000)
            return RawHTTP.write(fd, chunked ? Array("1".utf8) : [32])
        }
        _ = wrote
        // Until the node gives the connection's place back (its descriptor closed): a socket the node closed may
        // live on in the kernel, orphaned in FIN-WAIT-2 for tcp_fin_timeout, which is no longer the node's.
        var state = "01"
        while Date().timeIntervalSince(started) < watch {
            try await Task.sleep(nanoseconds: 250_000_000)
            state = NodeProtectionTests.nodeSide(serverPort: server.port, clientPort: clientPort)?.state ?? "gone"
            if (server.application.api.connections?.open.total ?? 0) == 0 { break }
        }
        return Outcome(
            heldFor: Date().timeIntervalSince(started),
            state: state,
            open: server.application.api.connections?.open.total ?? -1,
            closes: server.closes,
            answer: status
        )
    }

    /// 1 s of idleness: a body that brought 301 bytes and then one byte, on a request that said `Connection: close`
    /// and was answered without its body being read, must be closed within a few idle times (2 idle times and a
    /// look, by the slow-body rule); 20 s is twenty idle times.
    @Test func aClosingRequestsUnreadBodyIsNotKeptForGood() async throws {
        let node = try await NodeProtectionTests.Node.start("attack-close", idleSeconds: 1)
        defer { node.removeFolder() }
        for request in ["POST /v1/apps", "GET /health", "POST /no-such-route"] {
            let outcome = try await Self.attack(node, request: request, close: true, watch: 20)
            #expect(outcome.open == 0, "\(request) with Connection: close: \(outcome)")
        }
        try? await node.server.stop()
    }

    /// The same with a chunked body, and with `Expect: 100-continue` (the guard's 100 goes first).
    @Test func chunkedAndExpectContinueToo() async throws {
        let node = try await NodeProtectionTests.Node.start("attack-chunked", idleSeconds: 1)
        defer { node.removeFolder() }
        let chunked = try await Self.attack(node, request: "POST /no-such-route", close: true, watch: 15, chunked: true)
        #expect(chunked.open == 0, "chunked: \(chunked)")
        let expect = try await Self.attack(
            node,
            request: "POST /v1/apps",
            close: true,
            watch: 15,
            extra: "Expect: 100-continue\r\n"
        )
        #expect(expect.open == 0, "100-continue: \(expect)")
        try? await node.server.stop()
    }

    /// Control: with `Connection: close` but only 5 body pieces (the inbound stream's buffer of 10 never fills, so
    /// reads are not held and every byte is read): the slow-body rule closes it. What keeps the attack's connection
    /// is the ReadDemand exemption, not `Connection: close` alone.
    @Test func controlWithFewPiecesIsClosed() async throws {
        let node = try await NodeProtectionTests.Node.start("attack-few", idleSeconds: 1)
        defer { node.removeFolder() }
        let outcome = try await Self.attack(node, request: "POST /no-such-route", close: true, watch: 20, pieces: 5)
        #expect(outcome.open == 0, "5 pieces: \(outcome)")
        #expect(outcome.heldFor < 8, "5 pieces: \(outcome)")
        try? await node.server.stop()
    }

    /// The same without `Connection: close` (Hummingbird drains the body after the answer, asking for reads): the
    /// slow-body rule closes it, as it should.
    @Test func controlWithoutConnectionCloseIsClosed() async throws {
        let node = try await NodeProtectionTests.Node.start("attack-control", idleSeconds: 1)
        defer { node.removeFolder() }
        let outcome = try await Self.attack(node, request: "POST /v1/apps", close: false, watch: 20)
        #expect(outcome.open == 0, "keep-alive: \(outcome)")
        #expect(outcome.heldFor < 8, "keep-alive: \(outcome)")
        try? await node.server.stop()
    }
}
