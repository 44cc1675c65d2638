import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

#if canImport(Glibc)
import Glibc
#endif

/// The system's resolver (`getaddrinfo`), shared by everything that looks up a name a user chose: media, Web Push
/// endpoints, webhook endpoints. It is the one place where one app's slow DNS could stall another app's sends, so
/// it is bounded (see ``HostLookups``): no caller waits more than 5 s, a name is looked up once however many ask
/// at once, answers are kept 30 s (a failure 5 s), and one zone (a name's registrable part, `example.com` of
/// `push.example.com`) runs at most two lookups at once whatever its subdomains.
public struct SystemResolver: HostResolver {
    let lookups: HostLookups

    public init() { lookups = HostLookups.shared }
    init(lookups: HostLookups) { self.lookups = lookups }

    public func resolve(_ host: String, port: Int) async throws -> [IPAddress] {
        try await lookups.resolve(host)
    }

    /// `getaddrinfo` for `host`: every IPv4 and IPv6 address, once each, in the order given. Blocks for as long as
    /// the DNS server takes.
    static func getaddrinfo(_ host: String) -> Result<[IPAddress], FetchFailure> {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        let status = Glibc.getaddrinfo(host, nil, &hints, &result)
        guard status == 0, let first = result else { return .failure(.dns(host: host)) }
        defer { freeaddrinfo(first) }
        var out: [IPAddress] = []
        var p: UnsafeMutablePointer<addrinfo>? = first
        while let ai = p {
            if ai.pointee.ai_family == AF_INET, let sa = ai.pointee.ai_addr {
                let v = sa.withMemoryRebound(to: sockaddr_in.self, capacity: 1) {
                    UInt32(bigEndian: $0.pointee.sin_addr.s_addr)
                }
                out.append(.v4(v))
            } else if ai.pointee.ai_family == AF_INET6, let sa = ai.pointee.ai_addr {
                var a = sa.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_addr }
                out.append(.v6(withUnsafeBytes(of: &a) { Array($0) }))
            }
            p = ai.pointee.ai_next
        }
        var seen = Set<IPAddress>()
        return .success(out.filter { seen.insert($0).inserted })
    }
}

/// Name lookups on threads of their own, bounded so that a name whose DNS server is slow (or never answers) costs
/// only those who asked for it:
///
/// - A caller waits at most `wait`; then it fails with ``FetchFailure/dnsTimeout(host:seconds:)``. The lookup goes
///   on (a blocking `getaddrinfo` cannot be stopped) and its answer is kept.
/// - One lookup per name at a time: everyone asking for a name being looked up waits for that lookup.
/// - Answers are kept `keep` (failures `keepFailure`), at most `entries` of them.
/// - A zone runs at most `perZone` lookups at once; its other names wait their turn, so a zone that stalls holds
///   `perZone` threads of `threads`, never all of them.
/// - At most `pending` names are being looked up or waiting at once; beyond that a new name fails at once.
public final class HostLookups: Sendable {
    public struct Limits: Sendable {
        public var threads = 16
        public var perZone = 2
        public var wait: TimeAmount = .seconds(5)
        public var keep: TimeAmount = .seconds(30)
        public var keepFailure: TimeAmount = .seconds(5)
        public var entries = 4096
        public var pending = 1024
        public init() {}
    }

    static let shared = HostLookups(limits: Limits()) { SystemResolver.getaddrinfo($0) }

    private struct Waiter {
        var continuation: CheckedContinuation<[IPAddress], any Error>
        var timer: Scheduled<Void>?
    }

    private struct State {
        var answers: [String: (answer: Result<[IPAddress], FetchFailure>, until: NIODeadline)] = [:]
        /// Names being looked up or waiting for their zone, with who waits for each.
        var waiting: [String: [Int: Waiter]] = [:]
        var running: [String: Int] = [:]
        var queued: [String: [String]] = [:]
        var nextID = 0
    }

    let limits: Limits
    private let lookup: @Sendable (String) -> Result<[IPAddress], FetchFailure>
    private let threads: NIOThreadPool
    private let state = NIOLockedValueBox(State())
    private let loop = MultiThreadedEventLoopGroup.singleton.next()

    /// `lookup` runs on the threads (tests give one that blocks as they choose).
    init(limits: Limits, lookup: @escaping @Sendable (String) -> Result<[IPAddress], FetchFailure>) {
        self.limits = limits
        self.lookup = lookup
        threads = NIOThreadPool(numberOfThreads: limits.threads)
        threads.start()
    }

    /// Stops the threads once the lookups running end (for a resolver made for a while, such as a test's; the
    /// shared one lives as long as the process).
    func shutdown() async throws { try await threads.shutdownGracefully() }

    /// How many lookups run now (for tests and the curious).
    var running: Int { state.withLockedValue { $0.running.values.reduce(0, +) } }

    /// The part of a name that one owner controls, roughly: its last two labels, or three when those look like a
    /// country's second level (`example.co.uk`). A bound, not a security boundary: it only decides who shares a
    /// zone's turns.
    static func zone(of host: String) -> String {
        let labels = host.lowercased().split(separator: ".", omittingEmptySubsequences: true)
        guard labels.count > 2 else { return labels.joined(separator: ".") }
        let last = labels[labels.count - 1]
        let second = labels[labels.count - 2]
        let take = last.count == 2 && second.count <= 3 ? 3 : 2
        return labels.suffix(take).joined(separator: ".")
    }

    func resolve(_ name: String) async throws -> [IPAddress] {
        let host = name.lowercased()
        let id = state.withLockedValue { s -> Int in
            s.nextID += 1
            return s.nextID
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<[IPAddress], any Error>) in
                let now = NIODeadline.now()
                enum Next {
                    case answered(Result<[IPAddress], FetchFailure>)
                    case busy
                    case wait(start: Bool)
                }
                let next = state.withLockedValue { s -> Next in
                    if let kept = s.answers[host], kept.until > now { return .answered(kept.answer) }
                    let start = s.waiting[host] == nil
                    if start && s.waiting.count >= limits.pending { return .busy }
                    s.waiting[host, default: [:]][id] = Waiter(continuation: c, timer: nil)
                    return .wait(start: start)
                }
                switch next {
                case .answered(let answer): c.resume(with: answer.mapError { $0 })
                case .busy: c.resume(throwing: FetchFailure.dns(host: host))
                case .wait(let start):
                    let timer = loop.scheduleTask(in: limits.wait) { [self] in self.giveUp(host, id: id) }
                    let late = state.withLockedValue { s -> Bool in
                        guard s.waiting[host]?[id] != nil else { return true }
                        s.waiting[host]?[id]?.timer = timer
                        return false
                    }
                    if late { timer.cancel() }
                    if start { begin(host) }
                }
            }
        } onCancel: {
            let waiter = state.withLockedValue { $0.waiting[host]?.removeValue(forKey: id) }
            waiter?.timer?.cancel()
            waiter?.continuation.resume(throwing: CancellationError())
        }
    }

    /// A caller's wait ended before its answer.
    private func giveUp(_ host: String, id: Int) {
        let waiter = state.withLockedValue { $0.waiting[host]?.removeValue(forKey: id) }
        let seconds = Double(limits.wait.nanoseconds) / 1e9
        waiter?.continuation.resume(throwing: FetchFailure.dnsTimeout(host: host, seconds: seconds))
    }

    /// Runs the lookup of `host` now, or queues it behind its zone's.
    private func begin(_ host: String) {
        let zone = Self.zone(of: host)
        let now = state.withLockedValue { s -> Bool in
            if s.running[zone, default: 0] < limits.perZone {
                s.running[zone, default: 0] += 1
                return true
            }
            s.queued[zone, default: []].append(host)
            return false
        }
        if now { submit(host, zone: zone) }
    }

    private func submit(_ host: String, zone: String) {
        threads.submit { [self] work in
            let answer: Result<[IPAddress], FetchFailure> =
                work == .active ? lookup(host) : .failure(.dns(host: host))
            finish(host, zone: zone, answer)
        }
    }

    /// Keeps the answer, answers everyone waiting for it, and starts the zone's next lookup.
    private func finish(_ host: String, zone: String, _ answer: Result<[IPAddress], FetchFailure>) {
        let now = NIODeadline.now()
        let (waiters, next) = state.withLockedValue { s -> ([Waiter], String?) in
            if s.answers.count >= limits.entries {
                s.answers = s.answers.filter { $0.value.until > now }
                // Still full of live answers: the oldest half goes.
                if s.answers.count >= limits.entries {
                    let sorted = s.answers.sorted { $0.value.until < $1.value.until }
                    for (name, _) in sorted.prefix(s.answers.count / 2) { s.answers[name] = nil }
                }
            }
            let keep: TimeAmount
            if case .success(let addresses) = answer, !addresses.isEmpty {
                keep = limits.keep
            } else {
                keep = limits.keepFailure
            }
            s.answers[host] = (answer, now + keep)
            let waiters = s.waiting.removeValue(forKey: host).map { Array($0.values) } ?? []
            var next: String?
            if var queue = s.queued[zone], !queue.isEmpty {
                next = queue.removeFirst()
                s.queued[zone] = queue.isEmpty ? nil : queue
            } else {
                s.running[zone, default: 1] -= 1
                if s.running[zone] == 0 { s.running[zone] = nil }
            }
            return (waiters, next)
        }
        for w in waiters {
            w.timer?.cancel()
            w.continuation.resume(with: answer.mapError { $0 })
        }
        if let next { submit(next, zone: zone) }
    }
}
