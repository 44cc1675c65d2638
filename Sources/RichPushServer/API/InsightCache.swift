import Foundation
import NIOConcurrencyHelpers
import RichPushCore

/// One notification's numbers as the read routes show them: its deliveries by state, reason and whether they were
/// tried, the devices' reports and the opens in sum, and the opens over time.
public struct NotificationNumbers: Sendable {
    public var breakdown: [DeliveryBreakdown]
    public var receipts: ReceiptSummary
    public var opens: OpenSummary
    /// Opens per 10 minutes: the start of each (seconds since 1970) and the count.
    public var timeline: [(start: Int64, opens: Int)]

    public var funnel: Funnel { Funnel(breakdown: breakdown, receipts: receipts, opens: opens) }
    public var byState: [DeliveryState: Int] { InsightCache.byState(breakdown) }
}

/// A notification's deliveries as one read found them.
public struct DeliveryTally: Sendable {
    public var breakdown: [DeliveryBreakdown]
    /// Its registry fan-out was still adding deliveries when they were read: more may come.
    public var fanningOut: Bool

    public var byState: [DeliveryState: Int] { InsightCache.byState(breakdown) }
}

/// The read routes' numbers of each notification, shared by every reader on this node: the funnel route, the live
/// view's turns (``InsightStreams``), a notification's outcome and the list's counts all read through it. Whatever
/// the readers, each notification's numbers are read from the database at most once a second, and no sooner than
/// ``defaultCostFactor`` times what the last read cost after it (a 200,000-delivery send's funnel costs about 150 ms to
/// read: it is then read at most every 7 s, 2 % of one core's time), never later than ``maxInterval``. Readers
/// that come while a read runs wait for it rather than each reading (single flight).
///
/// Two parts, each on its own schedule: the deliveries (what the counts need) and the reports (the receipts and
/// opens the funnel adds). A notification none of whose deliveries can change again (its fan-out done, none queued
/// or leased) keeps its deliveries' part for good, in a bounded table of its own: only the devices' reports are
/// read again.
/// Bounded: at most `capacity` notifications of each part, the least recently read out first.
public final class InsightCache: Sendable {
    /// A read waits this many times its own cost before the next: at most 1 / (1 + costFactor) of one core, 2 %.
    public static let defaultCostFactor = 49.0

    public typealias ReadDeliveries = @Sendable (_ notificationID: String) async throws -> [DeliveryBreakdown]
    /// Whether the notification's fan-out is still adding deliveries.
    public typealias ReadFanningOut = @Sendable (_ notificationID: String) async throws -> Bool
    public typealias ReadReports =
        @Sendable (_ notificationID: String) async throws -> (
            ReceiptSummary, OpenSummary, [(start: Int64, opens: Int)]
        )
    typealias Reports = (receipts: ReceiptSummary, opens: OpenSummary, timeline: [(start: Int64, opens: Int)])

    let minimumInterval: TimeInterval
    let maxInterval: TimeInterval
    let costFactor: Double
    private let deliveries: ReadCache<DeliveryTally>
    private let reports: ReadCache<Reports>
    private let settled: NIOLockedValueBox<LRU<DeliveryTally>>
    private let readDeliveries: ReadDeliveries
    private let readFanningOut: ReadFanningOut
    private let readReports: ReadReports
    /// Reads made of each part (for tests and the benchmark).
    private let reads = NIOLockedValueBox((deliveries: 0, reports: 0))

    public init(
        minimumInterval: TimeInterval = 1,
        maxInterval: TimeInterval = 15,
        costFactor: Double = InsightCache.defaultCostFactor,
        capacity: Int = 10_000,
        deliveries: @escaping ReadDeliveries,
        fanningOut: @escaping ReadFanningOut = { _ in false },
        reports: @escaping ReadReports
    ) {
        self.minimumInterval = minimumInterval
        self.maxInterval = max(minimumInterval, maxInterval)
        self.costFactor = costFactor
        self.deliveries = ReadCache(capacity: capacity)
        self.reports = ReadCache(capacity: capacity)
        settled = NIOLockedValueBox(LRU(capacity: capacity))
        readDeliveries = deliveries
        readFanningOut = fanningOut
        readReports = reports
    }

    /// The cache over a backend's receipt store, and its notifications' families (whose root's fan-out may still
    /// be adding deliveries).
    public convenience init(
        receipts: any ReceiptStore,
        updates: any NotificationUpdates,
        minimumInterval: TimeInterval = 1
    ) {
        self.init(
            minimumInterval: minimumInterval,
            deliveries: { try await receipts.breakdown(notificationID: $0) },
            fanningOut: { try await updates.family(of: $0)?.fanOutPending ?? false },
            reports: { id in
                (
                    try await receipts.summary(notificationID: id), try await receipts.openSummary(notificationID: id),
                    try await receipts.openTimeline(notificationID: id)
                )
            }
        )
    }

    /// How long a read that cost `seconds` stays fresh.
    func lifetime(cost seconds: Double) -> TimeInterval {
        min(maxInterval, max(minimumInterval, seconds * costFactor))
    }

    /// The notification's deliveries by state, reason and whether tried, and whether its fan-out was still adding
    /// deliveries when they were read.
    public func tally(_ id: String) async throws -> DeliveryTally {
        if let kept = settled.withLockedValue({ $0.get(id) }) { return kept }
        return try await deliveries.value(id, lifetime: lifetime(cost:)) {
            [readDeliveries, readFanningOut, settled, reads] in
            reads.withLockedValue { $0.deliveries += 1 }
            // The fan-out's state first: found done, every delivery it made is committed before the read below, so
            // the pair never says "done" beside deliveries a chunk had not yet added.
            let fanningOut = try await readFanningOut(id)
            let fresh = DeliveryTally(breakdown: try await readDeliveries(id), fanningOut: fanningOut)
            // Its fan-out done, none queued or leased and at least one: no delivery of it will change state again.
            // (One not yet fanned out has none; one between two chunks of its fan-out may have none waiting.)
            let byState = fresh.byState
            if !fanningOut, !fresh.breakdown.isEmpty, byState[.queued, default: 0] == 0,
                byState[.leased, default: 0] == 0
            {
                settled.withLockedValue { $0.set(id, fresh) }
            }
            return fresh
        }
    }

    /// The notification's deliveries by state, reason and whether tried.
    public func breakdown(_ id: String) async throws -> [DeliveryBreakdown] { try await tally(id).breakdown }

    /// The notification's deliveries by state.
    public func counts(_ id: String) async throws -> [DeliveryState: Int] { try await tally(id).byState }

    /// All of the notification's numbers (the funnel, the live view).
    public func numbers(_ id: String) async throws -> NotificationNumbers {
        async let breakdown = breakdown(id)
        let r = try await reports.value(id, lifetime: lifetime(cost:)) { [readReports, reads] in
            reads.withLockedValue { $0.reports += 1 }
            let (receipts, opens, timeline) = try await readReports(id)
            return (receipts, opens, timeline)
        }
        return NotificationNumbers(
            breakdown: try await breakdown,
            receipts: r.receipts,
            opens: r.opens,
            timeline: r.timeline
        )
    }

    /// Reads made so far: of the deliveries' part and of the reports' part.
    public var readsMade: (deliveries: Int, reports: Int) { reads.withLockedValue { $0 } }

    /// Notifications whose deliveries' part is kept for good.
    public var settledCount: Int { settled.withLockedValue { $0.count } }

    static func byState(_ breakdown: [DeliveryBreakdown]) -> [DeliveryState: Int] {
        var out: [DeliveryState: Int] = [:]
        for b in breakdown { out[b.state, default: 0] += b.count }
        return out
    }
}

/// Values by key, each read once however many ask at once and kept for a lifetime its read's cost decides: a
/// reader finds a fresh value, or joins the read under way, or makes one itself. At most `capacity` keys, the least
/// recently used out first (the readers waiting on a read whose entry was pushed out still get its value).
///
/// The read runs in the task of the reader that made it: if that reader goes away (its request cancelled), those
/// waiting on it are told to try again, and the first of them reads.
final class ReadCache<Value: Sendable>: Sendable {
    enum Entry: Sendable {
        case ready(Value, until: ContinuousClock.Instant)
        case reading
    }

    /// What a reader found: a fresh value, a read to make, or (after waiting) another reader's result; nil when
    /// that reader went away before it had one.
    private enum Turn: Sendable {
        case fresh(Value)
        case read
        case joined(Result<Value, any Error>?)
    }

    private struct State {
        var entries: LRU<Entry>
        var waiting: [String: [CheckedContinuation<Turn, Never>]] = [:]
    }

    private let state: NIOLockedValueBox<State>

    init(capacity: Int) { state = NIOLockedValueBox(State(entries: LRU(capacity: max(1, capacity)))) }

    /// The value of `key`: fresh, or from the read under way, or from a new read (whose cost in seconds
    /// `lifetime` turns into how long it stays fresh). A failed read is not kept: the next reader reads again.
    func value(
        _ key: String,
        lifetime: @escaping @Sendable (Double) -> TimeInterval,
        read: @escaping @Sendable () async throws -> Value
    ) async throws -> Value {
        let clock = ContinuousClock()
        while true {
            try Task.checkCancellation()
            let turn = await withCheckedContinuation { (c: CheckedContinuation<Turn, Never>) in
                let now = state.withLockedValue { s -> Turn? in
                    switch s.entries.get(key) {
                    case .ready(let v, let until)? where clock.now < until:
                        return .fresh(v)
                    case .reading?:
                        s.waiting[key, default: []].append(c)
                        return nil
                    default:
                        s.entries.set(key, .reading)
                        return .read
                    }
                }
                if let now { c.resume(returning: now) }
            }
            switch turn {
            case .fresh(let v): return v
            case .joined(let result?): return try result.get()
            case .joined(nil): continue
            case .read: break
            }
            let started = clock.now
            do {
                let v = try await read()
                let cost = started.duration(to: clock.now)
                let seconds = Double(cost.components.seconds) + Double(cost.components.attoseconds) / 1e18
                let until = clock.now.advanced(by: .milliseconds(Int64(lifetime(seconds) * 1000)))
                finish(key, .ready(v, until: until), answer: .success(v))
                return v
            } catch {
                // A reader that went away has no answer for the others: they try again.
                finish(key, nil, answer: Task.isCancelled ? nil : .failure(error))
                throw error
            }
        }
    }

    /// Keeps a read's value (nil: forgets the key) and answers those waiting on it.
    private func finish(_ key: String, _ entry: Entry?, answer: Result<Value, any Error>?) {
        let waiters = state.withLockedValue { s -> [CheckedContinuation<Turn, Never>] in
            if let entry { s.entries.set(key, entry) } else { s.entries.remove(key) }
            return s.waiting.removeValue(forKey: key) ?? []
        }
        for w in waiters { w.resume(returning: .joined(answer)) }
    }

    var count: Int { state.withLockedValue { $0.entries.count } }
}
