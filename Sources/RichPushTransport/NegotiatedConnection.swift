import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP2
import NIOSSL
import NIOTLS

/// A connection to a server that may speak HTTP/2 or HTTP/1.1: TLS offers both by ALPN (`h2` first) and the
/// server's choice decides. A server that chooses nothing speaks HTTP/1.1: HTTP/2 over TLS is only ever chosen by
/// ALPN (RFC 9113, section 3.2). A Web Push service is any server a subscription names, and not all of them speak
/// HTTP/2.
///
/// ```swift
/// switch try await NegotiatedConnection.connect(to: target, group: group) {
/// case .http2(let c): …   // multiplexed: an HTTP2ConnectionPool adopts it
/// case .http1(let c): …   // one request at a time: an HTTP1ConnectionPool adopts it
/// }
/// ```
public enum NegotiatedConnection: Sendable {
    case http2(HTTP2ClientConnection)
    case http1(HTTP1ClientConnection)

    /// Connects, completes TLS offering `protocols` (in order of preference: `h2`, `http/1.1`), and sets the
    /// connection up for the protocol the server chose; an HTTP/2 one once the server's SETTINGS came.
    public static func connect(
        to target: HTTP2ClientConnection.Target,
        group: EventLoopGroup,
        protocols: [String] = ["h2", "http/1.1"],
        timeout: TimeAmount = .seconds(10)
    ) async throws -> NegotiatedConnection {
        do {
            let context = try target.tlsContext(alpn: protocols)
            let (channel, chosen) = try await target.connect(group: group, timeout: timeout) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(target.tlsHandler(context))
                    let chosen = channel.eventLoop.makePromise(of: ProtocolChoice.Chosen.self)
                    try channel.pipeline.syncOperations.addHandler(
                        ProtocolChoice(chosen: chosen, authority: target.authority)
                    )
                    return (channel, chosen.futureResult)
                }
            }
            // The handshake (and, for HTTP/2, the first SETTINGS) within the timeout, or the connection closes.
            let expired = NIOLockedValueBox(false)
            let deadline = channel.eventLoop.scheduleTask(in: timeout) {
                expired.withLockedValue { $0 = true }
                channel.close(promise: nil)
            }
            defer { deadline.cancel() }
            let choice: ProtocolChoice.Chosen
            do {
                choice = try await chosen.get()
            } catch TransportError.connectFailed(_, .closedInHandshake) where expired.withLockedValue({ $0 }) {
                // Closed by the deadline above, not by the server.
                throw TransportError.connectFailed(
                    "\(target.host):\(target.port): the TCP connection was made but its TLS handshake had not ended "
                        + "within \(Double(timeout.nanoseconds) / 1e9) s",
                    stage: .handshakeTimedOut
                )
            }
            switch choice {
            case let .http2(streams, ready, state):
                return .http2(
                    try await HTTP2ClientConnection.started(
                        channel: channel,
                        streams: streams,
                        state: state,
                        ready: ready,
                        target: target,
                        timeout: timeout
                    )
                )
            case .http1(let connection):
                return .http1(connection)
            }
        } catch {
            throw TransportError.connectFailure(error, context: "\(target.host):\(target.port)")
        }
    }
}

/// Waits for the TLS handshake and sets the connection up for the protocol the server chose (HTTP/2 for `h2`,
/// HTTP/1.1 otherwise) in the same turn of the event loop, before any byte the server sent after it is read; then
/// leaves the pipeline. Fails if the connection ends or breaks first.
final class ProtocolChoice: ChannelInboundHandler, RemovableChannelHandler, @unchecked Sendable {
    // @unchecked: lives on its channel's event loop.
    typealias InboundIn = NIOAny

    enum Chosen: Sendable {
        case http2(HTTP2StreamTable, EventLoopFuture<Void>, NIOLockedValueBox<HTTP2ConnectionState>)
        case http1(HTTP1ClientConnection)
    }

    let chosen: EventLoopPromise<Chosen>
    let authority: String
    private var done = false

    init(chosen: EventLoopPromise<Chosen>, authority: String) {
        self.chosen = chosen
        self.authority = authority
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case let TLSUserEvent.handshakeCompleted(negotiatedProtocol) = event, !done {
            done = true
            do {
                if negotiatedProtocol == "h2" {
                    let state = NIOLockedValueBox(HTTP2ConnectionState())
                    let (streams, ready) = try HTTP2ClientConnection.installHTTP2(on: context.channel, state: state)
                    chosen.succeed(.http2(streams, ready, state))
                } else {
                    chosen.succeed(.http1(try HTTP1ClientConnection.install(on: context.channel, authority: authority)))
                }
            } catch {
                chosen.fail(TransportError.connectFailure(error))
                context.close(promise: nil)
            }
            context.pipeline.syncOperations.removeHandler(self, promise: nil)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        if !done {
            done = true
            chosen.fail(TransportError.connectFailure(error, connected: true))
        }
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        if !done {
            done = true
            chosen.fail(TransportError.connectFailed("closed during the TLS handshake", stage: .closedInHandshake))
        }
        context.fireChannelInactive()
    }

    /// A channel whose connect was refused never becomes active and closes without `channelInactive`: the handler
    /// leaves the pipeline then. (Its promise left unanswered was a crash of a debug build, the first time a Web Push
    /// service refused a connection.)
    func handlerRemoved(context: ChannelHandlerContext) {
        if !done {
            done = true
            chosen.fail(TransportError.connectFailed("closed before the TLS handshake"))
        }
    }
}
