import NIOCore

/// The life of one client HTTP/2 connection and the count of its streams, as a value: every event is a method that
/// changes it and says what the connection must do. The connection keeps one behind a lock; its frame observer
/// (SETTINGS, GOAWAY, the channel closing) and its senders drive it.
///
///     starting ──SETTINGS──▶ active ──GOAWAY──▶ goingAway
///                              │                    ▲
///                              └──retire──▶ retiring ┘ GOAWAY
///
/// and from any of them ──▶ closed.
///
/// An event that cannot happen in the state it finds (a stream ending that never started, a request sent before
/// the connection was ready) is a bug in the connection code: it comes back as ``IllegalTransition``, which stops a debug
/// build (``orAssert()``) and leaves the state as it was in a release build.
struct HTTP2ConnectionState: Sendable {
    enum Lifecycle: Equatable, Sendable {
        /// Connected; the server's first SETTINGS frame has not come.
        case starting
        /// Requests may be sent.
        case active
        /// The server sent GOAWAY: streams up to `lastStreamID` may finish; no new ones open.
        case goingAway(lastStreamID: Int, reason: String?)
        /// The client stopped sending on it (``retire(reason:)``): the streams in flight may finish; no new ones
        /// open, and the connection closes once none of them awaits an answer.
        case retiring
        /// The channel closed (either side): nothing more is sent.
        case closed
    }

    struct IllegalTransition: Error, Equatable, CustomStringConvertible {
        var event: String
        var state: Lifecycle
        var description: String { "HTTP/2 connection: \(event) in state \(state)" }
    }

    private(set) var lifecycle = Lifecycle.starting
    /// Why the connection failed before its first SETTINGS, when an error said so (a TLS error, a reset): kept for
    /// a connect that finds the channel closed already and cannot wait on it.
    var startError: TransportError?
    /// The server's MAX_CONCURRENT_STREAMS (100 until it says otherwise).
    private(set) var remoteMaxStreams = 100
    /// Streams sent or reserved and not yet ended.
    private(set) var inFlight = 0
    /// Streams taken by ``reserve(cap:)`` and not yet sent on (counted in `inFlight`).
    private(set) var reserved = 0
    /// Streams ended so far.
    private(set) var completed = 0
    /// Streams ended with an answer (a final status) so far.
    private(set) var answered = 0
    var lastActivity = NIODeadline.now()

    /// True while new requests may be sent.
    var isUsable: Bool { lifecycle == .active }

    /// The GOAWAY received, if any.
    var goAway: (lastStreamID: Int, reason: String?)? {
        if case .goingAway(let last, let reason) = lifecycle { return (last, reason) }
        return nil
    }

    /// Why the client retired the connection, if it did (kept once it has closed).
    private(set) var retiredBecause: String?

    // MARK: Frames and the channel

    enum SettingsAction: Equatable { case succeedReady, none }

    /// The server's SETTINGS: the first makes the connection ready; each may change the stream limit. One read
    /// after the client closed the connection (its close and the read crossed) changes nothing.
    mutating func settingsReceived(maxConcurrentStreams: Int?) -> Result<SettingsAction, IllegalTransition> {
        switch lifecycle {
        case .closed: return .success(.none)
        case .starting:
            if let m = maxConcurrentStreams { remoteMaxStreams = m }
            lifecycle = .active
            return .success(.succeedReady)
        case .active, .goingAway, .retiring:
            if let m = maxConcurrentStreams { remoteMaxStreams = m }
            return .success(.none)
        }
    }

    /// A GOAWAY: no new streams. A later GOAWAY may lower the last stream id; one that raises it is the server's
    /// error (RFC 9113, 6.8) and is not believed. One read after the close changes nothing.
    mutating func goAwayReceived(lastStreamID: Int, reason: String?) {
        switch lifecycle {
        case .closed: break
        case .starting, .active, .retiring:
            lifecycle = .goingAway(lastStreamID: lastStreamID, reason: reason)
        case .goingAway(let last, let earlier):
            lifecycle = .goingAway(lastStreamID: min(last, lastStreamID), reason: reason ?? earlier)
        }
    }

    /// The client stops sending on the connection: requests go to another; those in flight may finish. Only an
    /// active connection retires (one going away or closed already takes no requests).
    mutating func retire(reason: String) {
        guard lifecycle == .active else { return }
        lifecycle = .retiring
        retiredBecause = reason
    }

    enum CloseAction: Equatable { case failReady, none }

    /// The channel closed, or the client closes it: from any state, and more than once (a close the client asks
    /// for is followed by the channel's own).
    mutating func closed() -> CloseAction {
        let wasStarting = lifecycle == .starting
        lifecycle = .closed
        return wasStarting ? .failReady : .none
    }

    // MARK: Streams

    enum Admission: Equatable {
        /// Open the stream.
        case send
        /// Not sent: the connection is closed.
        case closed
        /// Not sent: the server is going away (the request may go on another connection).
        case goingAway(reason: String?)
    }

    /// A request about to be sent: counted unless it had a reservation (which already counts), or refused.
    mutating func admit() -> Result<Admission, IllegalTransition> {
        let hadReservation = reserved > 0
        if hadReservation { reserved -= 1 }
        let refusal: Admission
        switch lifecycle {
        case .active:
            if !hadReservation { inFlight += 1 }
            lastActivity = .now()
            return .success(.send)
        case .starting:
            if hadReservation { inFlight -= 1 }
            return .failure(.init(event: "a request before SETTINGS", state: lifecycle))
        case .closed: refusal = .closed
        case .goingAway(_, let reason): refusal = .goingAway(reason: reason)
        case .retiring: refusal = .goingAway(reason: retiredBecause)
        }
        if hadReservation { inFlight -= 1 }
        return .success(refusal)
    }

    /// A stream that ``admit()`` let through has ended (answered, reset, timed out).
    mutating func streamEnded() -> Result<Void, IllegalTransition> {
        guard inFlight > reserved else {
            return .failure(.init(event: "a stream ending with none open", state: lifecycle))
        }
        inFlight -= 1
        completed &+= 1
        lastActivity = .now()
        return .success(())
    }

    /// A stream's answer came whole (before its stream leaves: ``streamEnded()``).
    mutating func answerReceived() { answered &+= 1 }

    /// Takes one stream for a request about to be sent, if fewer than `cap` (and the server's limit) are in flight;
    /// with `cap` nil, always.
    mutating func reserve(cap: Int?) -> Bool {
        if let cap, min(cap, remoteMaxStreams) - inFlight <= 0 { return false }
        inFlight += 1
        reserved += 1
        return true
    }

    /// Gives back a reservation that was not sent on.
    mutating func releaseReservation() {
        guard reserved > 0 else { return }
        reserved -= 1
        inFlight -= 1
    }
}

extension Result where Failure == HTTP2ConnectionState.IllegalTransition {
    /// The action; an illegal transition stops a debug build (a bug in the connection code) and gives nil otherwise.
    func orAssert() -> Success? {
        switch self {
        case .success(let action): return action
        case .failure(let illegal):
            assertionFailure(illegal.description)
            return nil
        }
    }
}
