import Foundation
import NIOConcurrencyHelpers
import NIOCore

/// The connections a node holds, bounded: a connection costs a descriptor and its buffers whether or not a request
/// ever comes on it, so a caller without a key could otherwise hold them all (one client with 20,000 idle
/// connections took every descriptor of a node). Each client address (an IPv4 address, an IPv6 /64) holds at most
/// `perClient` at once and the node at most `total`; a connection past either bound is closed as soon as it is
/// accepted, before a byte of it is read. The bound per client is generous (1,024): devices behind one carrier
/// NAT share an address, and after a large send they download its media at once. The operator's proxies (`trusted_proxies`) count only toward the node's
/// bound: every client behind them shares their address.
///
/// Idle connections are closed by the HTTP layer (`connections.idle_seconds`): a keep-alive connection with no new
/// request, and one whose request head never ends (sent a byte at a time), once nothing was read for that long.
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

    /// Connections held now, and client addresses holding any.
    public var open: (total: Int, clients: Int) { state.withLockedValue { ($0.total, $0.perClient.count) } }

    public struct RefusalError: Error, Sendable { public var refusal: Refusal }
}

/// Admits each accepted connection through ``ConnectionLimits`` when it becomes active, closing it at once when
/// refused, and gives its place back when it ends.
final class ConnectionGuard: ChannelInboundHandler, RemovableChannelHandler, @unchecked Sendable {
    // @unchecked: lives on its channel's event loop.
    typealias InboundIn = NIOAny

    let limits: ConnectionLimits
    private var key: String?

    init(_ limits: ConnectionLimits) { self.limits = limits }

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
        case .failure:
            // Closed once the pipeline is set up (it may be being set up now).
            let channel = context.channel
            channel.eventLoop.execute { channel.close(promise: nil) }
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // Nothing of a refused connection goes further.
        guard key != nil else { return }
        context.fireChannelRead(data)
    }

    func channelInactive(context: ChannelHandlerContext) {
        releaseOnce()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) { releaseOnce() }

    private func releaseOnce() {
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
