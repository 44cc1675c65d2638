import HTTPTypes
#if canImport(Glibc)
import Glibc
#endif
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1

/// Answers `GET` and `HEAD /media/…` on the connection's event loop before the request reaches the router: the
/// file is written with `sendfile` (no copy through the process; the kernel's page cache keeps hot files in
/// memory), with no task per request. Everything else passes through untouched. While a routed request is
/// still being answered, media requests pass through too, so pipelined answers keep their order.
///
/// Added as one of the server's extra handlers (which sit after the HTTP/1 to HTTP-types codec), it moves
/// itself in front of that codec, where a body can be a file region.
public final class MediaFastPath: ChannelInboundHandler, RemovableChannelHandler {
    public typealias InboundIn = HTTPRequestPart
    public typealias InboundOut = HTTPRequestPart

    let store: MediaStore

    public init(store: MediaStore) { self.store = store }

    public func handlerAdded(context: ChannelHandlerContext) {
        let pipeline = context.pipeline.syncOperations
        if let codec = try? pipeline.handler(type: HTTP1ToHTTPServerCodec.self) {
            try? pipeline.addHandler(MediaFileAnswerer(store: store), position: .before(codec))
        }
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }

    public func channelRead(context: ChannelHandlerContext, data: NIOAny) { context.fireChannelRead(data) }
}

/// The HTTP/1 side of ``MediaFastPath``.
final class MediaFileAnswerer: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    let store: MediaStore
    /// Requests passed on whose answer has not ended yet.
    var routed = 0
    var intercepted: HTTPRequestHead?

    init(store: MediaStore) { self.store = store }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            if routed == 0, head.method == .GET || head.method == .HEAD, head.uri.hasPrefix("/media/") {
                intercepted = head
                return
            }
            routed += 1
            context.fireChannelRead(data)
        case .body:
            if intercepted == nil { context.fireChannelRead(data) }
        case .end:
            guard let head = intercepted else { return context.fireChannelRead(data) }
            intercepted = nil
            answer(context: context, head)
        }
    }

    func answer(context: ChannelHandlerContext, _ r: HTTPRequestHead) {
        let path = r.uri.split(separator: "?", maxSplits: 1).first.map(String.init) ?? r.uri
        let name = String(path.dropFirst("/media/".count))
        var request = HTTPFields()
        for h in r.headers { if let n = HTTPField.Name(h.name) { request.append(HTTPField(name: n, value: h.value)) } }
        var response: HTTPResponse
        var body: IOData?
        var file: NIOFileHandle?
        if let (p, size, type) = store.file(name) {
            let (answer, range) = RichPushAPI.mediaAnswer(name: name, type: type, size: size, headers: request)
            response = answer
            if let range, r.method == .GET, let handle = try? NIOFileHandle(_deprecatedPath: p) {
                file = handle
                body = .fileRegion(FileRegion(fileHandle: handle, readerIndex: range.lowerBound, endIndex: range.upperBound + 1))
            }
        } else {
            let (answer, buffer) = RichPushAPI.notFound(head: r.method == .HEAD)
            response = answer
            body = buffer.map { .byteBuffer($0) }
        }
        let keepAlive = r.isKeepAlive
        var headers = HTTPHeaders(response.headerFields.map { ($0.name.rawName, $0.value) })
        if !keepAlive { headers.replaceOrAdd(name: "connection", value: "close") }
        // Corked, the head and the start of the file leave in full packets together (as a web server's nopush does).
        let cork = ChannelOptions.Types.SocketOption(level: SocketOptionLevel(IPPROTO_TCP), name: SocketOptionName(TCP_CORK))
        if body != nil { context.channel.setOption(cork, value: 1).whenFailure { _ in } }
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: r.version, status: .init(statusCode: response.status.code), headers: headers))), promise: nil)
        if let body { context.write(wrapOutboundOut(.body(body)), promise: nil) }
        let done = context.eventLoop.makePromise(of: Void.self)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: done)
        let corked = body != nil
        done.futureResult.whenComplete { [channel = context.channel] _ in
            if corked { channel.setOption(cork, value: 0).whenFailure { _ in } }
            try? file?.close()
            if !keepAlive { channel.close(promise: nil) }
        }
        // The router's side reads only when it wants a request; it never saw this one, so ask for the next.
        if keepAlive { context.read() }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data) { routed = max(0, routed - 1) }
        context.write(data, promise: promise)
    }
}
