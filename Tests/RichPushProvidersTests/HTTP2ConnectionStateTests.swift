import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import Testing

@testable import RichPushTransport

/// The connection's life as a value: each event's effect and action, and the events that cannot happen where they
/// find it, which come back as illegal (a debug build stops on them in the connection).
@Suite struct HTTP2ConnectionStateTests {
    typealias State = HTTP2ConnectionState

    static func isIllegal<T>(_ result: Result<T, State.IllegalTransition>) -> Bool {
        if case .failure = result { return true }
        return false
    }

    @Test func theFirstSettingsMakeItReadyAndLaterOnesOnlyMoveTheLimit() {
        var s = State()
        #expect(s.lifecycle == .starting && !s.isUsable)
        let first = s.settingsReceived(maxConcurrentStreams: 1)
        #expect(first == .success(.succeedReady))
        #expect(s.isUsable && s.remoteMaxStreams == 1)
        let second = s.settingsReceived(maxConcurrentStreams: 1000)
        #expect(second == .success(.none))
        #expect(s.remoteMaxStreams == 1000)
        _ = s.settingsReceived(maxConcurrentStreams: nil)
        #expect(s.remoteMaxStreams == 1000)
    }

    @Test func streamsAreCountedFromAdmissionToTheirEnd() {
        var s = State()
        _ = s.settingsReceived(maxConcurrentStreams: 2)
        let sent = s.admit()
        #expect(sent == .success(.send))
        #expect(s.inFlight == 1)
        // Reservations count at once and are either sent (no second count) or given back.
        let reserved = s.reserve(cap: 10)
        let overLimit = s.reserve(cap: 10)  // the server's limit of 2
        #expect(reserved && !overLimit)
        #expect(s.inFlight == 2 && s.reserved == 1)
        let sentReserved = s.admit()
        #expect(sentReserved == .success(.send))
        #expect(s.inFlight == 2 && s.reserved == 0)
        let ends = [s.streamEnded(), s.streamEnded()]
        #expect(!ends.contains(where: Self.isIllegal))
        #expect(s.inFlight == 0 && s.completed == 2)
        let again = s.reserve(cap: nil)
        #expect(again)
        s.releaseReservation()
        s.releaseReservation()  // nothing to give back: no change
        #expect(s.inFlight == 0 && s.reserved == 0)
    }

    @Test func goAwayStopsNewStreamsAndOnlyLowersTheLastID() {
        var s = State()
        _ = s.settingsReceived(maxConcurrentStreams: 10)
        _ = s.reserve(cap: nil)
        s.goAwayReceived(lastStreamID: 7, reason: "Shutdown")
        #expect(!s.isUsable)
        // The reserved request is not sent, and its reservation is given back.
        let refused = s.admit()
        #expect(refused == .success(.goingAway(reason: "Shutdown")))
        #expect(s.inFlight == 0 && s.reserved == 0)
        s.goAwayReceived(lastStreamID: 9, reason: nil)
        #expect(s.goAway?.lastStreamID == 7 && s.goAway?.reason == "Shutdown")
        s.goAwayReceived(lastStreamID: 3, reason: nil)
        #expect(s.goAway?.lastStreamID == 3)
    }

    @Test func closingFailsAReadyThatNeverCameAndIsFinal() {
        var starting = State()
        let first = starting.closed()
        let second = starting.closed()  // the client's close, then the channel's own
        #expect(first == .failReady && second == .none)
        var s = State()
        _ = s.settingsReceived(maxConcurrentStreams: 10)
        let close = s.closed()
        #expect(close == .none)
        let refused = s.admit()
        #expect(refused == .success(.closed))
        // Frames read as the close crossed them change nothing.
        let late = s.settingsReceived(maxConcurrentStreams: 5)
        #expect(late == .success(.none))
        s.goAwayReceived(lastStreamID: 1, reason: nil)
        #expect(s.lifecycle == .closed && s.remoteMaxStreams == 10)
    }

    @Test func eventsThatCannotHappenAreIllegal() {
        var s = State()
        let early = s.admit()
        #expect(Self.isIllegal(early))
        #expect(s.inFlight == 0)
        _ = s.settingsReceived(maxConcurrentStreams: 10)
        let noneOpen = s.streamEnded()
        #expect(Self.isIllegal(noneOpen))
        // A reservation is not an open stream.
        _ = s.reserve(cap: nil)
        let reservedOnly = s.streamEnded()
        #expect(Self.isIllegal(reservedOnly))
        #expect(s.inFlight == 1 && s.completed == 0)
    }

    /// The pool's lifecycle: once shut down there are no slots to fill (a connect that ends later finds none) and
    /// every request is refused, without a flag to forget to check.
    @Test func aPoolShutDownHasNoSlotsAndRefusesRequests() throws {
        typealias PoolState = HTTP2ConnectionPool<Int>.State
        var s = PoolState.running(
            .init(slots: [.empty(failures: 0, notBefore: .now()), .empty(failures: 2, notBefore: .now())])
        )
        let setInside = s.set(1, to: .empty(failures: 3, notBefore: .now()))
        let setOutside = s.set(2, to: .empty(failures: 0, notBefore: .now()))
        #expect(setInside && !setOutside)
        let id = try s.whileRunning { r -> Int in
            r.nextID += 1
            return r.nextID
        }
        #expect(id == 1 && s.slots.count == 2)
        // A body that throws leaves the pool running, its changes kept.
        struct Stop: Error {}
        var thrown: (any Error)?
        do {
            try s.whileRunning { r in
                r.nextID += 1
                throw Stop()
            }
        } catch { thrown = error }
        let kept = try s.whileRunning { $0.nextID }
        #expect(thrown is Stop && kept == 2)
        let closing = s.shutDown()
        #expect(closing.slots.count == 2 && closing.draining.isEmpty && s.slots.isEmpty)
        let setAfter = s.set(0, to: .empty(failures: 0, notBefore: .now()))
        var refused: (any Error)?
        do { _ = try s.whileRunning { $0.nextID } } catch { refused = error }
        let again = s.shutDown()
        #expect(!setAfter && refused is TransportError && again.slots.isEmpty)
    }

    /// Connections going away are kept aside, at most one still open per slot: past that the oldest open one is
    /// handed back to be closed, and it stays on the list (a shutdown before its close still closes it; it was
    /// taken off the list first, and a shutdown in between returned with it open). One already closed does not
    /// count.
    @Test func connectionsSetAsideStayOnTheListUntilTheyHaveClosed() throws {
        typealias Pool = HTTP2ConnectionPool<Int>
        func connection(_ id: Int) -> Pool.Pooled {
            let channel = EmbeddedChannel()
            let state = NIOLockedValueBox(HTTP2ConnectionState())
            let c = HTTP2ClientConnection(
                channel: channel,
                streams: HTTP2StreamTable(connectionState: state),
                state: state,
                authority: "127.0.0.1",
                ready: channel.eventLoop.makeSucceededVoidFuture()
            )
            return Pool.Pooled(connection: c, extra: id, id: id)
        }
        var running = Pool.State.Running(slots: [.empty(failures: 0, notBefore: .now())])
        let (a, b, c) = (connection(1), connection(2), connection(3))
        let none = running.setAside(a)
        #expect(none == nil)
        let cutOne = running.setAside(b)
        let cut = try #require(cutOne)
        #expect(cut.id == 1 && running.draining.map(\.id) == [1, 2])
        var s = Pool.State.running(running)
        let (_, draining) = s.shutDown()
        #expect(draining.map(\.id) == [1, 2])
        // Once the cut one has closed, it no longer counts against the bound.
        a.connection.close()
        let next = running.setAside(c)
        #expect(next?.id == 2)
        b.connection.close()
        c.connection.close()
    }
}
