import NIOConcurrencyHelpers
import NIOCore
import NIOHPACK
import NIOHTTP2

/// The requests in flight on one HTTP/2 connection, by stream id, on the connection's own pipeline (after the
/// HTTP/2 handler): a request is a HEADERS frame (and a DATA frame with its body) written with the next odd stream
/// id, and its answer's frames are routed here to its ``ResponseCollector``. A request costs a table entry, not a
/// channel of its own: a stream channel per request, with its pipeline and handler, was about 30 % of a sending
/// client's CPU.
///
/// What the stream channels did is done here:
/// - the connection's receive window is given back once half of it is spent, by the HTTP/2 handler's own count
///   (its window events), and so is each stream's while its answer is read: counted here from the DATA that
///   reached the table, the window lost what the handler charged and dropped (DATA on a stream already reset), and
///   a service that sent a body after a reset wedged the connection for good (found by a hostile server);
/// - a stream the HTTP/2 handler closes (RST_STREAM, a stream error, GOAWAY above the last processed id) fails its
///   request with the reason;
/// - a request abandoned (its answer too large or malformed) resets its stream (RST_STREAM CANCEL);
/// - a request that times out fails at once, and its stream stays open ``lateAnswerGrace`` for its answer, then is
///   reset (one the HTTP/2 handler still holds for a free stream is dropped unsent then): reset at once,
///   a burst of timeouts (a service slow for a moment) is a burst of RST_STREAM, which a server may take for the
///   rapid-reset attack (CVE-2023-44487) and answer with GOAWAY, as one of the same HTTP/2 library does after 200 in
///   30 s;
/// - the resets it sends are held to a budget (``ResetBudget``, 100 in any 30 s): a stream past it is not reset but
///   dropped from the table, and the connection retires (``HTTP2ConnectionState/retire(reason:)``): it takes no more
///   requests (the pool opens another) and lets those in flight end. A service that stops answering for longer than
///   the grace (every stream in flight then times out) would otherwise be sent a reset for each, and a server that
///   closes the connection for them ends with it every request still awaiting its answer;
/// - a connection that takes no more requests (retired, or after the server's GOAWAY) closes once no stream in the
///   table awaits an answer: the streams left timed out, and end with it without a frame;
/// - a stream's place among the connection's streams in flight is given back when it leaves the table (answered,
///   reset, or closed with the connection), not when its request ends;
/// - frames on the connection itself (SETTINGS, GOAWAY, PING) go on to the handler after this one.
final class HTTP2StreamTable: ChannelDuplexHandler, RemovableChannelHandler, @unchecked Sendable {
    // @unchecked: lives on its channel's event loop; requests reach it through `open`, called on that loop.
    typealias InboundIn = HTTP2Frame
    typealias InboundOut = HTTP2Frame
    typealias OutboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    /// HTTP/2's initial window (RFC 9113, 6.9.2), which neither side changes here: the connection's and each
    /// stream's receive window.
    static let window = 65_535

    /// How long a stream whose request timed out stays open for its answer before it is reset.
    static let lateAnswerGrace: TimeAmount = .seconds(5)

    /// Why a connection whose reset budget is spent retires (its pool logs it as the reason it was replaced).
    static let resetBudgetSpent = "the client's budget of stream resets is spent"

    let connectionState: NIOLockedValueBox<HTTP2ConnectionState>
    private var context: ChannelHandlerContext?
    private var streams: [HTTP2StreamID: Entry] = [:]
    /// The id the next request takes (odd: the client's).
    var nextStreamID = 1
    private var closed = false
    private var resets: ResetBudget
    /// The connection takes no more requests (retired, or the server sent GOAWAY): it closes once no stream awaits
    /// an answer.
    private var draining = false

    final class Entry {
        let collector: ResponseCollector
        var timer: Scheduled<Void>?
        init(_ collector: ResponseCollector) { self.collector = collector }
    }

    init(connectionState: NIOLockedValueBox<HTTP2ConnectionState>, resets: ResetBudget = ResetBudget()) {
        self.connectionState = connectionState
        self.resets = resets
    }

    /// Streams in the table now (answers awaited, and timed-out ones waiting out their grace).
    var count: Int { streams.count }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }

    func handlerRemoved(context: ChannelHandlerContext) {
        failAll()
        self.context = nil
    }

    /// Sends one request that ``HTTP2ConnectionState/admit()`` let through; `promise` gets its answer. On the
    /// channel's event loop.
    func open(
        headers: HPACKHeaders,
        body: ByteBuffer?,
        timeout: TimeAmount,
        promise: EventLoopPromise<H2Response>
    ) {
        // A request admitted before the connection began to drain is not sent on it (another connection takes it).
        guard let context, !closed, !draining else {
            streamGone()
            promise.fail(notSentError())
            return
        }
        guard nextStreamID <= Int(Int32.max) else {
            // Every stream id of the connection is spent: no request goes on it, and the pool opens another. It
            // drains like one the server sent GOAWAY (the pool no longer closes it).
            connectionState.withLockedValue { $0.goAwayReceived(lastStreamID: Int(Int32.max), reason: nil) }
            streamGone()
            promise.fail(notSentError())
            draining = true
            closeIfDrainedAndSpent()
            return
        }
        let id = HTTP2StreamID(nextStreamID)
        nextStreamID += 2
        let entry = Entry(ResponseCollector(promise: promise))
        streams[id] = entry
        entry.timer = context.eventLoop.assumeIsolated().scheduleTask(in: timeout) { self.timedOut(id) }
        let hasBody = body.map { $0.readableBytes > 0 } ?? false
        let written = context.eventLoop.makePromise(of: Void.self)
        context.write(
            wrapOutboundOut(HTTP2Frame(streamID: id, payload: .headers(.init(headers: headers, endStream: !hasBody)))),
            promise: written
        )
        if let body, hasBody {
            context.write(
                wrapOutboundOut(
                    HTTP2Frame(streamID: id, payload: .data(.init(data: .byteBuffer(body), endStream: true)))
                ),
                promise: nil
            )
        }
        context.flush()
        written.futureResult.assumeIsolated().whenFailure { _ in
            // The HTTP/2 handler would not open the stream (the connection closed or is going away): nothing was
            // sent.
            self.end(id, failing: self.notSentError(), reset: false)
        }
    }

    /// The request timed out: it fails now, and its stream waits out its grace for the answer.
    private func timedOut(_ id: HTTP2StreamID) {
        guard let entry = streams[id], let context else { return }
        entry.collector.fail(.timedOut)
        entry.timer = context.eventLoop.assumeIsolated().scheduleTask(in: Self.lateAnswerGrace) {
            self.end(id, failing: .timedOut, reset: true)
        }
        closeIfDrainedAndSpent()
    }

    /// Why a request was not sent: the server's GOAWAY if one came, or the client's retirement.
    private func notSentError() -> TransportError {
        let (goAway, retired) = connectionState.withLockedValue { ($0.goAway, $0.retiredBecause) }
        if let goAway { return .goingAway(reason: goAway.reason, processed: false) }
        if let retired { return .goingAway(reason: retired, processed: false) }
        return .notSent
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        guard frame.streamID != .rootStream else {
            context.fireChannelRead(data)
            if case .goAway = frame.payload {
                draining = true
                closeIfDrainedAndSpent()
            }
            return
        }
        // Nothing is written while a frame is read but its stream's reset, once the frame is taken: a write reaches
        // the HTTP/2 handler, which then tells the events it holds, the close of this frame's stream among them
        // (the stream closed when its END_STREAM was parsed). A window update written here first had that close
        // overtake the answer it ended: 187 of 100,000 FCM answers failed as "no final status".
        guard let entry = streams[frame.streamID] else { return }
        switch entry.collector.read(frame.payload) {
        case .reading:
            break
        case .ended:
            if entry.collector.answered { connectionState.withLockedValue { $0.answerReceived() } }
            remove(frame.streamID)
        case .abandoned(let error):
            // A frame that ended the stream leaves nothing to reset (the HTTP/2 handler closed it): no reset is
            // sent, and none is counted against the budget.
            end(frame.streamID, failing: error, reset: !frame.payload.endsStream)
        case .reset(let code):
            end(frame.streamID, failing: closureError(code, frame.streamID), reset: false)
        }
    }

    /// A receive window the HTTP/2 handler says is down to `size`: given back to its full size once half is spent,
    /// the connection's always, a stream's while its answer is being read.
    private func windowChanged(_ stream: HTTP2StreamID, size: Int, context: ChannelHandlerContext) {
        guard size <= Self.window / 2 else { return }
        if stream != .rootStream {
            guard let entry = streams[stream], !entry.collector.done else { return }
        }
        context.write(
            wrapOutboundOut(
                HTTP2Frame(streamID: stream, payload: .windowUpdate(windowSizeIncrement: Self.window - size))
            ),
            promise: nil
        )
        context.flush()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let window = event as? NIOHTTP2WindowUpdatedEvent, let size = window.inboundWindowSize {
            windowChanged(window.streamID, size: size, context: context)
        }
        if let closed = event as? StreamClosedEvent, streams[closed.streamID] != nil {
            if let reason = closed.reason {
                // Closed by the HTTP/2 handler before its answer ended: reset by the server, a stream error, or
                // GOAWAY.
                end(closed.streamID, failing: closureError(reason, closed.streamID), reset: false)
            } else {
                // Closed cleanly, its last frame still on its way here (a write made while a frame was read lets
                // the handler tell its events early): the frame ends it. A stream still here once this turn of the
                // loop is over ended without a final answer.
                let id = closed.streamID
                context.eventLoop.assumeIsolated().execute {
                    self.end(id, failing: .malformedResponse("no final status"), reset: false)
                }
            }
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        failAll()
        context.fireChannelInactive()
    }

    private func failAll() {
        closed = true
        let open = streams
        streams.removeAll()
        for (id, entry) in open {
            entry.timer?.cancel()
            entry.collector.fail(goAwayError(id) ?? .connectionClosed)
            streamGone()
        }
    }

    /// Ends a stream still in the table: fails its request (if it has not ended), and resets the stream if asked and
    /// the budget allows; past the budget the stream is dropped unreset, and the connection retires.
    private func end(_ id: HTTP2StreamID, failing error: TransportError, reset: Bool) {
        guard let entry = streams[id] else { return }
        entry.collector.fail(error)
        if reset, let context {
            if resets.take(now: context.eventLoop.now) {
                context.writeAndFlush(
                    wrapOutboundOut(HTTP2Frame(streamID: id, payload: .rstStream(.cancel))),
                    promise: nil
                )
            } else if !draining {
                draining = true
                connectionState.withLockedValue { $0.retire(reason: Self.resetBudgetSpent) }
            }
        }
        remove(id)
    }

    @discardableResult
    private func remove(_ id: HTTP2StreamID) -> Entry? {
        guard let entry = streams.removeValue(forKey: id) else { return nil }
        entry.timer?.cancel()
        streamGone()
        closeIfDrainedAndSpent()
        return entry
    }

    /// A draining connection closes once no stream in the table awaits an answer (those left timed out: they end
    /// with it, without a reset).
    private func closeIfDrainedAndSpent() {
        guard draining, !closed, let context, streams.values.allSatisfy({ $0.collector.done }) else { return }
        context.close(promise: nil)
    }

    /// A stream's place among those in flight is free again.
    private func streamGone() {
        _ = connectionState.withLockedValue { $0.streamEnded() }.orAssert()
    }

    /// After GOAWAY, a stream above the server's last processed id was not processed, whatever closed it.
    private func goAwayError(_ id: HTTP2StreamID) -> TransportError? {
        guard let g = connectionState.withLockedValue({ $0.goAway }) else { return nil }
        return .goingAway(reason: g.reason, processed: Int(id) <= g.lastStreamID)
    }

    private func closureError(_ code: HTTP2ErrorCode, _ id: HTTP2StreamID) -> TransportError {
        if code == .refusedStream { return .streamRefused }
        return goAwayError(id) ?? .streamReset(code: Int(code.networkCode))
    }
}

extension HTTP2Frame.FramePayload {
    /// The frame carries END_STREAM.
    var endsStream: Bool {
        switch self {
        case .headers(let h): h.endStream
        case .data(let d): d.endStream
        default: false
        }
    }
}

/// The resets a connection may send: at most `limit` in any `window`. Servers take a stream of resets for the
/// rapid-reset attack (CVE-2023-44487); one built on the same HTTP/2 library as this client sends GOAWAY after 200
/// in 30 s. The budget is half that.
struct ResetBudget {
    let limit: Int
    let window: TimeAmount
    /// The times of the last `limit` resets, oldest at `oldest` once full.
    private var times: [NIODeadline] = []
    private var oldest = 0

    init(limit: Int = 100, window: TimeAmount = .seconds(30)) {
        precondition(limit > 0)
        self.limit = limit
        self.window = window
    }

    /// Takes one reset at `now` if fewer than `limit` were taken in the window before it.
    mutating func take(now: NIODeadline) -> Bool {
        guard times.count == limit else {
            times.append(now)
            return true
        }
        guard now - times[oldest] >= window else { return false }
        times[oldest] = now
        oldest = (oldest + 1) % limit
        return true
    }
}

/// Collects one stream's response, frame by frame; says when the stream has ended, or why the request is abandoned.
/// A request that already failed (it timed out) still reads its late answer to its end, so that its stream leaves
/// the table when the server ends it.
final class ResponseCollector {
    let promise: EventLoopPromise<H2Response>
    var status = 0
    var headers = HPACKHeaders()
    var body: ByteBuffer?
    /// The promise has its result.
    var done = false
    /// The result is an answer (a final status).
    var answered = false
    /// Informational (1xx) answers read so far, and the most taken before the final one.
    var informational = 0
    static let maxInformational = 8

    init(promise: EventLoopPromise<H2Response>) { self.promise = promise }

    enum Step {
        case reading
        /// The stream has ended (the promise has its answer, or had its failure).
        case ended
        /// The answer cannot be taken: the request fails with this and its stream is reset.
        case abandoned(TransportError)
        /// The server reset the stream with this code.
        case reset(HTTP2ErrorCode)
    }

    func read(_ payload: HTTP2Frame.FramePayload) -> Step {
        if done {
            // A late answer to a request that failed: only its end matters.
            switch payload {
            case .headers(let h) where h.endStream: return .ended
            case .data(let d) where d.endStream: return .ended
            case .rstStream(let code): return .reset(code)
            default: return .reading
            }
        }
        switch payload {
        case .headers(let h):
            if let s = h.headers.first(name: ":status") {
                // A provider's answer is input: a status that is not a three-digit HTTP status ends the request.
                guard s.utf8.count == 3, let code = Int(s), (100...599).contains(code) else {
                    return .abandoned(.malformedResponse(":status \(s.prefix(16))"))
                }
                if code < 200 {
                    // Informational answers carry nothing for us: a service sending them without end held the
                    // stream, and a core, until the timeout (found by a hostile server).
                    informational += 1
                    if informational > Self.maxInformational {
                        return .abandoned(
                            .malformedResponse("more than \(Self.maxInformational) informational answers")
                        )
                    }
                }
                if code >= 200 || status == 0 { status = code }
                headers = h.headers
            } else if status == 0 {
                return .abandoned(.malformedResponse("headers without :status"))
            } else {
                headers.add(contentsOf: h.headers)  // trailers
            }
            if h.endStream { return complete() }
        case .data(let d):
            if case .byteBuffer(var b) = d.data {
                // Bounded: APNs and FCM answer in a few hundred bytes; a body past the limit is not read further.
                guard (body?.readableBytes ?? 0) + b.readableBytes <= HTTP2ClientConnection.maxResponseBytes else {
                    body = nil
                    return .abandoned(.responseTooLarge(limit: HTTP2ClientConnection.maxResponseBytes))
                }
                if body == nil { body = b } else { body!.writeBuffer(&b) }
            }
            if d.endStream { return complete() }
        case .rstStream(let code):
            return .reset(code)
        default:
            break
        }
        return .reading
    }

    private func complete() -> Step {
        done = true
        guard (200...599).contains(status) else {
            // Ended after an informational answer, or without one.
            promise.fail(TransportError.malformedResponse("no final status"))
            return .ended
        }
        answered = true
        promise.succeed(H2Response(status: status, headers: headers, body: body))
        return .ended
    }

    func fail(_ error: TransportError) {
        guard !done else { return }
        done = true
        body = nil
        promise.fail(error)
    }
}
