import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHPACK
import NIOHTTP1
import NIOSSL

/// One HTTP/1.1 connection over TLS, for a server whose ALPN chose `http/1.1` (see ``NegotiatedConnection``): one
/// request at a time (no pipelining), kept alive between requests, each bounded by a timeout. A request that times
/// out closes the connection (HTTP/1.1 has no other way to give up on one), and so does a server that says
/// `Connection: close` or breaks the protocol. Answers are ``H2Response``s, as an HTTP/2 connection's are, and
/// bounded alike (``HTTP2ClientConnection/maxResponseBytes``).
public final class HTTP1ClientConnection: Sendable {
    let channel: Channel
    let authority: String
    /// Set once no request may go on it (the server asked to close, or the connection broke).
    let closing: NIOLockedValueBox<Bool>
    private let busy = NIOLockedValueBox(false)

    init(channel: Channel, authority: String, closing: NIOLockedValueBox<Bool>) {
        self.channel = channel
        self.authority = authority
        self.closing = closing
    }

    /// True while the connection is open and the server did not ask to close it.
    public var isUsable: Bool { channel.isActive && !closing.withLockedValue { $0 } }

    /// Adds the HTTP/1.1 client handlers after TLS, on the channel's event loop; returns the connection.
    static func install(on channel: Channel, authority: String) throws -> HTTP1ClientConnection {
        let closing = NIOLockedValueBox(false)
        try channel.pipeline.syncOperations.addHTTPClientHandlers()
        try channel.pipeline.syncOperations.addHandler(HTTP1ResponseReader(closing: closing))
        return HTTP1ClientConnection(channel: channel, authority: authority, closing: closing)
    }

    /// What a response body past ``HTTP2ClientConnection/maxResponseBytes`` does: fails the request (a push
    /// service's answer must be read whole), or is cut there and read to its end unkept (a webhook receiver's
    /// status is its answer; its body is not read).
    public enum LongBody: Sendable {
        case fail
        case truncate
    }

    /// Sends one request and waits for its whole response. One at a time: a second request while one is in flight
    /// is refused with ``TransportError/notSent``. The timeout covers the whole response, a long body read to its
    /// end included.
    public func send(_ request: H2Request, timeout: TimeAmount, longBody: LongBody = .fail) async throws -> H2Response {
        guard
            busy.withLockedValue({ b -> Bool in
                if b { return false }
                b = true
                return true
            })
        else { throw TransportError.notSent }
        defer { busy.withLockedValue { $0 = false } }
        let channel = self.channel
        let authority = self.authority
        let closing = self.closing
        let promise = channel.eventLoop.makePromise(of: H2Response.self)
        channel.eventLoop.execute {
            guard channel.isActive,
                let reader = try? channel.pipeline.syncOperations.handler(type: HTTP1ResponseReader.self),
                !reader.isClosing, reader.pending == nil
            else {
                promise.fail(TransportError.notSent)
                return
            }
            reader.pending = promise
            reader.truncates = longBody == .truncate
            let timer = channel.eventLoop.scheduleTask(in: timeout) {
                closing.withLockedValue { $0 = true }
                promise.fail(TransportError.timedOut)
                channel.close(promise: nil)
            }
            promise.futureResult.whenComplete { _ in timer.cancel() }
            var headers = HTTPHeaders()
            headers.add(name: "host", value: authority)
            for (name, value) in request.headers { headers.add(name: name, value: value) }
            let body = request.body ?? ByteBuffer()
            headers.replaceOrAdd(name: "content-length", value: String(body.readableBytes))
            let head = HTTPRequestHead(
                version: .http1_1,
                method: HTTPMethod(rawValue: request.method),
                uri: request.path,
                headers: headers
            )
            channel.write(HTTPClientRequestPart.head(head), promise: nil)
            if body.readableBytes > 0 { channel.write(HTTPClientRequestPart.body(.byteBuffer(body)), promise: nil) }
            channel.writeAndFlush(HTTPClientRequestPart.end(nil), promise: nil)
        }
        return try await promise.futureResult.get()
    }

    /// Closes the connection; a request in flight fails with ``TransportError/connectionClosed``.
    public func close() { channel.close(promise: nil) }

    public var closeFuture: EventLoopFuture<Void> { channel.closeFuture }
}

/// Reads the one response of the request in flight, bounded, into an ``H2Response`` (header names lowercased, as
/// HTTP/2 has them).
final class HTTP1ResponseReader: ChannelInboundHandler, RemovableChannelHandler, @unchecked Sendable {
    // @unchecked: lives on its channel's event loop.
    typealias InboundIn = HTTPClientResponsePart

    var pending: EventLoopPromise<H2Response>?
    /// The body past the limit is dropped rather than failing the request (``HTTP1ClientConnection/LongBody``).
    var truncates = false
    /// Set when the server said `Connection: close`, or the connection broke: no more requests on it.
    let closing: NIOLockedValueBox<Bool>
    private var head: HTTPResponseHead?
    private var body: ByteBuffer?

    init(closing: NIOLockedValueBox<Bool>) { self.closing = closing }

    var isClosing: Bool { closing.withLockedValue { $0 } }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let h):
            // An informational answer (100 Continue, 103) is not the response.
            guard h.status.code >= 200 else { return }
            head = h
            if !h.isKeepAlive { closing.withLockedValue { $0 = true } }
        case .body(var b):
            guard head != nil else { return }
            let kept = body?.readableBytes ?? 0
            guard kept + b.readableBytes <= HTTP2ClientConnection.maxResponseBytes else {
                guard truncates else {
                    fail(.responseTooLarge(limit: HTTP2ClientConnection.maxResponseBytes), context: context)
                    return
                }
                // Kept to the limit; the rest is read and dropped (the request's timeout bounds how long).
                if var part = b.readSlice(length: max(0, HTTP2ClientConnection.maxResponseBytes - kept)),
                    part.readableBytes > 0
                {
                    if body == nil { body = part } else { body!.writeBuffer(&part) }
                }
                return
            }
            if body == nil { body = b } else { body!.writeBuffer(&b) }
        case .end:
            guard let h = head, let promise = pending else {
                // An answer nobody asked for: the server is not speaking HTTP/1.1 as a client expects.
                fail(.malformedResponse("a response with no request"), context: context)
                return
            }
            var headers = HPACKHeaders()
            for (name, value) in h.headers { headers.add(name: name.lowercased(), value: value) }
            let response = H2Response(status: Int(h.status.code), headers: headers, body: body)
            pending = nil
            head = nil
            body = nil
            promise.succeed(response)
            if isClosing { context.close(promise: nil) }
        }
    }

    private func fail(_ error: TransportError, context: ChannelHandlerContext) {
        closing.withLockedValue { $0 = true }
        head = nil
        body = nil
        pending?.fail(error)
        pending = nil
        context.close(promise: nil)
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        fail(.malformedResponse("\(error)".prefix(120).description), context: context)
    }

    func channelInactive(context: ChannelHandlerContext) {
        closing.withLockedValue { $0 = true }
        pending?.fail(TransportError.connectionClosed)
        pending = nil
        context.fireChannelInactive()
    }
}
