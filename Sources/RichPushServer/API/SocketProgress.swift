import NIOCore

#if canImport(Glibc)
import Glibc
#endif

/// What the kernel knows of a connection that its event loop may not have heard yet: the bytes the client has
/// acknowledged (taken of ours) and how long ago its last data arrived.
///
/// The connection's rules (idle, stalled answers, slow bodies) run as tasks on the event loop, and a loop runs every
/// due task of a turn before it looks at its sockets again: after a turn that ran long (the loop busy for longer
/// than `idle_seconds`), a rule looked at what the channel had seen, which was stale. A client that read its answer
/// meanwhile was reset as stalled, and one whose next request waited unread in the socket was closed as idle (a
/// reset, since the request was unread). Reproduced with the loops busy 1.5 s in every 2 with `idle_seconds` 1: a
/// connection asking for media every 100 ms was reset after 5 answers. A rule asks the kernel before it acts.
///
/// Linux only (the kernel's `struct tcp_info`, which only grows; the counters are there since Linux 4.1): elsewhere
/// ``read(_:)`` is nil and the rules act on what the channel saw, as before.
struct SocketProgress: Equatable {
    /// Bytes the client acknowledged (`tcpi_bytes_acked`).
    var bytesAcknowledged: UInt64
    /// Bytes received from the client (`tcpi_bytes_received`).
    var bytesReceived: UInt64
    /// Milliseconds since the client's last data arrived (`tcpi_last_data_recv`).
    var lastReceivedMilliseconds: UInt32

    /// The offsets of the fields in the kernel's `struct tcp_info` (include/uapi/linux/tcp.h): eight single bytes,
    /// 24 32-bit fields from `tcpi_rto` to `tcpi_total_retrans` (glibc's `struct tcp_info` ends there), then the
    /// 64-bit `tcpi_pacing_rate`, `tcpi_max_pacing_rate`, `tcpi_bytes_acked` and `tcpi_bytes_received`.
    static let lastDataReceivedOffset = 52
    static let bytesAcknowledgedOffset = 120
    static let bytesReceivedOffset = 128

    /// Room for the kernel's structure up to `tcpi_bytes_received` and a little more, 8-byte aligned; what an older
    /// kernel does not fill stays zero (the buffer is zeroed before the call).
    typealias Raw = (
        UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64,
        UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64
    )

    init(bytesAcknowledged: UInt64, bytesReceived: UInt64, lastReceivedMilliseconds: UInt32) {
        self.bytesAcknowledged = bytesAcknowledged
        self.bytesReceived = bytesReceived
        self.lastReceivedMilliseconds = lastReceivedMilliseconds
    }

    init(raw: Raw) {
        var raw = raw
        (bytesAcknowledged, bytesReceived, lastReceivedMilliseconds) = withUnsafeBytes(of: &raw) { b in
            (
                b.load(fromByteOffset: Self.bytesAcknowledgedOffset, as: UInt64.self),
                b.load(fromByteOffset: Self.bytesReceivedOffset, as: UInt64.self),
                b.load(fromByteOffset: Self.lastDataReceivedOffset, as: UInt32.self)
            )
        }
    }

    /// The kernel's view of `channel`'s socket now; nil off Linux, off the channel's event loop, or when the
    /// kernel does not keep the counters.
    static func read(_ channel: Channel) -> SocketProgress? {
        #if os(Linux)
        guard channel.eventLoop.inEventLoop, let provider = channel as? SocketOptionProvider else { return nil }
        var progress: SocketProgress?
        // On the channel's loop the option is read at once and the future is complete: its callback runs here.
        let info: EventLoopFuture<Raw> = provider.unsafeGetSocketOption(level: .tcp, name: .tcp_info)
        info.assumeIsolated().whenSuccess { progress = SocketProgress(raw: $0) }
        guard let progress, progress.bytesAcknowledged > 0 || progress.bytesReceived > 0 else { return nil }
        return progress
        #else
        return nil
        #endif
    }

    /// Whether data the client sent after `lastRead` (the loop's last read of the connection) waits unread.
    func unread(since lastRead: NIODeadline, now: NIODeadline) -> Bool {
        lastReceived(now: now) > lastRead + Self.clockSlack
    }

    /// When the client's last data arrived, as a deadline of the loop's clock.
    func lastReceived(now: NIODeadline) -> NIODeadline {
        now - .milliseconds(Int64(lastReceivedMilliseconds))
    }

    /// The kernel's clock counts in ticks of 1 to 10 ms: two times closer than this are not told apart.
    static let clockSlack = TimeAmount.milliseconds(20)

    /// How soon a rule looks again when the kernel holds what the loop has not read: a tenth of the idle time,
    /// 100 ms at most.
    static func lookAgain(_ idle: TimeAmount) -> TimeAmount { .nanoseconds(min(100_000_000, idle.nanoseconds / 10)) }
}
