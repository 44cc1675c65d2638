import Foundation
import NIOConcurrencyHelpers
import NIOCore
import RichPushCore

/// Live views of notifications, shared: however many browsers watch one notification, the node reads its numbers
/// once per turn and writes the same bytes to each. A turn reads the notification's numbers through the
/// ``InsightCache`` the funnel route shares (the funnel, the deliveries by state, the opens over time); it comes at
/// most once a second, and never sooner than ``costFactor`` times what the last turn cost after it, so that
/// watching takes at most 2 % of one core's time whatever the send's size. An event goes out only when something
/// changed, and a comment line every 15 s keeps idle connections open (and finds those that closed: a watcher that
/// left is noticed at the next write).
///
/// Bounded, so that no app holds what another needs: at most ``Limits/node`` connections a node, ``Limits/perApp``
/// for one app's keys together (a fair share: 100 of the node's 1,000), ``Limits/perKey`` for one key and
/// ``Limits/perNotification`` on one notification; past any of them a new watcher gets 429 naming the bound. Each
/// watcher holds a small buffer (the newest event only: one that cannot keep up skips to the latest numbers rather
/// than queueing).
public final class InsightStreams: Sendable {
    /// How many live views a node holds (`insight.max_views`, `…_per_app`, `…_per_key`, `…_per_notification`).
    public struct Limits: Sendable, Equatable {
        public var node: Int
        public var perApp: Int
        public var perKey: Int
        public var perNotification: Int

        public init(node: Int = 1_000, perApp: Int = 100, perKey: Int = 50, perNotification: Int = 200) {
            self.node = max(1, node)
            self.perApp = max(1, perApp)
            self.perKey = max(1, perKey)
            self.perNotification = max(1, perNotification)
        }
    }

    /// Why a watcher was not admitted: the bound it met, with its figure.
    public enum Refusal: Error, Sendable, Hashable, CustomStringConvertible {
        case node(Int)
        case app(Int)
        case key(Int)
        case notification(Int)

        public var description: String {
            switch self {
            case .node(let n): "this node has its \(n) live views open (insight.max_views)"
            case .app(let n): "this app has its \(n) live views open on this node (insight.max_views_per_app)"
            case .key(let n): "this key has its \(n) live views open on this node (insight.max_views_per_key)"
            case .notification(let n):
                "this notification has its \(n) live views open on this node (insight.max_views_per_notification)"
            }
        }
    }

    /// A turn waits this many times its own cost before the next: its share of one core's time is at most
    /// 1 / (1 + costFactor), 2 %. (At 24, 4 %, fifty browser tabs watching a 100,000-device send on this 2-core
    /// machine measured turns at 4.9 % of the send's CPU: Benchmarks/insight_watchers.sh with BROWSERS=1.)
    static let costFactor = 49.0

    public let limits: Limits
    public var maxWatchers: Int { limits.node }
    public var maxPerNotification: Int { limits.perNotification }
    /// Past samples kept for the deliveries-over-time chart (one per turn).
    public static let maxSamples = 600

    /// What a turn reads: the event's JSON for a notification.
    public typealias Read = @Sendable (_ notificationID: String) async throws -> JSONValue

    /// One watcher: its stream's end, and whose it is (the counts per app and key are kept by these).
    struct Watcher {
        var continuation: AsyncStream<ByteBuffer>.Continuation
        var app: String
        var key: String
    }

    struct Watch {
        var watchers: [UUID: Watcher] = [:]
        /// A reader was started for it (set under the lock, so that two first watchers at once start one).
        var reading = false
        /// Which reader serves it: one whose watch ended and began again while it slept sees another number, and
        /// ends rather than read beside the new one.
        var generation = 0
        /// Ends its reader's pause (its last watcher left, or the server is stopping).
        var wake = WakeSignal()
        var last: ByteBuffer?
        var samples: [JSONValue] = []
    }

    struct State {
        var watches: [String: Watch] = [:]
        var generations = 0
        var total = 0
        var byApp: [String: Int] = [:]
        var byKey: [String: Int] = [:]

        /// Removes one watcher's counts.
        mutating func forget(_ w: Watcher) {
            total -= 1
            byApp[w.app] = byApp[w.app].flatMap { $0 > 1 ? $0 - 1 : nil }
            byKey[w.key] = byKey[w.key].flatMap { $0 > 1 ? $0 - 1 : nil }
        }
    }

    private let state = NIOLockedValueBox(State())
    private let read: Read
    let metrics: ServerMetrics?
    /// Seconds spent in turns (reading and writing), for the figure the benchmark reports.
    private let busy = NIOLockedValueBox<Double>(0)
    let minimumInterval: TimeInterval
    let keepAlive: TimeInterval

    /// The readers, one per notification watched: children of this service in a server (so that its shutdown ends
    /// them), tasks of their own otherwise.
    public let readers = BackgroundWork()

    public init(
        minimumInterval: TimeInterval = 1,
        keepAlive: TimeInterval = 15,
        limits: Limits = Limits(),
        metrics: ServerMetrics? = nil,
        read: @escaping Read
    ) {
        self.limits = limits
        self.read = read
        self.metrics = metrics
        self.minimumInterval = minimumInterval
        self.keepAlive = keepAlive
    }

    /// Seconds of turns so far.
    public var busySeconds: Double { busy.withLockedValue { $0 } }

    /// Watchers now, on all notifications.
    public var watchers: Int { state.withLockedValue { $0.total } }

    /// Watchers now of one app's keys, and of one key.
    public func watchers(app: String) -> Int { state.withLockedValue { $0.byApp[app, default: 0] } }
    public func watchers(key: String) -> Int { state.withLockedValue { $0.byKey[key, default: 0] } }

    /// A new watcher's stream of event bytes for `app`'s notification, asked for with `key` (an API key's id, or
    /// `admin`), or the bound it met. Ends when ``stop(_:_:)`` is called.
    func watch(
        _ notificationID: String,
        app: String,
        key: String
    ) -> Result<(UUID, AsyncStream<ByteBuffer>), Refusal> {
        let id = UUID()
        let (stream, continuation) = AsyncStream<ByteBuffer>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let started: Result<(Int, WakeSignal)?, Refusal> = state.withLockedValue { s in
            var w = s.watches[notificationID, default: Watch()]
            if s.total >= limits.node { return .failure(.node(limits.node)) }
            if s.byApp[app, default: 0] >= limits.perApp { return .failure(.app(limits.perApp)) }
            if s.byKey[key, default: 0] >= limits.perKey { return .failure(.key(limits.perKey)) }
            if w.watchers.count >= limits.perNotification { return .failure(.notification(limits.perNotification)) }
            w.watchers[id] = Watcher(continuation: continuation, app: app, key: key)
            s.total += 1
            s.byApp[app, default: 0] += 1
            s.byKey[key, default: 0] += 1
            if let last = w.last { continuation.yield(last) }
            var start: (Int, WakeSignal)?
            if !w.reading {
                w.reading = true
                s.generations += 1
                w.generation = s.generations
                start = (w.generation, w.wake)
            }
            s.watches[notificationID] = w
            return .success(start)
        }
        switch started {
        case .failure(let refusal):
            continuation.finish()
            return .failure(refusal)
        case .success(let start):
            if let (generation, wake) = start {
                readers.run { await self.run(notificationID, generation: generation, wake: wake) }
            }
            continuation.onTermination = { [weak self] _ in self?.stop(notificationID, id) }
            return .success((id, stream))
        }
    }

    /// A watcher left (its connection closed, or the server is stopping).
    func stop(_ notificationID: String, _ id: UUID) {
        let ended: (AsyncStream<ByteBuffer>.Continuation?, WakeSignal?) = state.withLockedValue { s in
            guard var w = s.watches[notificationID], let gone = w.watchers.removeValue(forKey: id) else {
                return (nil, nil)
            }
            s.forget(gone)
            if w.watchers.isEmpty {
                s.watches[notificationID] = nil
                return (gone.continuation, w.wake)
            }
            s.watches[notificationID] = w
            return (gone.continuation, nil)
        }
        ended.0?.finish()
        ended.1?.signal()
    }

    /// Ends every stream (the server is stopping).
    public func closeAll() {
        let all = state.withLockedValue { s -> [String: Watch] in
            let copy = s.watches
            // Generations go on counting: a reader still asleep must not take a later watch for its own.
            let generations = s.generations
            s = State()
            s.generations = generations
            return copy
        }
        for w in all.values {
            w.wake.signal()
            for c in w.watchers.values { c.continuation.finish() }
        }
    }

    func run(_ notificationID: String, generation: Int, wake: WakeSignal) async {
        var lastSent = ContinuousClock.now
        // Ends when its last watcher left (the entry is gone, or is another reader's).
        while !Task.isCancelled, state.withLockedValue({ $0.watches[notificationID]?.generation == generation }) {
            let started = ContinuousClock.now
            var event: ByteBuffer?
            do {
                var body = try await read(notificationID)
                let sample = Self.sample(body)
                let samples: [JSONValue] = state.withLockedValue { s in
                    guard var w = s.watches[notificationID] else { return [] }
                    if let sample, w.samples.last.map({ Self.sameCounts($0, sample) }) != true {
                        w.samples.append(sample)
                        if w.samples.count > Self.maxSamples {
                            w.samples.removeFirst(w.samples.count - Self.maxSamples)
                        }
                    }
                    s.watches[notificationID] = w
                    return w.samples
                }
                if case .object(var o) = body {
                    o["series"] = .array(samples)
                    body = .object(o)
                }
                var buffer = ByteBuffer()
                buffer.writeString("event: insight\ndata: ")
                buffer.writeBytes(body.serialized())
                buffer.writeString("\n\n")
                event = buffer
            } catch {
                var buffer = ByteBuffer()
                buffer.writeString("event: unavailable\ndata: {}\n\n")
                event = buffer
            }
            let changed: [AsyncStream<ByteBuffer>.Continuation] = state.withLockedValue { s in
                guard var w = s.watches[notificationID] else { return [] }
                guard let event, w.last != event else { return [] }
                w.last = event
                s.watches[notificationID] = w
                return w.watchers.values.map(\.continuation)
            }
            if let event, !changed.isEmpty {
                for c in changed { c.yield(event) }
                lastSent = ContinuousClock.now
            } else if ContinuousClock.now - lastSent > .seconds(keepAlive) {
                var ping = ByteBuffer()
                ping.writeString(": still here\n\n")
                for c in state.withLockedValue({ $0.watches[notificationID]?.watchers.values.map(\.continuation) ?? [] }
                ) {
                    c.yield(ping)
                }
                lastSent = ContinuousClock.now
            }
            let cost = ContinuousClock.now - started
            let seconds = Double(cost.components.seconds) + Double(cost.components.attoseconds) / 1e18
            busy.withLockedValue { $0 += seconds }
            metrics?.insightTurn(seconds: seconds)
            let wait = max(minimumInterval, seconds * Self.costFactor)
            // Never longer than the keep-alive: on a machine so busy that a turn's wall time is long, the view still
            // moves every 15 s (the cost is wall time, so a busy machine stretches it without costing more CPU).
            await wake.waitUnlessCancelled(upTo: min(wait, 15))
        }
    }

    /// A point of the over-time chart: `[t, sent, provider_accepted, received, opened]`, from the event.
    static func sample(_ body: JSONValue) -> JSONValue? {
        guard let stages = body["funnel"]?["stages"]?.arrayValue else { return nil }
        func count(_ name: String) -> Int64 {
            Int64(stages.first { $0["stage"]?.stringValue == name }?["count"]?.intValue ?? 0)
        }
        return [
            .int(Int64(Date().timeIntervalSince1970)), .int(count("sent")), .int(count("provider_accepted")),
            .int(count("received")), .int(count("opened")),
        ]
    }

    static func sameCounts(_ a: JSONValue, _ b: JSONValue) -> Bool {
        Array((a.arrayValue ?? []).dropFirst()) == Array((b.arrayValue ?? []).dropFirst())
    }
}
