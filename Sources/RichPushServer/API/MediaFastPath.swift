import HTTPTypes
import NIOCore
import NIOHTTPTypes

/// Answers `GET` and `HEAD /media/…` on the connection's event loop, from the media cache, before the request
/// reaches the router: a burst of downloads after a large send then costs a dictionary lookup and a write per
/// request, with no task per request. Everything else passes through untouched. While a routed request is still
/// being answered, media requests pass through too, so pipelined answers keep their order.
public final class MediaFastPath: ChannelDuplexHandler, RemovableChannelHandler {
    public typealias InboundIn = HTTPRequestPart
    public typealias InboundOut = HTTPRequestPart
    public typealias OutboundIn = HTTPResponsePart
    public typealias OutboundOut = HTTPResponsePart

    let store: MediaStore
    /// Requests passed on whose answer has not ended yet.
    var routed = 0
    var intercepted: HTTPRequest?

    public init(store: MediaStore) { self.store = store }

    public func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        switch part {
        case .head(let request):
            if routed == 0, request.method == .get || request.method == .head, let path = request.path, path.hasPrefix("/media/") {
                intercepted = request
                return
            }
            routed += 1
            context.fireChannelRead(data)
        case .body:
            if intercepted == nil { context.fireChannelRead(data) }
        case .end:
            guard let request = intercepted else { return context.fireChannelRead(data) }
            intercepted = nil
            answer(context: context, request: request)
        }
    }

    func answer(context: ChannelHandlerContext, request: HTTPRequest) {
        var name = String(request.path?.dropFirst("/media/".count) ?? "")
        if let q = name.firstIndex(of: "?") { name = String(name[..<q]) }
        let (response, body) = RichPushAPI.mediaResponse(store, name: name, head: request.method == .head, headers: request.headerFields)
        context.write(wrapOutboundOut(.head(response)), promise: nil)
        if let body { context.write(wrapOutboundOut(.body(body)), promise: nil) }
        let close = request.headerFields[.connection]?.lowercased().contains("close") == true
        let done = context.writeAndFlushPromise(wrapOutboundOut(.end(nil)))
        if close {
            done.whenComplete { [channel = context.channel] _ in channel.close(promise: nil) }
        } else {
            // The router's side reads only when it wants a request; it never saw this one, so ask for the next.
            context.read()
        }
    }

    public func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data) { routed = max(0, routed - 1) }
        context.write(data, promise: promise)
    }
}

extension ChannelHandlerContext {
    fileprivate func writeAndFlushPromise(_ data: NIOAny) -> EventLoopFuture<Void> {
        let p = eventLoop.makePromise(of: Void.self)
        writeAndFlush(data, promise: p)
        return p.futureResult
    }
}
