import Foundation
import HTTPTypes
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import NIOPosix
import RichPushTestSupport
import Testing

@testable import RichPushServer

#if canImport(Glibc)
import Glibc
#endif

/// The connection's rules count against a client only the time the server asked for its data: a body whose reader
/// is late (on a loaded node, the task that reads it waits for a thread and its buffer fills) is the server's wait.
/// The node's own handlers (the guard, the media fast path and its idle rule) in front of a reader that holds its
/// reads back for 3 s after each request's head, with 1 s of idleness.
@Suite struct ReadDemandTests {
    /// A body sent at 2.5 KB/s is read whole and answered, through a reader that takes nothing of it for 3 s (it
    /// was closed as slow, then as idle, 2 s in); one that stops after 100 bytes is still closed once the reader
    /// reads again and nothing more comes.
    @Test func aBodyIsTimedOnlyWhileTheServerAsksForIt() async throws {
        let node = try await HeldNode.start(hold: .seconds(3))
        defer { node.stop() }

        let paced = try RawHTTP.connected(node.port)
        let body = [UInt8](repeating: UInt8(ascii: "x"), count: 10_000)
        #expect(RawHTTP.write(paced, Array(Self.head(length: body.count).utf8)))
        let closed = await RawHTTP.writePaced(paced, body, bytesPerSecond: 2_500)
        #expect(closed == nil, "a body at 2.5 KB/s behind a late reader: \(closed ?? ""); closes: \(node.closes)")
        let answer = String(decoding: await RawHTTP.receive(paced, within: 15) { $0.count >= 17 + 6 }, as: UTF8.self)
        #expect(answer.hasPrefix("HTTP/1.1 200"), "\(answer.prefix(120)); closes: \(node.closes)")
        #expect(answer.hasSuffix("\r\n\r\n10000"), "\(answer.suffix(60))")
        close(paced)

        // 100 bytes of 10,000, after the head has been read, then nothing: kept while they wait for the late
        // reader, closed once it has read them (by 2 idle times after the hold, at most; 20 s bounds the wait).
        let stopped = try RawHTTP.connected(node.port)
        defer { close(stopped) }
        #expect(RawHTTP.write(stopped, Array(Self.head(length: 10_000).utf8)))
        usleep(200_000)
        #expect(RawHTTP.write(stopped, [UInt8](repeating: UInt8(ascii: "x"), count: 100)))
        #expect(await RawHTTP.closedByServer(stopped, within: 20), "a body that stopped was kept; \(node.closes)")
        // At least once: on a loaded run the first connection sat idle past 1 s before the test closed it, and the
        // idle rule counted it too. (One connection counted once: the next test.)
        #expect(Self.closedAsSlowOrIdle(node.metrics) >= 1, "\(node.closes)")
    }

    /// The server's wait is taken for a request's body for 30 s at most (three idle times, 30 s at least): behind a
    /// reader that takes nothing for 45 s, a body sent at 2.5 KB/s is closed (as slow, or idle by the fast path's
    /// rule, whichever looks first) before the reader would have read it, not kept for as long as the server does
    /// not ask.
    @Test func theServersWaitIsTakenForABodyForAWhileOnly() async throws {
        let node = try await HeldNode.start(hold: .seconds(45))
        defer { node.stop() }
        let fd = try RawHTTP.connected(node.port)
        defer { close(fd) }
        let started = Date()
        let body = [UInt8](repeating: UInt8(ascii: "x"), count: 200_000)
        #expect(RawHTTP.write(fd, Array(Self.head(length: body.count).utf8)))
        let closed = await RawHTTP.writePaced(fd, body, bytesPerSecond: 2_500)
        let seconds = Date().timeIntervalSince(started)
        #expect(closed != nil, "a body behind a reader that waits 45 s was kept \(Int(seconds)) s")
        #expect(seconds < 45, "closed after \(Int(seconds)) s, once the reader read again")
        #expect(Self.closedAsSlowOrIdle(node.metrics) == 1, "\(node.closes)")
    }

    /// The server's wait is credited by the clock, not by the count of looks: with 1 s of idleness the cap is 30 s,
    /// whether the looks come on time (30 credited) or a loaded loop runs each half a second late (20 credited, 30 s
    /// as well). It credited one idle time a look, and 30 late looks kept a body 45 s (a fresh clone's loaded run).
    /// A new request's first look credits nothing of the quiet time since the last request's.
    @Test func theCreditIsTheTimeThatPassedNotTheNumberOfLooks() {
        func credited(every spacing: TimeAmount, requests: Int = 1) -> [Int] {
            var demand = ReadDemand()
            let start = NIODeadline.uptimeNanoseconds(1_000_000_000_000)
            var now = start
            var counts: [Int] = []
            for request in 0..<requests {
                // A quiet minute between two requests.
                if request > 0 { now = now + .seconds(60) }
                demand.requestBegan()
                let lastRead = now
                demand.readEnded(at: now)
                var count = 0
                for look in 1...60 {
                    now = now + spacing
                    // More of the client's data each look, arrived just now and unread since the last read.
                    let kernel = SocketProgress(
                        bytesAcknowledged: 0,
                        bytesReceived: UInt64(look * 1_000),
                        lastReceivedMilliseconds: 0
                    )
                    if demand.serversWait(
                        kernel,
                        lastRead: lastRead,
                        answerPending: true,
                        interval: .seconds(1),
                        now: now
                    ) {
                        count += 1
                    }
                }
                counts.append(count)
            }
            return counts
        }
        #expect(credited(every: .seconds(1)) == [30])
        #expect(credited(every: .milliseconds(1_500)) == [20])
        #expect(credited(every: .seconds(1), requests: 2) == [30, 30])
    }

    /// A node's closes by rule (`richpush_connections_closed_total`), as /metrics shows them: what a failure of a
    /// connection test prints, so that it names the rule that closed a client.
    static func closes(_ metrics: ServerMetrics) -> String {
        metrics.render().split(separator: "\n").filter { $0.hasPrefix("richpush_connections_closed_total{") }
            .map { $0.dropFirst("richpush_connections_closed_total".count) }.joined(separator: " ")
    }

    /// Connections closed by the body rule or the fast path's idle rule: a body that stops is closed by whichever
    /// looks first (both were seen).
    static func closedAsSlowOrIdle(_ metrics: ServerMetrics) -> Int {
        metrics.render().split(separator: "\n").reduce(0) { sum, line in
            guard
                line.hasPrefix(#"richpush_connections_closed_total{rule="slow_body"}"#)
                    || line.hasPrefix(#"richpush_connections_closed_total{rule="idle"}"#)
            else { return sum }
            return sum + (line.split(separator: " ").last.flatMap { Int($0) } ?? 0)
        }
    }

    static func head(length: Int) -> String {
        "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: \(length)\r\n\r\n"
    }

    /// A listener on 127.0.0.1 with the node's connection handlers and a ``LateReader`` behind them.
    struct HeldNode {
        let channel: Channel
        let metrics: ServerMetrics
        let folder: URL

        var port: Int { channel.localAddress?.port ?? 0 }

        var closes: String { ReadDemandTests.closes(metrics) }

        static func start(hold: TimeAmount) async throws -> HeldNode {
            let folder = FileManager.default.temporaryDirectory.appendingPathComponent("held-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            let store = try MediaStore(directory: folder)
            let metrics = ServerMetrics()
            let limits = ConnectionLimits(.init(idleSeconds: 1), metrics: metrics)
            let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .childChannelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        let pipeline = channel.pipeline.syncOperations
                        try pipeline.configureHTTPServerPipeline(withPipeliningAssistance: false)
                        try pipeline.addHandlers([
                            HTTP1ToHTTPServerCodec(secure: false),
                            ConnectionGuard(limits),
                            MediaFastPath(store: store, idle: .seconds(1), connections: limits),
                            LateReader(hold: hold),
                        ])
                    }
                }
                .bind(host: "127.0.0.1", port: 0).get()
            return HeldNode(channel: channel, metrics: metrics, folder: folder)
        }

        func stop() {
            channel.close(promise: nil)
            try? FileManager.default.removeItem(at: folder)
        }
    }

    /// Holds back its reads for `hold` after each request's head (as a reader that is late does), then reads the
    /// body and answers 200 with the number of its bytes.
    final class LateReader: ChannelDuplexHandler, @unchecked Sendable {
        // @unchecked: lives on its channel's event loop.
        typealias InboundIn = HTTPRequestPart
        typealias OutboundIn = HTTPResponsePart
        typealias OutboundOut = HTTPResponsePart

        let hold: TimeAmount
        var until: NIODeadline?
        var releasing = false
        var bytes = 0

        init(hold: TimeAmount) { self.hold = hold }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .head:
                until = .now() + hold
                bytes = 0
            case .body(let b):
                bytes += b.readableBytes
            case .end:
                let text = ByteBuffer(string: "\(bytes)")
                var fields = HTTPFields()
                fields[.contentLength] = "\(text.readableBytes)"
                context.write(wrapOutboundOut(.head(HTTPResponse(status: .ok, headerFields: fields))), promise: nil)
                context.write(wrapOutboundOut(.body(text)), promise: nil)
                context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
            }
        }

        func read(context: ChannelHandlerContext) {
            guard let until, NIODeadline.now() < until else { return context.read() }
            guard !releasing else { return }
            releasing = true
            context.eventLoop.assumeIsolated().scheduleTask(deadline: until) {
                self.releasing = false
                self.until = nil
                context.read()
            }
        }
    }
}
