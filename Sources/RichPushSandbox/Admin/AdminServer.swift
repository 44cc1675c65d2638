import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import RichPushCore

/// A plain HTTP/1.1 JSON API on loopback for looking into the emulators and steering them.
final class AdminServer: Sendable {
    typealias Route =
        @Sendable (_ method: String, _ path: String, _ query: [String: String], _ body: JSONValue?) -> (Int, JSONValue)

    let route: Route
    let group: EventLoopGroup
    private let channel = NIOLockedBox<Channel?>(nil)

    init(group: EventLoopGroup, route: @escaping Route) {
        self.group = group
        self.route = route
    }

    func start(port: Int) async throws -> Int {
        let route = self.route
        let ch = try await ServerBootstrap(group: group)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.pipeline.configureHTTPServerPipeline().flatMap {
                    channel.pipeline.addHandler(AdminHandler(route: route))
                }
            }
            .bind(host: "127.0.0.1", port: port).get()
        channel.value = ch
        return ch.localAddress?.port ?? 0
    }

    func stop() async { try? await channel.value?.close().get() }
}

final class AdminHandler: ChannelInboundHandler, @unchecked Sendable {
    // @unchecked: lives on its channel's event loop.
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart
    let route: AdminServer.Route
    var head: HTTPRequestHead?
    var body: [UInt8] = []

    init(route: @escaping AdminServer.Route) { self.route = route }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let h):
            head = h
            body = []
        case .body(var b):
            if let bytes = b.readBytes(length: b.readableBytes) { body += bytes }
            if body.count > 1_000_000 { context.close(promise: nil) }
        case .end:
            guard let head else { return }
            let parts = head.uri.split(separator: "?", maxSplits: 1)
            var query: [String: String] = [:]
            if parts.count > 1 {
                for pair in parts[1].split(separator: "&") {
                    let kv = pair.split(separator: "=", maxSplits: 1).map {
                        String($0).removingPercentEncoding ?? String($0)
                    }
                    query[kv[0]] = kv.count > 1 ? kv[1] : ""
                }
            }
            var json: JSONValue?
            var (status, answer): (Int, JSONValue)
            if !body.isEmpty {
                do { json = try JSONValue.parse(body) } catch {
                    (status, answer) = (400, ["error": .string("the body is not JSON: \(error)")])
                    return write(context, head, status, answer)
                }
            }
            (status, answer) = route(head.method.rawValue, String(parts[0]), query, json)
            write(context, head, status, answer)
        }
    }

    private func write(_ context: ChannelHandlerContext, _ head: HTTPRequestHead, _ status: Int, _ answer: JSONValue) {
        let bytes = answer.prettyPrinted().utf8
        var h = HTTPHeaders([("content-type", "application/json"), ("content-length", String(bytes.count + 1))])
        if !head.isKeepAlive { h.add(name: "connection", value: "close") }
        context.write(
            wrapOutboundOut(
                .head(HTTPResponseHead(version: head.version, status: .init(statusCode: status), headers: h))
            ),
            promise: nil
        )
        context.write(
            wrapOutboundOut(
                .body(
                    .byteBuffer(context.channel.allocator.buffer(string: String(decoding: bytes, as: UTF8.self) + "\n"))
                )
            ),
            promise: nil
        )
        let keep = head.isKeepAlive
        let ch = context.channel
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in if !keep { ch.close(promise: nil) } }
    }
}
