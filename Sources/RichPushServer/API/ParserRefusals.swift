import HTTPTypes
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import RichPushCore

/// Gives the HTTP codec's own refusals (a request that cannot be read as HTTP/1.1: a head past 80 KB, a bad
/// `Content-Length`, a stray character in a header) the API's error body, naming the cause. The HTTP layer answers
/// them with a bare `400` and closes the connection; this sits after the codec, learns the cause from the error on
/// its way in, and fills in that answer on its way out.
///
/// ```
/// HTTP/1.1 400 Bad Request
/// content-type: application/json
///
/// {"error":{"code":"malformed-request","message":"the request is not valid HTTP/1.1: its head is larger than 80 KB"}}
/// ```
final class ParserRefusalExplainer: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    /// The body of the answer to the parser error just seen (nil: none seen).
    private var pending: ByteBuffer?

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let parserError = error as? HTTPParserError {
            let refusal = APIError(.malformedRequest, "the request is not valid HTTP/1.1: \(Self.cause(parserError))")
            pending = context.channel.allocator.buffer(bytes: refusal.json.serialized())
        }
        context.fireErrorCaught(error)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard let body = pending, case .head(var head) = unwrapOutboundIn(data), head.status == .badRequest else {
            context.write(data, promise: promise)
            return
        }
        pending = nil
        head.headerFields[.contentLength] = String(body.readableBytes)
        head.headerFields[.contentType] = "application/json"
        head.headerFields[.cacheControl] = "no-store"
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.write(wrapOutboundOut(.body(body)), promise: promise)
    }

    /// The cause in words a client's author can act on.
    static func cause(_ error: HTTPParserError) -> String {
        switch error {
        case .headerOverflow: "its head (request line and headers) is larger than 80 KB"
        case .invalidContentLength, .unexpectedContentLength:
            "its Content-Length is not one whole number, or comes with Transfer-Encoding"
        case .invalidChunkSize: "a chunk's size is not a hexadecimal number"
        case .invalidMethod: "its method is not an HTTP token"
        case .invalidVersion: "its version is not HTTP/1.0 or HTTP/1.1"
        case .invalidURL, .invalidPath, .invalidQueryString, .invalidFragment, .invalidHost, .invalidPort:
            "its target is not a valid path and query"
        case .invalidHeaderToken, .invalidCharactersUsed: "a header's name or value holds a character HTTP forbids"
        case .lfExpected: "a line does not end in CRLF"
        case .invalidConstant: "it does not begin with a request line"
        case .trailingGarbage, .closedConnection: "bytes came after a request that closed the connection"
        case .invalidEOFState: "the connection ended inside a request"
        default: "its framing could not be read (Content-Length and Transfer-Encoding together, or a broken line)"
        }
    }
}

@available(*, unavailable)
extension ParserRefusalExplainer: Sendable {}
