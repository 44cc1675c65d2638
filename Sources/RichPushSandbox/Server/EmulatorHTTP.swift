import Foundation
import NIOCore
import NIOHPACK
import NIOHTTP1
import NIOHTTP2

/// A request as an emulator sees it, whether it came over HTTP/2 or HTTP/1.1.
public struct EmulatorRequest: Sendable {
    public var method: String
    public var path: String
    /// Header names in lowercase, in arrival order, repeats kept (APNs answers repeats with DuplicateHeaders).
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]
    public var isHTTP2: Bool

    public func header(_ name: String) -> String? { headers.first { $0.name == name }?.value }
    public func count(_ name: String) -> Int { headers.filter { $0.name == name }.count }
}

public struct EmulatorResponse: Sendable {
    public var status: Int
    public var headers: [(String, String)]
    public var body: [UInt8]
    /// Written as `:status` instead of `status` (a hostile answer's invalid status).
    var rawStatus: String?
    /// Ends the stream after this (informational) header block.
    var endsAfterInformational = false

    public init(status: Int, headers: [(String, String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    public static func json(_ status: Int, _ value: Any, headers: [(String, String)] = []) -> EmulatorResponse {
        let data =
            (try? JSONSerialization.data(withJSONObject: value, options: [.sortedKeys, .withoutEscapingSlashes]))
            ?? Data()
        return EmulatorResponse(
            status: status,
            headers: headers + [("content-type", "application/json; charset=UTF-8")],
            body: Array(data)
        )
    }
}

/// What to do with a request: answer it, or misbehave like a real service under stress.
public enum EmulatorAction: Sendable {
    case respond(EmulatorResponse)
    /// Never answer.
    case stall
    /// Reset the whole connection (TCP RST).
    case resetConnection
    /// Send GOAWAY with this debug JSON, naming the request as not processed (or, with `processed`, as processed),
    /// and close the connection without answering it.
    case goAway(debugReason: String, processed: Bool)
    /// Reset the stream with REFUSED_STREAM: the request was not processed.
    case refuseStream
}

/// Lets a handler act on the connection a request came on (HTTP/2 only; no-ops on HTTP/1.1).
public struct ConnectionControl: Sendable {
    let setMaxStreams: @Sendable (Int) -> Void
    var startDrain: @Sendable (String) -> Void = { _ in }

    /// Announces a new MAX_CONCURRENT_STREAMS to the client.
    public func announceMaxConcurrentStreams(_ n: Int) { setMaxStreams(n) }

    /// Shuts the connection down gracefully, as a server going away does: GOAWAY (NO_ERROR, `{"reason": …}`)
    /// naming this request the last processed; this request is answered after ``EmulatorDrain/answerDelay`` (still
    /// in flight when the GOAWAY arrives), requests after it are not processed, and the connection closes once the
    /// answer is written.
    public func drain(reason: String) { startDrain(reason) }
}

/// A connection's graceful shutdown, once a request started it (the first only: a later drain on the same
/// connection changes nothing).
final class EmulatorDrain {
    /// The last stream named processed: the one that started the drain, or a higher one already handled (its
    /// request's last frame came first).
    var lastStreamID: HTTP2StreamID?
    /// The stream whose request started the drain.
    var startedBy: HTTP2StreamID?
    var reason = ""
    /// The highest stream whose request was handled so far.
    var highestHandled: HTTP2StreamID = .rootStream
    /// Answers handled and waiting out the response delay, not yet written.
    var delayedAnswers = 0
    /// The answer of the stream that started the drain is written: the connection closes once no delayed answer
    /// is left.
    var starterAnswered = false
    private var closing = false
    static let answerDelay: TimeAmount = .milliseconds(300)

    /// Closes the connection 50 ms after the last answer it still owes (the drain's own, and any delayed ones of
    /// the requests it named processed), once.
    func closeIfAnswered(_ parent: Channel) {
        guard starterAnswered, delayedAnswers == 0, !closing else { return }
        closing = true
        parent.eventLoop.scheduleTask(in: .milliseconds(50)) { parent.close(promise: nil) }
    }

    /// GOAWAY debug data: `{"reason": …}`, the reason encoded as a JSON string.
    static func debugData(reason: String, allocator: ByteBufferAllocator) -> ByteBuffer {
        let json = (try? JSONSerialization.data(withJSONObject: ["reason": reason])) ?? Data("{}".utf8)
        return allocator.buffer(bytes: json)
    }
}

/// An emulator's request logic; `Connection` is its per-connection state, used on one event loop only.
public protocol EmulatorLogic: Sendable {
    associatedtype Connection: AnyObject
    func makeConnection(hasClientCertificate: Bool) -> Connection
    func handle(_ request: EmulatorRequest, connection: Connection, control: ConnectionControl) -> EmulatorAction
    /// MAX_CONCURRENT_STREAMS in the server's first SETTINGS.
    var initialMaxConcurrentStreams: Int { get }
    /// The wait before each answer (the request is handled when it arrives; its answer is written after the wait).
    var responseDelay: ResponseDelay { get }
}

/// Collects one HTTP/2 stream's request and writes the logic's answer.
final class HTTP2EmulatorStreamHandler<Logic: EmulatorLogic>: ChannelInboundHandler, @unchecked Sendable {
    // @unchecked: lives on the stream channel's event loop (the connection's), as does `connection`.
    typealias InboundIn = HTTP2Frame.FramePayload
    typealias OutboundOut = HTTP2Frame.FramePayload

    let logic: Logic
    let connection: Logic.Connection
    let drain: EmulatorDrain
    let parent: Channel
    var headers: [(name: String, value: String)] = []
    var method = ""
    var path = ""
    var body: [UInt8] = []

    init(logic: Logic, connection: Logic.Connection, drain: EmulatorDrain, parent: Channel) {
        self.logic = logic
        self.connection = connection
        self.drain = drain
        self.parent = parent
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .headers(let h):
            for (name, value, _) in h.headers {
                switch name {
                case ":method": method = value
                case ":path": path = value
                case _ where name.hasPrefix(":"): break
                default: headers.append((name, value))
                }
            }
            if h.endStream { respond(context) }
        case .data(let d):
            if case .byteBuffer(var b) = d.data, let bytes = b.readBytes(length: b.readableBytes) { body += bytes }
            if d.endStream { respond(context) }
        default: break
        }
    }

    private func respond(_ context: ChannelHandlerContext) {
        let parent = self.parent
        let streamID = (try? context.channel.syncOptions?.getOption(HTTP2StreamChannelOptions.streamID)) ?? .rootStream
        // After a GOAWAY that named an earlier stream the last processed, this one is not processed (and the
        // client has closed it).
        if let last = drain.lastStreamID, streamID > last { return }
        drain.highestHandled = max(drain.highestHandled, streamID)
        let drainBound = NIOLoopBound(drain, eventLoop: context.eventLoop)
        var control = ConnectionControl { n in
            parent.eventLoop.execute {
                parent.writeAndFlush(
                    HTTP2Frame(
                        streamID: .rootStream,
                        payload: .settings(.settings([HTTP2Setting(parameter: .maxConcurrentStreams, value: n)]))
                    ),
                    promise: nil
                )
            }
        }
        control.startDrain = { reason in
            let drain = drainBound.value
            guard drain.startedBy == nil else { return }
            drain.startedBy = streamID
            drain.lastStreamID = max(streamID, drain.highestHandled)
            drain.reason = reason
        }
        let request = EmulatorRequest(method: method, path: path, headers: headers, body: body, isHTTP2: true)
        let action = logic.handle(request, connection: connection, control: control)
        if drain.startedBy == streamID, let last = drain.lastStreamID {
            let debug = EmulatorDrain.debugData(reason: drain.reason, allocator: parent.allocator)
            parent.writeAndFlush(
                HTTP2Frame(
                    streamID: .rootStream,
                    payload: .goAway(lastStreamID: last, errorCode: .noError, opaqueData: debug)
                ),
                promise: nil
            )
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            context.eventLoop.scheduleTask(in: EmulatorDrain.answerDelay) {
                let (handler, context) = bound.value
                handler.act(action, context)
                handler.drain.starterAnswered = true
                handler.drain.closeIfAnswered(parent)
            }
            return
        }
        guard let delay = logic.responseDelay.sample() else { return act(action, context) }
        drain.delayedAnswers += 1
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        context.eventLoop.scheduleTask(in: delay) {
            let (handler, context) = bound.value
            handler.act(action, context)
            handler.drain.delayedAnswers -= 1
            handler.drain.closeIfAnswered(parent)
        }
    }

    private func act(_ action: EmulatorAction, _ context: ChannelHandlerContext) {
        let parent = self.parent
        switch action {
        case .respond(let r):
            var h = HPACKHeaders([(":status", r.rawStatus ?? String(r.status))])
            for (n, v) in r.headers { h.add(name: n, value: v) }
            let ends = r.body.isEmpty || r.endsAfterInformational
            context.write(wrapOutboundOut(.headers(.init(headers: h, endStream: ends))), promise: nil)
            if r.endsAfterInformational {
                context.flush()
                return
            }
            if !r.body.isEmpty {
                context.write(
                    wrapOutboundOut(
                        .data(
                            .init(data: .byteBuffer(context.channel.allocator.buffer(bytes: r.body)), endStream: true)
                        )
                    ),
                    promise: nil
                )
            }
            context.flush()
        case .stall:
            break
        case .refuseStream:
            context.writeAndFlush(wrapOutboundOut(.rstStream(.refusedStream)), promise: nil)
        case .resetConnection:
            EmulatorSockets.reset(parent)
        case .goAway(let reason, let processed):
            let streamID =
                (try? context.channel.syncOptions?.getOption(HTTP2StreamChannelOptions.streamID)) ?? .rootStream
            // The last stream the server says it processed: the one before this (this request was not), or this one.
            let last = processed ? streamID : HTTP2StreamID(max(0, Int(streamID) - 2))
            let debug = EmulatorDrain.debugData(reason: reason, allocator: parent.allocator)
            parent.writeAndFlush(
                HTTP2Frame(
                    streamID: .rootStream,
                    payload: .goAway(lastStreamID: last, errorCode: .noError, opaqueData: debug)
                )
            )
            .whenComplete { _ in parent.eventLoop.scheduleTask(in: .milliseconds(50)) { parent.close(promise: nil) } }
        }
    }
}

/// Serves HTTP/1.1 requests with the same logic (the FCM emulator's Python and curl clients).
final class HTTP1EmulatorHandler<Logic: EmulatorLogic>: ChannelInboundHandler, @unchecked Sendable {
    // @unchecked: lives on its channel's event loop.
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let logic: Logic
    let connection: Logic.Connection
    var head: HTTPRequestHead?
    var body: [UInt8] = []

    init(logic: Logic, connection: Logic.Connection) {
        self.logic = logic
        self.connection = connection
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let h):
            head = h
            body = []
        case .body(var b):
            if let bytes = b.readBytes(length: b.readableBytes) { body += bytes }
        case .end:
            guard let head else { return }
            let request = EmulatorRequest(
                method: head.method.rawValue,
                path: head.uri,
                headers: head.headers.map { ($0.name.lowercased(), $0.value) },
                body: body,
                isHTTP2: false
            )
            let action = logic.handle(request, connection: connection, control: ConnectionControl { _ in })
            guard let delay = logic.responseDelay.sample() else { return act(action, head: head, context) }
            // Answers on one HTTP/1.1 connection go out in the order asked, whatever the jitter drew.
            let deadline = max(NIODeadline.now() + delay, lastDeadline)
            lastDeadline = deadline
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            context.eventLoop.scheduleTask(deadline: deadline) { bound.value.0.act(action, head: head, bound.value.1) }
        }
    }

    private var lastDeadline = NIODeadline.uptimeNanoseconds(0)

    private func act(_ action: EmulatorAction, head: HTTPRequestHead, _ context: ChannelHandlerContext) {
        switch action {
        case .respond(let r) where r.rawStatus != nil || r.endsAfterInformational:
            writeRaw(r, context)
        case .respond(let r):
            var h = HTTPHeaders(r.headers)
            h.replaceOrAdd(name: "content-length", value: String(r.body.count))
            if !head.isKeepAlive { h.replaceOrAdd(name: "connection", value: "close") }
            context.write(
                wrapOutboundOut(
                    .head(HTTPResponseHead(version: head.version, status: .init(statusCode: r.status), headers: h))
                ),
                promise: nil
            )
            if !r.body.isEmpty {
                context.write(
                    wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: r.body)))),
                    promise: nil
                )
            }
            let keepAlive = head.isKeepAlive
            let channel = context.channel
            context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in
                if !keepAlive { channel.close(promise: nil) }
            }
        case .stall: break
        case .resetConnection, .goAway, .refuseStream: EmulatorSockets.reset(context.channel)
        }
    }

    /// An answer HTTP/1.1's encoder refuses to make (a status that is not one, an informational answer with nothing
    /// after): its bytes written under the encoder, then the connection closed (nothing sane can follow it).
    private func writeRaw(_ r: EmulatorResponse, _ context: ChannelHandlerContext) {
        var text = "HTTP/1.1 \(r.rawStatus ?? String(r.status)) Hostile\r\n"
        for (name, value) in r.headers { text += "\(name): \(value)\r\n" }
        text += r.endsAfterInformational ? "\r\n" : "content-length: \(r.body.count)\r\n\r\n"
        var buffer = context.channel.allocator.buffer(string: text)
        if !r.endsAfterInformational { buffer.writeBytes(r.body) }
        let channel = context.channel
        guard let below = try? context.pipeline.syncOperations.context(handlerType: HTTPResponseEncoder.self) else {
            channel.close(promise: nil)
            return
        }
        below.writeAndFlush(NIOAny(buffer)).whenComplete { _ in channel.close(promise: nil) }
    }
}

enum EmulatorSockets {
    /// Closes with SO_LINGER 0, so that the peer sees a reset rather than an orderly close.
    static func reset(_ channel: Channel) {
        let f: EventLoopFuture<Void>
        if let socket = channel as? SocketOptionProvider {
            f = socket.setSoLinger(linger(l_onoff: 1, l_linger: 0))
        } else {
            f = channel.eventLoop.makeSucceededVoidFuture()
        }
        f.whenComplete { _ in channel.close(promise: nil) }
    }
}
