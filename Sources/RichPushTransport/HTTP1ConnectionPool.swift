import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore

/// At most `connections` HTTP/1.1 connections to one server, each carrying one request at a time: a request takes
/// an idle connection, or opens one while there are fewer than `connections`, or waits in line for one to come back
/// (first come, first served; a waiter whose task is cancelled leaves the line). A connection the server closed,
/// or that broke, is dropped and replaced on demand. Requests that could not have reached the server (a failed
/// connect, a connection closed before the request went) are tried again, up to `maxAttempts`.
public final class HTTP1ConnectionPool: Sendable {
    public struct Configuration: Sendable {
        public var target: HTTP2ClientConnection.Target
        /// The most connections open at once: the most requests in flight.
        public var connections: Int
        public var connectTimeout: TimeAmount
        public var requestTimeout: TimeAmount
        public var maxAttempts: Int
        public var logger: Logger

        public init(
            target: HTTP2ClientConnection.Target,
            connections: Int = 8,
            connectTimeout: TimeAmount = .seconds(10),
            requestTimeout: TimeAmount = .seconds(10),
            maxAttempts: Int = 3,
            logger: Logger = .disabled
        ) {
            self.target = target
            self.connections = max(1, connections)
            self.connectTimeout = connectTimeout
            self.requestTimeout = requestTimeout
            self.maxAttempts = max(1, maxAttempts)
            var logger = logger
            logger[metadataKey: "server"] = "\(target.host):\(target.port)"
            self.logger = logger
        }
    }

    private struct Waiter {
        let id: UInt64
        let continuation: CheckedContinuation<Lease, Error>
    }

    /// What a request got: an idle connection, or the right to open one.
    enum Lease: Sendable {
        case connection(HTTP1ClientConnection)
        case open
    }

    private struct State {
        var idle: [HTTP1ClientConnection] = []
        /// Connections lent out or being opened.
        var busy = 0
        var waiters: [Waiter] = []
        var nextWaiter: UInt64 = 0
        var shutDown = false
    }

    public let configuration: Configuration
    let group: EventLoopGroup
    private let state = NIOLockedValueBox(State())

    public init(configuration: Configuration, group: EventLoopGroup) {
        self.configuration = configuration
        self.group = group
    }

    /// Takes a connection made elsewhere (the one whose ALPN chose HTTP/1.1) as an idle one; closed when the pool
    /// is full or shut down.
    public func adopt(_ connection: HTTP1ClientConnection) {
        let kept = state.withLockedValue { s -> Bool in
            guard !s.shutDown, s.idle.count + s.busy < configuration.connections else { return false }
            s.idle.append(connection)
            return true
        }
        if kept { handOff() } else { connection.close() }
    }

    /// Sends a request on a connection of its own and waits for its whole response.
    public func execute(_ request: H2Request) async throws -> H2Response {
        var attempt = 0
        while true {
            attempt += 1
            let connection: HTTP1ClientConnection
            do { connection = try await acquire() } catch let error as TransportError {
                if error.safeToRetry && attempt < configuration.maxAttempts { continue }
                throw error
            }
            do {
                let response = try await connection.send(request, timeout: configuration.requestTimeout)
                giveBack(connection)
                return response
            } catch let error as TransportError {
                giveBack(connection)
                if error.safeToRetry && attempt < configuration.maxAttempts { continue }
                throw error
            } catch {
                giveBack(connection)
                throw error
            }
        }
    }

    /// Connections open and idle now (for tests).
    public var idleCount: Int { state.withLockedValue { $0.idle.count } }
    /// Connections lent out or being opened now.
    public var busyCount: Int { state.withLockedValue { $0.busy } }

    /// An idle usable connection, or a new one while there is room, or the next one given back.
    func acquire() async throws -> HTTP1ClientConnection {
        let lease: Lease
        let waiterID = state.withLockedValue { s -> UInt64 in
            s.nextWaiter &+= 1
            return s.nextWaiter
        }
        lease = try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<Lease, Error>) in
                let now = state.withLockedValue { s -> Result<Lease, Error>? in
                    if s.shutDown { return .failure(TransportError.shutDown) }
                    while let next = s.idle.popLast() {
                        if next.isUsable {
                            s.busy += 1
                            return .success(.connection(next))
                        }
                        next.close()
                    }
                    if s.busy < configuration.connections {
                        s.busy += 1
                        return .success(.open)
                    }
                    // Cancelled before it could join the line: the handler below found nobody to end.
                    if Task.isCancelled { return .failure(CancellationError()) }
                    s.waiters.append(Waiter(id: waiterID, continuation: c))
                    return nil
                }
                if let now { c.resume(with: now) }
            }
        } onCancel: {
            let waiter = state.withLockedValue { s -> Waiter? in
                guard let i = s.waiters.firstIndex(where: { $0.id == waiterID }) else { return nil }
                return s.waiters.remove(at: i)
            }
            waiter?.continuation.resume(throwing: CancellationError())
        }
        switch lease {
        case .connection(let c): return c
        case .open:
            do {
                switch try await NegotiatedConnection.connect(
                    to: configuration.target,
                    group: group,
                    protocols: ["http/1.1"],
                    timeout: configuration.connectTimeout
                ) {
                case .http1(let c): return c
                case .http2(let c):
                    // Only HTTP/1.1 was offered: a server that answers otherwise is not followed.
                    c.close()
                    throw TransportError.connectFailed("the server chose h2, which was not offered", stage: .tls)
                }
            } catch {
                configuration.logger.warning("could not connect", metadata: ["error": "\(error)"])
                releaseSlot()
                throw error
            }
        }
    }

    /// A connection lent out comes back: to the next waiter, or idle; a broken one frees its slot.
    func giveBack(_ connection: HTTP1ClientConnection) {
        guard connection.isUsable else {
            connection.close()
            releaseSlot()
            return
        }
        let waiter = state.withLockedValue { s -> Waiter? in
            if s.shutDown {
                s.busy -= 1
                return nil
            }
            if !s.waiters.isEmpty { return s.waiters.removeFirst() }
            s.busy -= 1
            s.idle.append(connection)
            return nil
        }
        if let waiter {
            waiter.continuation.resume(returning: .connection(connection))
        } else if isShutDown {
            connection.close()
        }
    }

    /// A slot freed without a connection: the next waiter opens one.
    private func releaseSlot() {
        let waiter = state.withLockedValue { s -> Waiter? in
            if !s.shutDown, !s.waiters.isEmpty { return s.waiters.removeFirst() }
            s.busy -= 1
            return nil
        }
        waiter?.continuation.resume(returning: .open)
    }

    /// An adopted connection may serve a waiter at once.
    private func handOff() {
        let pair = state.withLockedValue { s -> (Waiter, HTTP1ClientConnection)? in
            guard !s.waiters.isEmpty, let c = s.idle.popLast() else { return nil }
            s.busy += 1
            return (s.waiters.removeFirst(), c)
        }
        if let (w, c) = pair { w.continuation.resume(returning: .connection(c)) }
    }

    private var isShutDown: Bool { state.withLockedValue { $0.shutDown } }

    /// Closes every connection; waiting and later requests fail with ``TransportError/shutDown``.
    public func shutdown() async {
        for closed in close() { try? await closed.get() }
    }

    /// Starts closing the idle connections, refuses the waiting requests and takes no more, without waiting: each
    /// future ends when its connection has closed (one in use closes when its request ends).
    @discardableResult
    public func close() -> [EventLoopFuture<Void>] {
        let (idle, waiters) = state.withLockedValue { s -> ([HTTP1ClientConnection], [Waiter]) in
            s.shutDown = true
            defer {
                s.idle.removeAll()
                s.waiters.removeAll()
            }
            return (s.idle, s.waiters)
        }
        for w in waiters { w.continuation.resume(throwing: TransportError.shutDown) }
        for c in idle { c.close() }
        return idle.map(\.closeFuture)
    }
}
