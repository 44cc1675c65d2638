import Foundation
import HTTPTypes
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTPTypes

/// The connections a node holds, bounded: a connection costs a descriptor and its buffers whether or not a request
/// ever comes on it, so a caller without a key could otherwise hold them all (one client with 20,000 idle
/// connections took every descriptor of a node). Each client address (an IPv4 address, an IPv6 /64) holds at most
/// `perClient` at once and the node at most `total`; a connection past either bound is closed as soon as it is
/// accepted, before a byte of it is read. The bound per client is generous (1,024): devices behind one carrier
/// NAT share an address, and after a large send they download its media at once. The operator's proxies (`trusted_proxies`) count only toward the node's
/// bound: every client behind them shares their address.
///
/// Idle connections are closed by the media fast path (`connections.idle_seconds`), which sees every request, media
/// ones too: a keep-alive connection with no new request, and one whose request head never ends (sent a byte at a
/// time), once nothing was read for that long.
public final class ConnectionLimits: Sendable {
    public struct Limits: Sendable, Equatable {
        /// Connections one client address may hold at once (`connections.per_client`).
        public var perClient: Int
        /// Connections the node holds at once (`connections.max`); nil: what its descriptor limit leaves after a
        /// reserve for the database, the push services and the files it serves.
        public var total: Int?
        /// Seconds a connection may stay without reading or writing anything before it is closed
        /// (`connections.idle_seconds`), unless an answer is being written.
        public var idleSeconds: Double

        public init(perClient: Int = 1_024, total: Int? = nil, idleSeconds: Double = 30) {
            self.perClient = max(1, perClient)
            self.total = total.map { max(1, $0) }
            self.idleSeconds = idleSeconds
        }

        /// Descriptors kept for everything that is not an accepted connection: the database (one per pooled
        /// connection and its files), push service connections (a few per origin), media files being served.
        static let reserve = 1_024

        /// The descriptor limit less the reserve (the limit is raised to its hard bound at start), at least 64 and
        /// at most 65,536 (an idle connection holds some 10 KB of buffers and handlers: 65,536 of them, under a GB).
        public static func defaultTotal(limit: Int = DescriptorLimit.current()) -> Int {
            max(64, min(limit - reserve, 65_536))
        }
    }

    public let limits: Limits
    /// The node's bound in force (``Limits/total``, or its default when the server started).
    public let total: Int
    let proxies: TrustedProxies
    private let state = NIOLockedValueBox(State())
    private let metrics: ServerMetrics?

    struct State {
        var total = 0
        var perClient: [String: Int] = [:]
    }

    public init(_ limits: Limits, proxies: TrustedProxies = TrustedProxies(), metrics: ServerMetrics? = nil) {
        self.limits = limits
        self.total = limits.total ?? Limits.defaultTotal()
        self.proxies = proxies
        self.metrics = metrics
    }

    /// Why a connection was not taken.
    public enum Refusal: String, Sendable {
        case perClient = "per-client"
        case node
    }

    /// Takes a place for a connection from `peer`: the key to release it with, or why it was refused.
    public func admit(peer: IPAddress?) -> Result<String, RefusalError> {
        let key = peer.map { proxies.trusts($0) ? "" : $0.clientKey } ?? ""
        let outcome = state.withLockedValue { s -> Refusal? in
            guard s.total < total else { return .node }
            if !key.isEmpty {
                let held = s.perClient[key, default: 0]
                guard held < limits.perClient else { return .perClient }
                s.perClient[key] = held + 1
            }
            s.total += 1
            return nil
        }
        if let outcome {
            metrics?.connectionRefused(reason: outcome.rawValue)
            return .failure(RefusalError(refusal: outcome))
        }
        return .success(key)
    }

    /// Gives back the place `admit` took under `key`.
    public func release(_ key: String) {
        state.withLockedValue { s in
            s.total = max(0, s.total - 1)
            guard !key.isEmpty, let held = s.perClient[key] else { return }
            if held <= 1 { s.perClient[key] = nil } else { s.perClient[key] = held - 1 }
        }
    }

    /// Counts a connection this node admitted and then closed by one of its rules.
    func closed(by rule: ClosingRule) { metrics?.connectionClosed(rule: rule.rawValue) }

    /// Connections held now, and client addresses holding any.
    public var open: (total: Int, clients: Int) { state.withLockedValue { ($0.total, $0.perClient.count) } }

    public struct RefusalError: Error, Sendable { public var refusal: Refusal }
}

/// The rule that closed a connection the node had admitted, as `/metrics` counts it
/// (`richpush_connections_closed_total{rule}`): what an operator reads to tell clients that went quiet from a node
/// that misjudged them.
public enum ClosingRule: String, Sendable, CaseIterable {
    /// Nothing read and no answer ended for `idle_seconds`: a keep-alive connection with no new request, a request
    /// head that never ends.
    case idle
    /// An answer of which nothing left for `idle_seconds`: the client stopped reading (closed with a reset).
    case stalled
    /// A request body that came at under 1 KB a second over an idle interval.
    case slowBody = "slow_body"
}

/// Whether a request's slow body is the server's wait, not the client's: the handlers after one held back their
/// reads (the task that reads the body was late, its buffer full) while the client's data arrived and waits unread.
/// Under a loaded run a body sent at 2.5 KB/s was closed as slow while its reader waited for a thread: nothing was
/// read because nothing was asked for.
///
/// A read burst ends with `channelReadComplete`; the channel then asks for the next through the handlers after this
/// one, at once unless one of them holds it back. So reads are held from a burst's end until the next ask.
///
/// Only while the request's answer is pending: once it has ended the server either drains the body at once or,
/// after `Connection: close`, reads no more of the connection for good (an outsider held a connection that way with
/// no key, its last byte waiting unread: held and unread at every look). Only when more of the client's data
/// arrived since the last look, and for ``cap(_:)`` at most per request.
struct ReadDemand {
    private var heldSince: NIODeadline?
    private var held = TimeAmount.zero
    /// The kernel's count of bytes received at the last look (nil: not read yet).
    private var received: UInt64?
    /// The time already taken as the server's for this request.
    private var credited = TimeAmount.zero
    /// When this request's last look was (nil: none yet).
    private var lastLook: NIODeadline?

    /// A read burst ended: reads are held until the next ask.
    mutating func readEnded(at now: NIODeadline = .now()) {
        if heldSince == nil { heldSince = now }
    }

    /// The handlers after this one asked for a read.
    mutating func asked(at now: NIODeadline = .now()) {
        guard let since = heldSince else { return }
        held = held + (now - since)
        heldSince = nil
    }

    /// A request's head was read: its credit starts at nothing, and its data is counted from its first look (read
    /// then, not here: the kernel is asked only when a rule looks, never on a request's way).
    mutating func requestBegan() {
        credited = .zero
        received = nil
        lastLook = nil
    }

    /// The most time taken as the server's for one request: three idle times, 30 s at least.
    static func cap(_ interval: TimeAmount) -> TimeAmount { max(.seconds(30), .nanoseconds(interval.nanoseconds * 3)) }

    /// Whether the `interval` now ending was the server's wait: reads held back for a tenth of it or more (or now),
    /// the request's answer pending, more of the client's data arrived since the last look and waits unread, and the
    /// request's credit under ``cap(_:)``. Each look starts the counts again. `kernel` is the look's one reading of
    /// the socket (``SocketProgress/read(_:)``), which the rule reads too.
    ///
    /// The credit is the time that passed since the request's last look (one `interval` for its first), not one
    /// `interval` a look: looks that a loaded loop ran late stretched the cap, and a body behind a reader that waited
    /// 45 s was closed only at 45 s, not at about 31 (a fresh clone's loaded run). The last look is the request's
    /// own: one kept from the request before credited the quiet time between the two.
    mutating func serversWait(
        _ kernel: SocketProgress?,
        lastRead: NIODeadline,
        answerPending: Bool,
        interval: TimeAmount,
        now: NIODeadline = .now()
    ) -> Bool {
        var total = held
        if let since = heldSince {
            total = total + (now - since)
            heldSince = now
        }
        held = .zero
        let elapsed = lastLook.map { now - $0 } ?? interval
        lastLook = now
        let holding = heldSince != nil || total.nanoseconds * 10 >= interval.nanoseconds
        let before = received
        received = kernel?.bytesReceived
        guard holding, answerPending, let kernel, let before, kernel.bytesReceived > before,
            kernel.unread(since: lastRead, now: now),
            credited + elapsed <= Self.cap(interval)
        else { return false }
        credited = credited + elapsed
        return true
    }
}

/// One connection's guard, after the HTTP codec: admits the connection through ``ConnectionLimits`` when it becomes
/// active (closing it at once when refused) and gives its place back when it ends; and bounds what a caller who
/// does not read, or writes slowly, makes the node hold:
/// - one request at a time: a request pipelined behind one whose answer is not written yet waits here, and nothing
///   more is read from the socket meanwhile (a client that pipelined thousands of requests for a large answer and
///   never read made the node hold megabytes of answers per connection);
/// - nothing is read while the connection cannot take more writes (its answers back up);
/// - an answer of which nothing leaves for `idle_seconds` (the client stopped reading) closes the connection;
/// - a request body must come at `minBodyBytesPerSecond` or more over each `idle_seconds` (a body sent a byte at a
///   time kept its connection and its buffered bytes for good: each of its parts counts as activity), counted over
///   the time the server asked for it (``ReadDemand``).
final class ConnectionGuard: ChannelDuplexHandler, RemovableChannelHandler, @unchecked Sendable {
    // @unchecked: lives on its channel's event loop.
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    /// The slowest a request body may come, measured over each idle interval: 1 KB a second.
    static let minBodyBytesPerSecond = 1_024

    let limits: ConnectionLimits
    private var key: String?
    /// Requests passed on whose answer has not ended.
    private var answering = 0
    /// Parts of requests that came while an answer was pending, in order.
    private var queued: [HTTPRequestPart] = []
    /// A read asked for while parts were queued or the connection could not take writes.
    private var readHeld = false
    /// The request body being read: bytes since the last look, and the look.
    private var readingBody = false
    private var bodyBytes = 0
    /// What is left of the body by its Content-Length (nil: not declared, or chunked).
    private var bodyLeft: Int?
    private var bodyCheck: Scheduled<Void>?
    private var stallCheck: Scheduled<Void>?
    /// When the handlers after this one held back their reads.
    private var demand = ReadDemand()

    init(_ limits: ConnectionLimits) { self.limits = limits }

    private var idle: TimeAmount { .milliseconds(Int64(limits.limits.idleSeconds * 1000)) }

    func handlerAdded(context: ChannelHandlerContext) {
        // An accepted connection may be active before its handlers are added.
        if context.channel.isActive { admit(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        if key == nil { admit(context) }
        context.fireChannelActive()
    }

    private func admit(_ context: ChannelHandlerContext) {
        let peer = context.channel.remoteAddress?.ipAddress.flatMap { IPAddress(host: $0) }
        switch limits.admit(peer: peer) {
        case .success(let k):
            key = k
            Self.boundUnreadData(context.channel, seconds: limits.limits.idleSeconds)
        case .failure:
            // Closed once the pipeline is set up (it may be being set up now).
            let channel = context.channel
            channel.eventLoop.execute { channel.close(promise: nil) }
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // Nothing of a refused connection goes further.
        guard key != nil else { return }
        let part = unwrapInboundIn(data)
        if !queued.isEmpty {
            queued.append(part)
            return
        }
        if case .head = part, answering > 0 {
            queued.append(part)
            return
        }
        pass(context, part)
    }

    /// Passes a part on, counting requests and timing bodies.
    private func pass(_ context: ChannelHandlerContext, _ part: HTTPRequestPart) {
        switch part {
        case .head(let head):
            answering += 1
            readingBody = true
            bodyBytes = 0
            demand.requestBegan()
            // Digits only, and at most 18 of them, before the conversion.
            let declared = head.headerFields[.contentLength].flatMap { v -> Int? in
                guard (1...18).contains(v.utf8.count), v.utf8.allSatisfy({ (48...57).contains($0) }) else { return nil }
                return Int(v)
            }
            bodyLeft = declared
            scheduleBodyCheck(context)
            if Self.expectsContinue(head, declared: declared) {
                // RFC 9110, 10.1.1: a client that asked waits for this before it sends the body (curl waits a
                // second for it, then sends anyway; another client may wait for good). Sent when the request is
                // passed on, so never ahead of an earlier request's answer.
                context.writeAndFlush(wrapOutboundOut(.head(HTTPResponse(status: .continue))), promise: nil)
            }
        case .body(let b):
            bodyBytes += b.readableBytes
            bodyLeft = bodyLeft.map { max(0, $0 - b.readableBytes) }
        case .end:
            readingBody = false
            bodyCheck?.cancel()
            bodyCheck = nil
        }
        context.fireChannelRead(wrapInboundOut(part))
    }

    /// Whether the request asks for `100 Continue` before its body (`Expect: 100-continue`, in any case) and has one
    /// to send (a length above zero, or chunked).
    static func expectsContinue(_ head: HTTPRequest, declared: Int?) -> Bool {
        guard let expect = head.headerFields[.expect], expect.lowercased() == "100-continue" else { return false }
        if let declared { return declared > 0 }
        return head.headerFields[.transferEncoding]?.lowercased().contains("chunked") ?? false
    }

    /// Each idle interval of a body: closed unless it brought the minimum since the last look, or all that was left
    /// of it by its length (a small body must end within the interval; a large one come at the minimum rate).
    private func scheduleBodyCheck(_ context: ChannelHandlerContext) {
        bodyCheck?.cancel()
        let seconds = max(1, Int(limits.limits.idleSeconds))
        let needed = min(Self.minBodyBytesPerSecond * seconds, bodyLeft ?? Int.max)
        bodyCheck = context.eventLoop.scheduleTask(in: idle) { [self] in checkBody(context, needed: needed) }
    }

    /// A body short of `needed` closes its connection, unless data came after the loop's last read of it (the loop
    /// was busy, and its count is stale): then it is looked at again once the loop has had the time to read it, for
    /// one more idle time at most (`until`). Only the body's own bytes count: crediting the kernel's count of
    /// what arrived let a body padded with chunk extensions (one body byte in 2.2 KB) keep its connection for good.
    /// When the interval was the server's wait (``ReadDemand``: the body's reader was late), the body is timed
    /// again from here.
    private func checkBody(_ context: ChannelHandlerContext, needed: Int, until: NIODeadline? = nil) {
        // A connection another rule closed meanwhile (the fast path's idle rule looks at the same times) is not
        // closed, nor counted, again.
        guard readingBody, context.channel.isActive else { return }
        let now = NIODeadline.now()
        let kernel = SocketProgress.read(context.channel)
        let servers = demand.serversWait(
            kernel,
            lastRead: lastRead,
            answerPending: answering > 0,
            interval: idle,
            now: now
        )
        guard bodyBytes < needed, !servers else {
            bodyBytes = 0
            return scheduleBodyCheck(context)
        }
        let until = until ?? now + idle
        if now < until, kernel?.unread(since: lastRead, now: now) == true {
            bodyCheck = context.eventLoop.scheduleTask(in: SocketProgress.lookAgain(idle)) { [self] in
                checkBody(context, needed: needed, until: until)
            }
            return
        }
        limits.closed(by: .slowBody)
        context.close(promise: nil)
    }

    /// The last read that reached this handler.
    private var lastRead = NIODeadline.now()

    func channelReadComplete(context: ChannelHandlerContext) {
        lastRead = .now()
        demand.readEnded(at: lastRead)
        context.fireChannelReadComplete()
    }

    /// An error that came while requests read before it waited here (the codec's refusal of what followed them):
    /// told once they have gone on, so that they are answered before the refusal. It overtook them, and a client
    /// that pipelined valid requests ahead of a malformed one had all but the first dropped unanswered.
    private var heldError: (any Error)?

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if !queued.isEmpty {
            if heldError == nil { heldError = error }
            return
        }
        context.fireErrorCaught(error)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let part = unwrapOutboundIn(data)
        context.write(wrapOutboundOut(part), promise: promise)
        if stallCheck == nil { scheduleStallCheck(context, buffered: Self.buffered(context)) }
        guard case .end = part else { return }
        answering = max(0, answering - 1)
        // The next request that waited, with its parts as far as they came (to its end, or the next head).
        if answering == 0, let first = queued.first, case .head = first {
            queued.removeFirst()
            pass(context, first)
            while let next = queued.first {
                if case .head = next { break }
                queued.removeFirst()
                pass(context, next)
            }
            // What reads the parts takes them at the end of a read.
            context.fireChannelReadComplete()
            if queued.isEmpty, let error = heldError {
                heldError = nil
                context.fireErrorCaught(error)
            }
        }
        releaseRead(context)
    }

    func read(context: ChannelHandlerContext) {
        demand.asked()
        if !queued.isEmpty || !context.channel.isWritable {
            readHeld = true
            return
        }
        context.read()
    }

    private func releaseRead(_ context: ChannelHandlerContext) {
        guard readHeld, queued.isEmpty, context.channel.isWritable else { return }
        readHeld = false
        context.read()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { releaseRead(context) }
        context.fireChannelWritabilityChanged()
    }

    /// After a write: each idle interval, what waits in the channel to be written must have gone down (or be gone),
    /// else the client reads nothing and the connection is closed. A slow reader that makes progress (a long video
    /// on a slow link) keeps it. (The answer's last bytes can wait with the channel still writable: the socket's
    /// buffer holds the rest and the writer waits for them, so writability alone never said.)
    /// The kernel's count of what the client acknowledged counts as progress too: it moves even when the loop, busy,
    /// has not yet heard that the socket can take more, and what waits in the channel stays as it was.
    private func scheduleStallCheck(_ context: ChannelHandlerContext, buffered: Int) {
        let acknowledged = SocketProgress.read(context.channel)?.bytesAcknowledged
        stallCheck = context.eventLoop.scheduleTask(in: idle) { [self] in
            let now = Self.buffered(context)
            if now == 0 || !context.channel.isActive {
                stallCheck = nil
            } else if now >= buffered, SocketProgress.read(context.channel)?.bytesAcknowledged == acknowledged {
                limits.closed(by: .stalled)
                Self.abort(context.channel)
            } else {
                scheduleStallCheck(context, buffered: now)
            }
        }
    }

    /// Closes a connection whose client stopped reading with a reset, not a FIN: a graceful close leaves the
    /// socket, orphaned, holding what its send buffer held (3 to 4 MB each, found by an outsider's attack) for as
    /// long as the client keeps its end open, beyond any bound on descriptors.
    static func abort(_ channel: Channel) {
        if let socket = channel as? SocketOptionProvider { _ = socket.setSoLinger(linger(l_onoff: 1, l_linger: 0)) }
        channel.close(promise: nil)
    }

    /// Asks the kernel to drop the connection once data it holds for the client has waited `2 × seconds` (10 s at
    /// least) without the client taking any (`TCP_USER_TIMEOUT`, which covers data unacknowledged and data held back by a zero
    /// window). The rules above watch what waits in the channel; an answer that fit wholly in the socket's send buffer
    /// has left the channel, so a client that then stopped reading had its connection closed gracefully when idle,
    /// and the socket lived on, orphaned in FIN-WAIT-1 with the answer still queued, for as long as the client kept
    /// it open. A client that reads, however slowly, moves its window and keeps the connection.
    /// The least time given (whatever `idle_seconds` is): on a loaded host the kernel acknowledges what it received
    /// late (its network work waits behind the processes), and at 2 s a client that read every byte of its answers
    /// had its connection ended under a loaded test run (idle 1 s).
    static let minimumUnreadSeconds: Double = 10

    static func boundUnreadData(_ channel: Channel, seconds: Double) {
        let milliseconds = Int(min(max(seconds * 2, minimumUnreadSeconds), 86_400) * 1000)
        let option = ChannelOptions.Types.SocketOption(
            level: .tcp,
            name: NIOBSDSocket.Option(rawValue: CInt(TCP_USER_TIMEOUT))
        )
        try? channel.syncOptions?.setOption(option, value: milliseconds)
    }

    /// Bytes waiting in the channel to be written.
    private static func buffered(_ context: ChannelHandlerContext) -> Int {
        (try? context.channel.syncOptions?.getOption(.bufferedWritableBytes)) ?? 0
    }

    func channelInactive(context: ChannelHandlerContext) {
        end()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) { end() }

    private func end() {
        bodyCheck?.cancel()
        stallCheck?.cancel()
        bodyCheck = nil
        stallCheck = nil
        queued.removeAll()
        if let key {
            limits.release(key)
            self.key = nil
        }
    }
}

/// The process's limit on open descriptors.
public enum DescriptorLimit {
    /// The soft limit now.
    public static func current() -> Int {
        var l = rlimit()
        guard getrlimit(RLIMIT_NOFILE_VALUE, &l) == 0 else { return 1_024 }
        return l.rlim_cur > UInt64(Int32.max) ? Int(Int32.max) : Int(l.rlim_cur)
    }

    /// Raises the soft limit to the hard one (often 1,024 against 524,288 or more: a server needs the room), at
    /// most to a million; the limit in force after.
    @discardableResult
    public static func raise() -> Int {
        var l = rlimit()
        guard getrlimit(RLIMIT_NOFILE_VALUE, &l) == 0 else { return current() }
        let target = min(l.rlim_max, 1_048_576)
        if l.rlim_cur < target {
            l.rlim_cur = target
            _ = setrlimit(RLIMIT_NOFILE_VALUE, &l)
        }
        return current()
    }

    #if os(Linux)
    static let RLIMIT_NOFILE_VALUE = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
    #else
    static let RLIMIT_NOFILE_VALUE = RLIMIT_NOFILE
    #endif
}
