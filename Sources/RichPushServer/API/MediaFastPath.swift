import HTTPTypes
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import RichPushCore

#if canImport(Glibc)
import Glibc
#endif

/// Answers `GET` and `HEAD /media/…` on the connection's event loop before the request reaches the router: the
/// file is written with `sendfile` (no copy through the process; the kernel's page cache keeps hot files in
/// memory), with no task per request. Everything else passes through untouched. A media request pipelined behind a
/// routed one waits, with what follows it, until the routed answer has ended, and is then answered here too, so
/// answers keep their order and no media answer is ever read into memory; while anything waits the connection reads
/// no more, so what waits is bounded by one read.
///
/// Added as one of the server's extra handlers (which sit after the HTTP/1 to HTTP-types codec), it moves
/// itself in front of that codec, where a body can be a file region.
///
/// Given `idle`, it also closes the connection when idle, in place of the HTTP layer's timer, which sits after the
/// codec and never sees a media request: that timer closed a connection busy with media alone `idle` after its
/// last routed request, between two answers or in the middle of one. Here every request and every answer counts.
public final class MediaFastPath: ChannelInboundHandler, RemovableChannelHandler {
    public typealias InboundIn = HTTPRequestPart
    public typealias InboundOut = HTTPRequestPart

    let store: MediaStore
    let status: Status
    let logger: Logger
    let idle: TimeAmount?
    /// Where a close by the idle or stall rule is counted (nil: not counted).
    let connections: ConnectionLimits?

    public init(
        store: MediaStore,
        status: Status = Status(),
        idle: TimeAmount? = nil,
        connections: ConnectionLimits? = nil,
        logger: Logger = Logger(label: "richpush.media")
    ) {
        self.store = store
        self.status = status
        self.idle = idle
        self.connections = connections
        self.logger = logger
    }

    public func handlerAdded(context: ChannelHandlerContext) {
        let pipeline = context.pipeline.syncOperations
        do {
            let codec = try pipeline.handler(type: HTTP1ToHTTPServerCodec.self)
            try pipeline.addHandler(
                MediaFileAnswerer(store: store, idle: idle, connections: connections),
                position: .before(codec)
            )
            status.count(installed: true)
        } catch {
            // The connection is still closed when idle, by the plainer rule: nothing read or written for that long.
            if let idle {
                try? pipeline.addHandlers(
                    [IdleStateHandler(allTimeout: idle), IdleCloser()],
                    position: .after(context.handler)
                )
            }
            // The server's pipeline is not the one this was written for (a new Hummingbird, another codec): media
            // is still served, through the router, but slower. Said once, loudly, and counted for the tests.
            if status.count(installed: false) {
                logger.error(
                    "media fast path not in place: the connection has no HTTP/1 codec to go in front of; media goes through the router",
                    metadata: ["error": .string(String(describing: error))]
                )
            }
        }
        pipeline.removeHandler(context: context, promise: nil)
    }

    /// How many connections got the fast path, and how many did not.
    public final class Status: Sendable {
        private let counts = NIOLockedValueBox((installed: 0, missed: 0))

        public init() {}

        public var installed: Int { counts.withLockedValue { $0.installed } }
        public var missed: Int { counts.withLockedValue { $0.missed } }

        /// Counts one connection; true for the first miss.
        @discardableResult
        func count(installed: Bool) -> Bool {
            counts.withLockedValue {
                if installed { $0.installed += 1 } else { $0.missed += 1 }
                return !installed && $0.missed == 1
            }
        }
    }

    public func channelRead(context: ChannelHandlerContext, data: NIOAny) { context.fireChannelRead(data) }

    /// Closes its connection when the idle handler before it says so (only where the fast path is not in place).
    final class IdleCloser: ChannelInboundHandler, RemovableChannelHandler {
        typealias InboundIn = HTTPRequestPart
        typealias InboundOut = HTTPRequestPart
        func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
            if event is IdleStateHandler.IdleStateEvent {
                context.close(promise: nil)
            } else {
                context.fireUserInboundEventTriggered(event)
            }
        }
    }
}

/// Open descriptors of hot files for the connections of one event loop, used only on that loop (no lock): an
/// answer borrows one and gives it back when written; a file pushed out is closed when its last answer is done.
final class LoopFiles {
    final class File {
        let handle: NIOFileHandle
        let size: Int
        let type: RichPushCore.MediaType
        var users = 0
        var evicted = false
        var lastUse: UInt64 = 0
        /// The headers of the plain answer (`200`, the whole file, kept alive), made on first use: most requests
        /// are that one, and their headers are then one value shared by every answer.
        var plainHeaders: HTTPHeaders?
        init(handle: NIOFileHandle, size: Int, type: RichPushCore.MediaType) {
            self.handle = handle
            self.size = size
            self.type = type
        }
    }
    var files: [String: File] = [:]
    var clock: UInt64 = 0
    let capacity = 64

    /// One table per event loop.
    static func forLoop(_ loop: EventLoop) -> LoopFiles {
        let key = ObjectIdentifier(loop)
        if let t = tables.withLockedValue({ $0[key] }) { return t }
        let t = LoopFiles()
        return tables.withLockedValue { all in
            if let existing = all[key] { return existing }
            all[key] = t
            return t
        }
    }
    nonisolated(unsafe) static let tables = NIOLockedValueBox<[ObjectIdentifier: LoopFiles]>([:])

    func acquire(_ name: String, store: MediaStore) -> File? {
        clock += 1
        if let f = files[name] {
            f.users += 1
            f.lastUse = clock
            return f
        }
        // A file that cannot be opened (swept meanwhile) is not answered here: the request goes on to the router.
        guard let (path, size, type) = store.file(name), let handle = try? NIOFileHandle(_deprecatedPath: path) else {
            return nil
        }
        let f = File(handle: handle, size: size, type: type)
        f.users = 1
        f.lastUse = clock
        files[name] = f
        while files.count > capacity, let victim = files.min(by: { $0.value.lastUse < $1.value.lastUse }) {
            files[victim.key] = nil
            victim.value.evicted = true
            // Closing a read-only descriptor has nothing to report.
            if victim.value.users == 0 { try? victim.value.handle.close() }
        }
        return f
    }

    func release(_ f: File) {
        f.users -= 1
        // Closing a read-only descriptor has nothing to report.
        if f.evicted && f.users == 0 { try? f.handle.close() }
    }
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
    /// The media request being read: its head and the file name from its path.
    var intercepted: (head: HTTPRequestHead, name: String)?
    /// Parts read but held back, in order: from a media request that came while a routed answer was pending
    /// (or a file was being fetched from the shared store) to the last part read. Bounded: while it holds
    /// anything, reads are held too.
    var waiting: [HTTPServerRequestPart] = []
    /// The codec's error that came while requests read before it still waited: told once they have gone on, so
    /// that they are answered before the refusal (it overtook them, and they were dropped unanswered).
    var heldError: (any Error)?
    /// A media file being fetched from the shared store to this node's disk.
    var fetching = false
    /// A read asked for while parts waited, to pass on once they are gone.
    var readHeld = false
    /// A request that stops the HTTP/1 parser came (an upgrade or CONNECT: the parser reads nothing more of the
    /// connection as HTTP): nothing more is read, and the connection closes once its answer has ended. Read on, the
    /// bytes after it piled up unparsed in the decoder's buffer with no bound (one connection streaming junk after
    /// `Connection: Upgrade` took a node from 73 MB to 2.6 GB in 10 s).
    var parserStopped = false
    /// This loop's open files (a channel stays on one loop).
    var table: LoopFiles?
    /// The channel went unwritable while only media answers were queued, and the handlers after this one were not
    /// told: a file region larger than the write watermark makes every such answer flip the channel's writability
    /// and back, which they do not need to hear. They are told before a routed request reaches them.
    var unwritableUntold = false
    /// A part was passed on to the handlers after this one since they last heard a read end.
    var passedOn = false
    /// The connection's idle rule (nil: none here).
    let idle: TimeAmount?
    /// The last part read or answer ended.
    var lastActive = NIODeadline.now()
    /// A request's head was read and its end not yet.
    var readingRequest = false
    /// Media answers written whose last byte has not left yet.
    var mediaAnswering = 0
    /// What waited to be written at the last look while a media answer was under way, and what the client had
    /// acknowledged then by the kernel's count (nil: not looked yet).
    var bufferedAtLastLook: Int?
    var acknowledgedAtLastLook: UInt64?
    /// The last read from the socket, whatever it brought (a part or a piece of one): the kernel holds data the
    /// loop has not read when data arrived after it.
    var lastRead = NIODeadline.now()
    var idleCheck: Scheduled<Void>?
    /// Until when an idle connection with data waiting unread is looked at again before it is closed (nil: not
    /// being looked at again).
    var idleGraceUntil: NIODeadline?
    /// When the handlers after this one held back their reads (a routed body's reader was late).
    var demand = ReadDemand()
    /// Where a close by a rule is counted.
    let connections: ConnectionLimits?

    init(store: MediaStore, idle: TimeAmount? = nil, connections: ConnectionLimits? = nil) {
        self.store = store
        self.idle = idle
        self.connections = connections
    }

    func handlerAdded(context: ChannelHandlerContext) {
        table = LoopFiles.forLoop(context.eventLoop)
        if let idle { scheduleIdleCheck(context: context, at: .now() + idle) }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        idleCheck?.cancel()
        idleCheck = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        idleCheck?.cancel()
        idleCheck = nil
        context.fireChannelInactive()
    }

    private func scheduleIdleCheck(context: ChannelHandlerContext, at deadline: NIODeadline) {
        idleCheck = context.eventLoop.assumeIsolated().scheduleTask(deadline: deadline) {
            self.idleCheck = nil
            self.checkIdle(context: context)
        }
    }

    /// The connection is closed once nothing was read and no answer ended for `idle`, unless an answer is under
    /// way: a routed one is watched by the connection guard; a media one must make progress, what waits to be
    /// written going down from one look to the next (a slow phone downloading a long video keeps its connection, a
    /// client that stopped reading does not).
    private func checkIdle(context: ChannelHandlerContext) {
        guard let idle, context.channel.isActive else { return }
        let now = NIODeadline.now()
        let answering = !readingRequest && (routed > 0 || mediaAnswering > 0 || fetching)
        // The kernel read once for the look; the server's wait asked at every look, so that each counts from the
        // last (``ReadDemand``).
        let kernel = SocketProgress.read(context.channel)
        let servers = demand.serversWait(
            kernel,
            lastRead: lastRead,
            answerPending: readingRequest && routed > 0,
            interval: idle,
            now: now
        )
        guard answering else {
            bufferedAtLastLook = nil
            acknowledgedAtLastLook = nil
            guard now >= lastActive + idle else {
                idleGraceUntil = nil
                return scheduleIdleCheck(context: context, at: lastActive + idle)
            }
            // A routed body that waits unread because the handlers after this one did not ask for it (its reader
            // was late) is the server's wait, not the client's.
            if servers {
                idleGraceUntil = nil
                return scheduleIdleCheck(context: context, at: now + idle)
            }
            let unread = kernel?.unread(since: lastRead, now: now) == true
            // Data that arrived after the loop's last read waits unread (the loop was busy): a request, most
            // likely. Looked at again once the loop has had time to read it, for one more idle time at most from
            // this look (a look that itself ran late, on a loop busy past the idle time, had no grace at all when
            // it was counted from the last activity, and a client asking every 100 ms was reset).
            let until = idleGraceUntil ?? now + idle
            if now < until, unread {
                idleGraceUntil = until
                return scheduleIdleCheck(context: context, at: now + SocketProgress.lookAgain(idle))
            }
            connections?.closed(by: .idle)
            return context.close(promise: nil)
        }
        if mediaAnswering > 0, routed == 0, !fetching {
            let buffered = (try? context.channel.syncOptions?.getOption(.bufferedWritableBytes)) ?? 0
            // The kernel's count of what the client took: it moves even when the loop has not yet heard that the
            // socket can take more.
            let acknowledged = kernel?.bytesAcknowledged
            if let before = bufferedAtLastLook, buffered >= before, now >= lastActive + idle,
                acknowledged == nil || acknowledged == acknowledgedAtLastLook
            {
                connections?.closed(by: .stalled)
                return ConnectionGuard.abort(context.channel)
            }
            bufferedAtLastLook = buffered
            acknowledgedAtLastLook = acknowledged
        } else {
            bufferedAtLastLook = nil
            acknowledgedAtLastLook = nil
        }
        scheduleIdleCheck(context: context, at: now + idle)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        if idle != nil {
            switch part {
            case .head:
                readingRequest = true
                lastActive = .now()
                demand.requestBegan()
            case .end:
                readingRequest = false
                lastActive = .now()
            case .body:
                // A routed request's body is timed by the connection guard; a media request's body, which nothing
                // reads, does not keep its connection (a GET declaring a megabyte sent a byte every 2 s was kept).
                if intercepted == nil { lastActive = .now() }
            }
        }
        if fetching || !waiting.isEmpty {
            waiting.append(part)
            return
        }
        take(context: context, part)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if fetching || !waiting.isEmpty {
            if heldError == nil { heldError = error }
            return
        }
        context.fireErrorCaught(error)
    }

    /// One part, in order, with nothing waiting before it.
    private func take(context: ChannelHandlerContext, _ part: HTTPServerRequestPart) {
        switch part {
        case .head(let head):
            if Self.stopsTheParser(head) { parserStopped = true }
            if !parserStopped, let name = Self.mediaRequest(head) {
                if routed > 0 {
                    // Its answer goes after the pending ones: it waits, and so does everything after it.
                    waiting.append(part)
                    return
                }
                intercepted = (head, name)
                return
            }
            routed += 1
            if unwritableUntold {
                // The router's answer must see the channel as it is, so that it waits for it to drain.
                unwritableUntold = false
                context.fireChannelWritabilityChanged()
            }
            passOn(context: context, part)
        case .body:
            if intercepted == nil { passOn(context: context, part) }
        case .end:
            guard let (head, name) = intercepted else { return passOn(context: context, part) }
            intercepted = nil
            if store.shared != nil, MediaStore.parse(name) != nil, store.file(name) == nil {
                // Stored by another node: fetched to this node's disk (which may take a while), then answered here
                // from the file like any other; what comes after it waits.
                fetching = true
                let fetched = context.eventLoop.makePromise(of: MediaStore.Lookup.self)
                let client = context.channel.remoteAddress?.ipAddress
                fetched.completeWithTask { [store] in await store.lookUp(name, client: client) }
                fetched.futureResult.assumeIsolated().whenComplete { result in
                    self.fetching = false
                    switch result {
                    case .success(.limited(let after)):
                        self.refuse(context: context, head, status: .tooManyRequests, retryAfter: after)
                    case .success(.busy):
                        self.refuse(context: context, head, status: .serviceUnavailable, retryAfter: 1)
                    default:
                        self.answer(context: context, head, name: name)
                    }
                    self.drain(context: context)
                }
                return
            }
            answer(context: context, head, name: name)
        }
    }

    /// A part of a routed request, to the handlers after this one.
    private func passOn(context: ChannelHandlerContext, _ part: HTTPServerRequestPart) {
        passedOn = true
        context.fireChannelRead(wrapInboundOut(part))
    }

    /// The end of a read reaches the handlers after this one only when something was passed on to them: a read of
    /// media requests alone has nothing for them.
    func channelReadComplete(context: ChannelHandlerContext) {
        if idle != nil {
            lastRead = .now()
            demand.readEnded(at: lastRead)
        }
        endOfRead(context: context)
    }

    private func endOfRead(context: ChannelHandlerContext) {
        guard passedOn else { return }
        passedOn = false
        context.fireChannelReadComplete()
    }

    /// Takes the waiting parts in order until a media request must wait again for a routed answer (or a fetch);
    /// then, with nothing left waiting, passes on a read that was held.
    private func drain(context: ChannelHandlerContext) {
        var took = false
        while !fetching, let first = waiting.first {
            if case .head(let head) = first, routed > 0, Self.mediaRequest(head) != nil { break }
            waiting.removeFirst()
            take(context: context, first)
            took = true
        }
        // Outside a read, the router's side takes what was passed on only at the end of one: say it ended (when
        // anything was passed on).
        if took { endOfRead(context: context) }
        if waiting.isEmpty, !fetching, let error = heldError {
            heldError = nil
            context.fireErrorCaught(error)
        }
        if waiting.isEmpty, !fetching, readHeld, !parserStopped {
            readHeld = false
            context.read()
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable, readHeld, waiting.isEmpty, !fetching, !parserStopped {
            readHeld = false
            context.read()
        }
        if context.channel.isWritable {
            // The flip back of one the handlers after this were not told of: nothing to tell.
            if unwritableUntold {
                unwritableUntold = false
                return
            }
        } else if routed == 0 {
            // Only media answers are queued: the router has nothing to hold back.
            unwritableUntold = true
            return
        }
        context.fireChannelWritabilityChanged()
    }

    /// Nothing more is read while parts wait, a file is fetched, or the channel cannot take more writes: a client
    /// that pipelines media requests and reads none of the answers would otherwise have every request it sends
    /// read and answered into the channel's queue, a few hundred bytes each, for as long as the connection lives.
    func read(context: ChannelHandlerContext) {
        if idle != nil { demand.asked() }
        if fetching || !waiting.isEmpty || !context.channel.isWritable || parserStopped {
            readHeld = true
        } else {
            context.read()
        }
    }

    /// Whether the HTTP/1 parser stops after this request (and reads nothing more as HTTP): CONNECT, or a request
    /// that names an `Upgrade` (it stops when `Connection` names it too; any `Upgrade` is taken as such here, a
    /// request that asked to upgrade being answered and closed either way).
    static func stopsTheParser(_ head: HTTPRequestHead) -> Bool {
        head.method == .CONNECT || head.headers.contains(name: "upgrade")
    }

    /// The file name of a media GET or HEAD; nil for any other request.
    static func mediaRequest(_ head: HTTPRequestHead) -> String? {
        head.method == .GET || head.method == .HEAD ? mediaName(head.uri) : nil
    }

    /// The file name of a `/media/<name>[?query]` target, read byte by byte (the target is ASCII on the wire).
    static func mediaName(_ uri: String) -> String? {
        let bytes = uri.utf8
        let prefix = "/media/".utf8
        guard bytes.count > prefix.count, bytes.starts(with: prefix) else { return nil }
        let start = bytes.index(bytes.startIndex, offsetBy: prefix.count)
        let end = bytes[start...].firstIndex(of: UInt8(ascii: "?")) ?? bytes.endIndex
        return String(uri[start..<end])
    }

    /// The request's headers an answer depends on (a condition or a range); none for most requests.
    static func conditions(_ headers: HTTPHeaders) -> HTTPFields {
        var fields = HTTPFields()
        for (name, field) in [("if-none-match", HTTPField.Name.ifNoneMatch), ("range", .range), ("if-range", .ifRange)]
        {
            if let v = headers.first(name: name) { fields[field] = v }
        }
        return fields
    }

    /// The plain answer's headers, made once per file.
    static func plainHeaders(name: String, file: LoopFiles.File) -> HTTPHeaders {
        let (answer, _) = MediaController.mediaAnswer(name: name, type: file.type, size: file.size, headers: [:])
        return HTTPHeaders(answer.headerFields.map { ($0.name.rawName, $0.value) })
    }

    /// A media request not looked up now (its client over its rate, or every lookup slot taken): the status and
    /// when to ask again, never a 404 (the file may well exist).
    func refuse(context: ChannelHandlerContext, _ r: HTTPRequestHead, status: HTTPResponseStatus, retryAfter: Int) {
        let code = status == .tooManyRequests ? "rate-limited" : "busy"
        let body = ByteBuffer(
            bytes: (["error": ["code": .string(code), "message": "media lookups are limited: ask again later"]]
                as JSONValue).serialized()
        )
        var headers = HTTPHeaders([
            ("content-type", "application/json"), ("content-length", String(body.readableBytes)),
            ("retry-after", String(retryAfter)), ("x-content-type-options", "nosniff"),
        ])
        if !r.isKeepAlive { headers.replaceOrAdd(name: "connection", value: "close") }
        context.write(
            wrapOutboundOut(.head(HTTPResponseHead(version: r.version, status: status, headers: headers))),
            promise: nil
        )
        if r.method == .GET { context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil) }
        let keepAlive = r.isKeepAlive
        mediaAnswering += 1
        context.writeAndFlush(wrapOutboundOut(.end(nil))).assumeIsolated().whenComplete {
            [channel = context.channel] _ in
            self.answerEnded()
            if !keepAlive { channel.close(promise: nil) }
        }
        if keepAlive { read(context: context) }
    }

    func answer(context: ChannelHandlerContext, _ r: HTTPRequestHead, name: String) {
        let table = self.table ?? LoopFiles.forLoop(context.eventLoop)
        let keepAlive = r.isKeepAlive
        let file = table.acquire(name, store: store)
        let cork = ChannelOptions.Types.SocketOption(
            level: SocketOptionLevel(IPPROTO_TCP),
            name: SocketOptionName(TCP_CORK)
        )
        var status = HTTPResponseStatus.ok
        var headers: HTTPHeaders
        var body: IOData?
        let conditions = Self.conditions(r.headers)
        if let file, conditions.isEmpty {
            // The common answer, the whole file: its headers are made once.
            if let h = file.plainHeaders {
                headers = h
            } else {
                headers = Self.plainHeaders(name: name, file: file)
                file.plainHeaders = headers
            }
            if r.method == .GET, file.size > 0 {
                body = .fileRegion(FileRegion(fileHandle: file.handle, readerIndex: 0, endIndex: file.size))
            }
        } else {
            let response: HTTPResponse
            if let file {
                let (answer, range) = MediaController.mediaAnswer(
                    name: name,
                    type: file.type,
                    size: file.size,
                    headers: conditions
                )
                response = answer
                if let range, r.method == .GET {
                    body = .fileRegion(
                        FileRegion(
                            fileHandle: file.handle,
                            readerIndex: range.lowerBound,
                            endIndex: range.upperBound + 1
                        )
                    )
                }
            } else {
                let (answer, buffer) = MediaController.notFound(head: r.method == .HEAD)
                response = answer
                body = buffer.map { .byteBuffer($0) }
            }
            status = .init(statusCode: response.status.code)
            headers = HTTPHeaders(response.headerFields.map { ($0.name.rawName, $0.value) })
        }
        if !keepAlive { headers.replaceOrAdd(name: "connection", value: "close") }
        // Corked, the head and the start of the file leave in full packets together (as a web server's nopush does).
        let corked: Bool
        if case .fileRegion = body {
            // Corking only batches the head with the file; without it the answer is the same, in two packets.
            corked = (try? context.channel.syncOptions?.setOption(cork, value: 1)) != nil
        } else {
            corked = false
        }
        // Through the response encoder, which pairs each answer with its request (it leaves out the body of an
        // answer to HEAD).
        context.write(
            wrapOutboundOut(.head(HTTPResponseHead(version: r.version, status: status, headers: headers))),
            promise: nil
        )
        if let body { context.write(wrapOutboundOut(.body(body)), promise: nil) }
        let done = context.eventLoop.makePromise(of: Void.self)
        mediaAnswering += 1
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: done)
        // The table and its files belong to this loop, where the write completes.
        done.futureResult.assumeIsolated().whenComplete { [channel = context.channel] _ in
            // Uncorking a socket that closed meanwhile has nothing to report.
            if corked { _ = try? channel.syncOptions?.setOption(cork, value: 0) }
            if let file { table.release(file) }
            self.answerEnded()
            if !keepAlive { channel.close(promise: nil) }
        }
        // The router's side reads only when it wants a request; it never saw this one, so ask for the next (once
        // nothing waits).
        if keepAlive { read(context: context) }
    }

    /// A media answer's last byte has left (or the connection closed).
    private func answerEnded() {
        mediaAnswering -= 1
        lastActive = .now()
        bufferedAtLastLook = nil
        acknowledgedAtLastLook = nil
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .head(var head) where parserStopped:
            // The connection ends with this answer, and says so.
            head.headers.replaceOrAdd(name: "connection", value: "close")
            return context.write(wrapOutboundOut(.head(head)), promise: promise)
        case .end:
            break
        default:
            return context.write(data, promise: promise)
        }
        routed = max(0, routed - 1)
        lastActive = .now()
        if parserStopped, routed == 0 {
            let written = context.eventLoop.makePromise(of: Void.self)
            written.futureResult.cascade(to: promise)
            context.write(data, promise: written)
            written.futureResult.assumeIsolated().whenComplete { _ in context.close(promise: nil) }
            return
        }
        context.write(data, promise: promise)
        if routed == 0, !waiting.isEmpty {
            // After the router's write has returned, not inside it.
            context.eventLoop.assumeIsolated().execute { self.drain(context: context) }
        }
    }
}
