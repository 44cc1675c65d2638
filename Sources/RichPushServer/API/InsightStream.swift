import Foundation
import NIOConcurrencyHelpers
import NIOCore
import RichPushCore

/// Live views of notifications, shared: however many browsers watch one notification, the node reads its numbers
/// once per turn and writes the same bytes to each. A turn reads the funnel (three grouped reads), the deliveries
/// by state, and the opens over time; it comes at most once a second, and never sooner than ``costFactor`` times what
/// the last turn cost after it, so that watching takes at most 2 % of one core's time whatever the send's size. An
/// event goes out only when something changed, and a comment line every 15 s keeps idle connections open (and finds
/// those that closed: a watcher that left is noticed at the next write).
///
/// Bounded: at most ``maxWatchers`` connections a node and ``maxPerNotification`` on one notification (1,000 and
/// 200 unless set); past either
/// a new watcher gets 429. Each watcher holds a small buffer (the newest event only: one that cannot keep up skips
/// to the latest numbers rather than queueing).
public final class InsightStreams: Sendable {
    /// A turn waits this many times its own cost before the next: its share of one core's time is at most
    /// 1 / (1 + costFactor), 2 %. (At 24, 4 %, fifty browser tabs watching a 100,000-device send on this 2-core
    /// machine measured turns at 4.9 % of the send's CPU: Benchmarks/insight_watchers.sh with BROWSERS=1.)
    static let costFactor = 49.0

    public let maxWatchers: Int
    public let maxPerNotification: Int
    /// Past samples kept for the deliveries-over-time chart (one per turn).
    public static let maxSamples = 600

    /// What a turn reads: the event's JSON for a notification.
    public typealias Read = @Sendable (_ notificationID: String) async throws -> JSONValue

    struct Watch {
        var watchers: [UUID: AsyncStream<ByteBuffer>.Continuation] = [:]
        var task: Task<Void, Never>?
        /// A reader was started for it (set under the lock, so that two first watchers at once start one).
        var reading = false
        var last: ByteBuffer?
        var samples: [JSONValue] = []
    }

    private let state = NIOLockedValueBox<[String: Watch]>([:])
    private let read: Read
    let metrics: ServerMetrics?
    /// Seconds spent in turns (reading and writing), for the figure the benchmark reports.
    private let busy = NIOLockedValueBox<Double>(0)
    let minimumInterval: TimeInterval
    let keepAlive: TimeInterval

    public init(
        minimumInterval: TimeInterval = 1,
        keepAlive: TimeInterval = 15,
        maxWatchers: Int = 1_000,
        maxPerNotification: Int = 200,
        metrics: ServerMetrics? = nil,
        read: @escaping Read
    ) {
        self.maxWatchers = maxWatchers
        self.maxPerNotification = maxPerNotification
        self.read = read
        self.metrics = metrics
        self.minimumInterval = minimumInterval
        self.keepAlive = keepAlive
    }

    /// Seconds of turns so far.
    public var busySeconds: Double { busy.withLockedValue { $0 } }

    /// Watchers now, on all notifications.
    public var watchers: Int { state.withLockedValue { $0.values.reduce(0) { $0 + $1.watchers.count } } }

    /// A new watcher's stream of event bytes, or nil past the bounds. Ends when ``stop(_:_:)`` is called.
    func watch(_ notificationID: String) -> (UUID, AsyncStream<ByteBuffer>)? {
        let id = UUID()
        let (stream, continuation) = AsyncStream<ByteBuffer>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let started: Bool? = state.withLockedValue { all in
            let total = all.values.reduce(0) { $0 + $1.watchers.count }
            guard total < maxWatchers, all[notificationID, default: Watch()].watchers.count < maxPerNotification
            else { return nil }
            var w = all[notificationID, default: Watch()]
            w.watchers[id] = continuation
            if let last = w.last { continuation.yield(last) }
            let start = !w.reading
            w.reading = true
            all[notificationID] = w
            return start
        }
        guard let started else { return nil }
        if started {
            let task = Task { await self.run(notificationID) }
            state.withLockedValue { $0[notificationID]?.task = task }
        }
        continuation.onTermination = { [weak self] _ in self?.stop(notificationID, id) }
        return (id, stream)
    }

    /// A watcher left (its connection closed, or the server is stopping).
    func stop(_ notificationID: String, _ id: UUID) {
        let ended: (AsyncStream<ByteBuffer>.Continuation?, Task<Void, Never>?) = state.withLockedValue { all in
            guard var w = all[notificationID] else { return (nil, nil) }
            let c = w.watchers.removeValue(forKey: id)
            if w.watchers.isEmpty {
                all[notificationID] = nil
                return (c, w.task)
            }
            all[notificationID] = w
            return (c, nil)
        }
        ended.0?.finish()
        ended.1?.cancel()
    }

    /// Ends every stream (the server is stopping).
    public func closeAll() {
        let all = state.withLockedValue { s -> [String: Watch] in
            let copy = s
            s = [:]
            return copy
        }
        for w in all.values {
            w.task?.cancel()
            for c in w.watchers.values { c.finish() }
        }
    }

    func run(_ notificationID: String) async {
        var lastSent = ContinuousClock.now
        // Ends when its last watcher left (the entry is gone), even if that happened before its task was recorded.
        while !Task.isCancelled, state.withLockedValue({ $0[notificationID] != nil }) {
            let started = ContinuousClock.now
            var event: ByteBuffer?
            do {
                var body = try await read(notificationID)
                let sample = Self.sample(body)
                let samples: [JSONValue] = state.withLockedValue { all in
                    guard var w = all[notificationID] else { return [] }
                    if let sample, w.samples.last.map({ Self.sameCounts($0, sample) }) != true {
                        w.samples.append(sample)
                        if w.samples.count > Self.maxSamples {
                            w.samples.removeFirst(w.samples.count - Self.maxSamples)
                        }
                    }
                    all[notificationID] = w
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
            let changed: [AsyncStream<ByteBuffer>.Continuation] = state.withLockedValue { all in
                guard var w = all[notificationID] else { return [] }
                guard let event, w.last != event else { return [] }
                w.last = event
                all[notificationID] = w
                return Array(w.watchers.values)
            }
            if let event, !changed.isEmpty {
                for c in changed { c.yield(event) }
                lastSent = ContinuousClock.now
            } else if ContinuousClock.now - lastSent > .seconds(keepAlive) {
                var ping = ByteBuffer()
                ping.writeString(": still here\n\n")
                for c in state.withLockedValue({ $0[notificationID].map { Array($0.watchers.values) } ?? [] }) {
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
            try? await Task.sleep(nanoseconds: UInt64(min(wait, 15) * 1e9))
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
