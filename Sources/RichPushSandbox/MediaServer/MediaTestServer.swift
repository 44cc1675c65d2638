import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

/// A small HTTP/1.1 server on loopback that serves media with the misbehaviours real CDNs show: wrong
/// Content-Types, missing extensions, redirect chains and loops, slow drips and connections reset mid-body.
/// Tests point the device pipeline at it; `richpush-bench` serves files from it.
///
/// ```swift
/// let server = MediaTestServer(routes: ["/a.jpg": .bytes(jpeg, contentType: "image/jpeg")])
/// let port = try await server.start()
/// defer { try? await server.shutdown() }
/// ```
public final class MediaTestServer: Sendable {
    let routes: [String: MediaRoute]
    let group: MultiThreadedEventLoopGroup
    private let channelBox = ChannelBox()
    private let seen: RequestLog?

    /// Every request's path and headers, in arrival order, when made with `recordRequests` (a test checks what a
    /// client sent: an `Authorization` that must not follow a redirect, say).
    public var requests: [(path: String, headers: [(String, String)])] { seen?.all ?? [] }

    /// Every request's target exactly as it arrived (path and query, percent-encoding untouched), when made with
    /// `recordRequests`: a test checks that a signed URL's query reached the server as written.
    public var targets: [String] { seen?.targets ?? [] }

    public init(routes: [String: MediaRoute], threads: Int = 1, recordRequests: Bool = false) {
        self.routes = routes
        seen = recordRequests ? RequestLog() : nil
        group = MultiThreadedEventLoopGroup(numberOfThreads: threads)
    }

    /// Starts listening on `host` (127.0.0.1, or ::1 for IPv6) and returns the port (0 picks a free one).
    public func start(port: Int = 0, host: String = "127.0.0.1") async throws -> Int {
        let routes = self.routes
        let seen = self.seen
        let channel = try await ServerBootstrap(group: group)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .serverChannelOption(ChannelOptions.backlog, value: 1024)
            .childChannelInitializer { channel in
                channel.pipeline.configureHTTPServerPipeline().flatMap {
                    channel.pipeline.addHandler(MediaHandler(routes: routes, seen: seen))
                }
            }
            .bind(host: host, port: port).get()
        channelBox.set(channel)
        return channel.localAddress?.port ?? 0
    }

    public func shutdown() async throws {
        try await channelBox.get()?.close().get()
        try await group.shutdownGracefully()
    }
}

final class RequestLog: @unchecked Sendable {
    // @unchecked: guarded by `lock`.
    private let lock = NSLock()
    private var entries: [(path: String, headers: [(String, String)])] = []
    private var uris: [String] = []
    func add(_ path: String, target: String, _ headers: HTTPHeaders) {
        let pairs = headers.map { ($0.name, $0.value) }
        lock.withLock {
            entries.append((path, pairs))
            uris.append(target)
        }
    }
    var all: [(path: String, headers: [(String, String)])] { lock.withLock { entries } }
    var targets: [String] { lock.withLock { uris } }
}

private final class ChannelBox: @unchecked Sendable {
    // @unchecked: guarded by `lock`.
    private let lock = NSLock()
    private var channel: Channel?
    func set(_ c: Channel) { lock.withLock { channel = c } }
    func get() -> Channel? { lock.withLock { channel } }
}

final class MediaHandler: ChannelInboundHandler, @unchecked Sendable {
    // @unchecked: a handler lives on its channel's event loop and is only touched there.
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let routes: [String: MediaRoute]
    var path = "/"
    var keepAlive = true

    let seen: RequestLog?

    init(routes: [String: MediaRoute], seen: RequestLog? = nil) {
        self.routes = routes
        self.seen = seen
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            path = String(head.uri.split(separator: "?", maxSplits: 1).first ?? "/")
            keepAlive = head.isKeepAlive
            seen?.add(path, target: head.uri, head.headers)
        case .body: break
        case .end: respond(context: context)
        }
    }

    private func head(_ status: Int, _ headers: [(String, String)]) -> HTTPServerResponsePart {
        var h = HTTPHeaders(headers)
        if !keepAlive { h.replaceOrAdd(name: "connection", value: "close") }
        return .head(HTTPResponseHead(version: .http1_1, status: HTTPResponseStatus(statusCode: status), headers: h))
    }

    private func respond(context: ChannelHandlerContext) {
        guard let route = routes[path] else {
            return send(
                context,
                status: 404,
                body: Array("<!DOCTYPE html><html><body>Not found</body></html>".utf8),
                contentType: "text/html"
            )
        }
        switch route {
        case let .bytes(body, contentType, status, headers, sendLength):
            var h = headers
            if let contentType { h.append(("Content-Type", contentType)) }
            if sendLength {
                h.append(("Content-Length", String(body.count)))
            } else {
                keepAlive = false  // no length: the end of the body is the end of the connection
            }
            context.write(wrapOutboundOut(head(status, h)), promise: nil)
            if !body.isEmpty {
                context.write(
                    wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: body)))),
                    promise: nil
                )
            }
            end(context)
        case let .file(path, contentType):
            serveFile(context, path: path, contentType: contentType)
        case let .redirect(target, status):
            send(context, status: status, body: [], contentType: nil, extra: [("Location", target)])
        case let .drip(total, chunk, interval, contentType):
            var h = [("Content-Length", String(total))]
            if let contentType { h.append(("Content-Type", contentType)) }
            context.writeAndFlush(wrapOutboundOut(head(200, h)), promise: nil)
            drip(context, remaining: total, chunk: chunk, interval: interval)
        case let .reset(declared, sent, contentType):
            var h = [("Content-Length", String(declared))]
            if let contentType { h.append(("Content-Type", contentType)) }
            context.write(wrapOutboundOut(head(200, h)), promise: nil)
            let channel = context.channel
            context.writeAndFlush(wrapOutboundOut(.body(.byteBuffer(channel.allocator.buffer(bytes: sent)))))
                .flatMap { () -> EventLoopFuture<Void> in
                    guard let socket = channel as? SocketOptionProvider else {
                        return channel.eventLoop.makeSucceededVoidFuture()
                    }
                    return socket.setSoLinger(linger(l_onoff: 1, l_linger: 0))
                }
                .whenComplete { _ in channel.close(promise: nil) }  // linger 0: the close sends a reset
        }
    }

    private func send(
        _ context: ChannelHandlerContext,
        status: Int,
        body: [UInt8],
        contentType: String?,
        extra: [(String, String)] = []
    ) {
        var h = extra + [("Content-Length", String(body.count))]
        if let contentType { h.append(("Content-Type", contentType)) }
        context.write(wrapOutboundOut(head(status, h)), promise: nil)
        if !body.isEmpty {
            context.write(
                wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: body)))),
                promise: nil
            )
        }
        end(context)
    }

    private func end(_ context: ChannelHandlerContext) {
        let close = !keepAlive
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in if close { channel.close(promise: nil) } }
    }

    private func drip(_ context: ChannelHandlerContext, remaining: Int, chunk: Int, interval: TimeInterval) {
        guard remaining > 0, context.channel.isActive else { return end(context) }
        let n = min(chunk, remaining)
        context.writeAndFlush(
            wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(repeating: 0xFF, count: n)))),
            promise: nil
        )
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        context.eventLoop.scheduleTask(in: .nanoseconds(Int64(interval * 1_000_000_000))) { [self] in
            drip(bound.value, remaining: remaining - n, chunk: chunk, interval: interval)
        }
    }

    /// Streams a file in 64 KiB chunks read on the thread pool, reading the next only once the last is written.
    private func serveFile(_ context: ChannelHandlerContext, path: String, contentType: String?) {
        let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? nil
        guard let size, let handle = FileHandle(forReadingAtPath: path) else {
            return send(context, status: 404, body: [], contentType: nil)
        }
        var h = [("Content-Length", String(size))]
        if let contentType { h.append(("Content-Type", contentType)) }
        context.write(wrapOutboundOut(head(200, h)), promise: nil)
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        let box = FileBox(handle)
        @Sendable func next() {
            NIOThreadPool.singleton.runIfActive(eventLoop: bound.value.eventLoop) {
                // A read that fails ends the answer short, as one that finds the end does.
                try box.handle.read(upToCount: 64 * 1024) ?? Data()
            }
            .whenComplete { [self] result in
                let context = bound.value
                guard case .success(let data) = result, !data.isEmpty, context.channel.isActive else {
                    try? box.handle.close()
                    return end(context)
                }
                context.writeAndFlush(
                    wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: data))))
                ).whenComplete { _ in next() }
            }
        }
        next()
    }
}

/// A file handle passed to the thread pool and back; used by one request at a time.
private final class FileBox: @unchecked Sendable {
    let handle: FileHandle
    init(_ handle: FileHandle) { self.handle = handle }
}
