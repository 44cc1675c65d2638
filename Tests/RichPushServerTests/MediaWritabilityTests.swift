import Foundation
import NIOCore
import NIOEmbedded
import NIOHTTP1
import Testing

@testable import RichPushServer

/// The media fast path keeps the channel's writability flips that its own file answers cause from the handlers
/// after it, and tells them before a routed request reaches them.
@Suite struct MediaWritabilityTests {
    /// Records what reaches the handlers after the fast path: each writability change (with the channel's state at
    /// that moment) and each request head.
    final class Probe: ChannelInboundHandler {
        typealias InboundIn = HTTPServerRequestPart
        var seen: [String] = []
        var readsEnded = 0
        func channelReadComplete(context: ChannelHandlerContext) { readsEnded += 1 }
        func channelWritabilityChanged(context: ChannelHandlerContext) {
            seen.append(context.channel.isWritable ? "writable" : "unwritable")
            context.fireChannelWritabilityChanged()
        }
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            if case .head(let head) = unwrapInboundIn(data) { seen.append("request \(head.uri)") }
        }
    }

    @Test func onlyARoutedRequestHearsOfTheFlipsMediaAnswersCause() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("writability-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let answerer = MediaFileAnswerer(store: try MediaStore(directory: dir))
        let probe = Probe()
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandlers([answerer, probe])
        func flip(_ writable: Bool) {
            channel.isWritable = writable
            channel.pipeline.fireChannelWritabilityChanged()
        }
        func request(_ uri: String) throws {
            try channel.writeInbound(
                HTTPServerRequestPart.head(HTTPRequestHead(version: .http1_1, method: .GET, uri: uri))
            )
            try channel.writeInbound(HTTPServerRequestPart.end(nil))
        }

        // Nothing routed is pending: a flip and its flip back are not passed on.
        flip(false)
        flip(true)
        #expect(probe.seen.isEmpty)

        // Unwritable while only media is queued, then a routed request: its handlers hear the channel's state first.
        flip(false)
        try request("/v1/apps")
        #expect(probe.seen == ["unwritable", "request /v1/apps"])
        flip(true)
        #expect(probe.seen.last == "writable")

        // With a routed answer pending, every flip is passed on.
        flip(false)
        flip(true)
        #expect(probe.seen.suffix(2) == ["unwritable", "writable"])

        // Its answer ends: flips are the fast path's own again.
        try channel.writeOutbound(HTTPServerResponsePart.end(nil))
        channel.embeddedEventLoop.run()
        let count = probe.seen.count
        flip(false)
        flip(true)
        #expect(probe.seen.count == count)
        _ = try channel.finish()
    }

    /// Counts the reads that reach the socket.
    final class Reads: ChannelOutboundHandler {
        typealias OutboundIn = Any
        var count = 0
        func read(context: ChannelHandlerContext) {
            count += 1
            context.read()
        }
    }

    @Test func nothingMoreIsReadWhileTheChannelCannotTakeMoreWrites() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("read-hold-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let reads = Reads()
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandlers([
            reads, MediaFileAnswerer(store: try MediaStore(directory: dir)),
        ])
        channel.read()
        #expect(reads.count == 1)
        // Answers back up: the read is held, and passed on once the channel drains.
        channel.isWritable = false
        channel.pipeline.fireChannelWritabilityChanged()
        channel.read()
        #expect(reads.count == 1)
        channel.isWritable = true
        channel.pipeline.fireChannelWritabilityChanged()
        #expect(reads.count == 2)
        _ = try channel.finish()
    }

    @Test func aReadOfMediaRequestsAloneEndsUnheardByTheRouter() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("read-end-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let probe = Probe()
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandlers([
            MediaFileAnswerer(store: try MediaStore(directory: dir)), probe,
        ])
        func request(_ uri: String) throws {
            try channel.writeInbound(
                HTTPServerRequestPart.head(HTTPRequestHead(version: .http1_1, method: .GET, uri: uri))
            )
            try channel.writeInbound(HTTPServerRequestPart.end(nil))
        }
        // Answered here (a 404: the store is empty), each part's read ending unheard.
        try request("/media/\(String(repeating: "0", count: 64)).png")
        #expect(probe.readsEnded == 0 && probe.seen.isEmpty)
        var answer = try #require(try channel.readOutbound(as: HTTPServerResponsePart.self))
        guard case .head(let head) = answer else {
            Issue.record("no answer's head: \(answer)")
            return
        }
        #expect(head.status == .notFound)
        while let part = try channel.readOutbound(as: HTTPServerResponsePart.self) { answer = part }
        // A routed request's parts each end a read the router hears.
        try request("/v1/apps")
        #expect(probe.seen == ["request /v1/apps"] && probe.readsEnded == 2)
        _ = try channel.finish()
    }
}
