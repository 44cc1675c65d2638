import Foundation
import NIOConcurrencyHelpers

/// "Deliveries were queued": one event for the whole cluster. The store that queued them tells it (an accepted
/// notification's deliveries, each chunk of a fan-out, an update's); every worker of this node hears it at once,
/// and on a shared database the other nodes hear it through the database (PostgreSQL's `NOTIFY`, coalesced by the
/// announcer), whose listener tells their workers.
///
/// An event may say the earliest time among the deliveries queued (their `not_before`): a claim mark that sorts
/// before it stays (``ClaimMarks``). Without one (an update's deliveries, a notice whose payload did not read), every
/// mark goes.
public final class WorkQueued: Sendable {
    private let listeners = NIOLockedValueBox<[Call]>([])
    private let peers = NIOLockedValueBox<Call?>(nil)

    /// A closure kept in a lock is kept in a box of its own: a closure that is itself the lock's value, read back
    /// through the lock's inout access, is written back wrapped in one more reabstraction each time (after N tellings
    /// each telling walked N nested wrappers).
    private final class Call: Sendable {
        let run: @Sendable (Date?) -> Void
        init(_ run: @escaping @Sendable (Date?) -> Void) { self.run = run }
    }

    public init() {}

    /// `wake` is called at each event, this node's and the other nodes'.
    public func listen(_ wake: @escaping @Sendable () -> Void) { listenForTimes { _ in wake() } }

    /// `heard` is called at each event with the earliest time it names (nil: not known).
    public func listenForTimes(_ heard: @escaping @Sendable (_ earliest: Date?) -> Void) {
        listeners.withLockedValue { $0.append(Call(heard)) }
    }

    /// How the other nodes are told (set by a backend the nodes share).
    func tellPeers(through announce: @escaping @Sendable (_ earliest: Date?) -> Void) {
        peers.withLockedValue { $0 = Call(announce) }
    }

    /// Deliveries were queued on this node, none due before `earliest` (nil: not known): its workers and the other
    /// nodes hear of it.
    public func tell(earliest: Date? = nil) {
        heardFromPeer(earliest: earliest)
        peers.withLockedValue { $0 }?.run(earliest)
    }

    /// Another node queued deliveries: this node's workers hear of it.
    func heardFromPeer(earliest: Date? = nil) {
        for call in listeners.withLockedValue({ $0 }) { call.run(earliest) }
    }
}
