import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// The leases a worker holds: each delivery claimed and not yet settled, with the end of its lease (extended
/// while it is held), and those lost to another worker.
final class HeldLeases: Sendable {
    private struct State {
        var ends: [Int64: Date] = [:]
        var lost: Set<Int64> = []
    }
    private let state = NIOLockedValueBox(State())

    /// Deliveries just claimed, leased until `until`.
    func add(_ ids: [Int64], until: Date) {
        state.withLockedValue { s in for id in ids { s.ends[id] = until } }
    }

    var open: [Int64] { state.withLockedValue { Array($0.ends.keys) } }
    var count: Int { state.withLockedValue { $0.ends.count } }

    /// The latest end among these leases (a settle of them is worth trying until then).
    func end(of ids: [Int64]) -> Date {
        state.withLockedValue { s in ids.compactMap { s.ends[$0] }.max() ?? .distantPast }
    }

    /// Renewed leases get their new end; those the database no longer holds for this worker are lost. How many
    /// were newly lost.
    func extended(_ ids: [Int64], held: Set<Int64>, until: Date) -> Int {
        state.withLockedValue { s in
            var newlyLost = 0
            for id in ids where s.ends[id] != nil {
                if held.contains(id) {
                    s.ends[id] = until
                } else if s.lost.insert(id).inserted {
                    newlyLost += 1
                }
            }
            return newlyLost
        }
    }

    func settled(_ ids: [Int64]) {
        state.withLockedValue { s in
            for id in ids {
                s.ends[id] = nil
                s.lost.remove(id)
            }
        }
    }

    /// Whether a send may start: its lease is held (else `.lost`), and holds for `margin` more (else `.ending`).
    func mayStart(_ id: Int64, now: Date, margin: TimeInterval) -> StartVerdict {
        state.withLockedValue { s in
            guard !s.lost.contains(id), let end = s.ends[id] else { return .lost }
            return now.addingTimeInterval(margin) < end ? .go : .ending
        }
    }

    enum StartVerdict: String { case go, lost, ending }
}

/// Wakes a waiting worker early; a signal given while nobody waits is kept for the next wait. The wait's time limit
/// is a timer on an event loop, not a task, and the timer outlives the wait it was made for: a wait whose limit is
/// no earlier than the armed timer's keeps that timer rather than making its own. A busy worker waits once per send
/// that ends; scheduling and cancelling a timer for each (a hop to the event loop's thread and back) cost more than
/// the rest of the wait. A timer that fires before a wait's limit wakes it early: its loop looks again and waits
/// for what is left.
final class WakeSignal: Sendable {
    private struct State {
        var waiter: CheckedContinuation<Void, Never>?
        var pending = false
        /// When the armed timer fires (nil: none armed).
        var armed: NIODeadline?
    }
    private let state = NIOLockedValueBox(State())

    func signal() {
        let waiter = state.withLockedValue { s -> CheckedContinuation<Void, Never>? in
            guard let w = s.waiter else {
                s.pending = true
                return nil
            }
            s.waiter = nil
            return w
        }
        waiter?.resume()
    }

    /// Waits for a signal, `seconds` at most, or until the task is cancelled (a loop that waits this way checks
    /// its cancellation when it wakes).
    func waitUnlessCancelled(upTo seconds: TimeInterval) async {
        await withTaskCancellationHandler {
            await wait(upTo: seconds)
        } onCancel: {
            signal()
        }
    }

    /// Waits for a signal, `seconds` at most; cancellation does not end it.
    func wait(upTo seconds: TimeInterval) async {
        let due = NIODeadline.now() + .nanoseconds(Int64(min(max(0, seconds), 3600) * 1e9))
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let arm = state.withLockedValue { s -> Bool? in
                if s.pending {
                    s.pending = false
                    return nil
                }
                s.waiter = c
                // A timer armed for this limit or before it ends this wait too.
                if let armed = s.armed, armed <= due { return false }
                s.armed = due
                return true
            }
            guard let arm else { return c.resume() }
            guard arm else { return }
            MultiThreadedEventLoopGroup.singleton.next().scheduleTask(deadline: due) {
                let w = self.state.withLockedValue { s -> CheckedContinuation<Void, Never>? in
                    if s.armed == due { s.armed = nil }
                    defer { s.waiter = nil }
                    return s.waiter
                }
                w?.resume()
            }
        }
    }
}

/// The deadlines of a worker's sends in flight, checked by one sweep every `granularity` seconds while any is
/// registered: a deadline fires at its time or up to one granularity later, never earlier.
final class SendDeadlines: Sendable {
    private struct Entry {
        let due: NIODeadline
        let fire: @Sendable () -> Void
    }
    private struct State {
        var next: UInt64 = 0
        var entries: [UInt64: Entry] = [:]
        var sweeping = false
    }
    private let state = NIOLockedValueBox(State())
    private let granularity: TimeAmount

    init(granularity: TimeInterval) {
        self.granularity = .nanoseconds(Int64(max(0.001, min(granularity, 60)) * 1e9))
    }

    /// Registers `fire` to run once `seconds` have passed, unless removed first; returns its key.
    func add(after seconds: TimeInterval, fire: @escaping @Sendable () -> Void) -> UInt64 {
        let due = NIODeadline.now() + .nanoseconds(Int64(seconds * 1e9))
        let (key, start) = state.withLockedValue { s -> (UInt64, Bool) in
            s.next &+= 1
            s.entries[s.next] = Entry(due: due, fire: fire)
            let start = !s.sweeping
            s.sweeping = true
            return (s.next, start)
        }
        if start { scheduleSweep() }
        return key
    }

    func remove(_ key: UInt64) { state.withLockedValue { _ = $0.entries.removeValue(forKey: key) } }

    var count: Int { state.withLockedValue { $0.entries.count } }

    private func scheduleSweep() {
        MultiThreadedEventLoopGroup.singleton.next().scheduleTask(in: granularity) { self.sweep() }
    }

    private func sweep() {
        let now = NIODeadline.now()
        let (due, again) = state.withLockedValue { s -> ([Entry], Bool) in
            var due: [Entry] = []
            for (key, entry) in s.entries where entry.due <= now {
                due.append(entry)
                s.entries[key] = nil
            }
            s.sweeping = !s.entries.isEmpty
            return (due, s.sweeping)
        }
        for entry in due { entry.fire() }
        if again { scheduleSweep() }
    }
}
