import NIOCore
import NIOHPACK
import NIOSSL

/// One HTTP/2 request.
public struct H2Request: Sendable {
    public var method: String
    public var path: String
    public var headers: [(String, String)]
    public var body: ByteBuffer?
    /// Whether `:path` may enter the connection's HPACK table (RFC 7541, 7.1: a value that will not come again is
    /// better not indexed). A path naming one device (APNs' `/3/device/<token>`, a Web Push subscription's) is
    /// never sent twice on a connection: indexed, each one pushed a useful entry (the provider token, the topic) out
    /// of the table, and the encoder compared every later header with a table full of such paths.
    public var indexesPath: Bool

    public init(
        method: String = "POST",
        path: String,
        headers: [(String, String)],
        body: ByteBuffer?,
        indexesPath: Bool = true
    ) {
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
        self.indexesPath = indexesPath
    }
}

/// One HTTP/2 response.
public struct H2Response: Sendable {
    public var status: Int
    public var headers: HPACKHeaders
    public var body: ByteBuffer?

    public var bodyBytes: [UInt8] { body.map { Array($0.readableBytesView) } ?? [] }
}

/// Failures below HTTP: the request may be retried when `retryable` says the server did not process it.
public enum TransportError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The server refused the stream before processing it (RST_STREAM REFUSED_STREAM).
    case streamRefused
    /// The connection is going away; the request was not processed when `processed` is false.
    case goingAway(reason: String?, processed: Bool)
    /// The connection closed while the request was in flight: it may or may not have been processed.
    case connectionClosed
    /// The connection closed before the request's stream opened: nothing was sent.
    case notSent
    /// No complete response within the request timeout.
    case timedOut
    /// The stream was reset by the server with this HTTP/2 error code.
    case streamReset(code: Int)
    /// A connection could not be made; `stage` says how far it got.
    case connectFailed(String, stage: ConnectStage = .tcp)
    /// The client was shut down.
    case shutDown
    /// The response's body went past the client's limit (``HTTP2ClientConnection/maxResponseBytes``): the stream
    /// was reset and what arrived dropped. The server may have acted on the request.
    case responseTooLarge(limit: Int)
    /// The response broke HTTP: no `:status`, or one outside 100...599.
    case malformedResponse(String)

    /// True when the server cannot have acted on the request, so sending it again cannot duplicate it.
    public var safeToRetry: Bool {
        switch self {
        case .streamRefused, .connectFailed, .notSent: return true
        case .goingAway(_, let processed): return !processed
        default: return false
        }
    }

    /// The failure's name in a delivery's reason and a metric's label: `timed_out`, `connect_failed`, …
    public var label: String {
        switch self {
        case .streamRefused: return "stream_refused"
        case .goingAway: return "going_away"
        case .connectionClosed: return "connection_closed"
        case .notSent: return "not_sent"
        case .timedOut: return "timed_out"
        case .streamReset: return "stream_reset"
        case .connectFailed(_, let stage): return stage.label
        case .responseTooLarge: return "response_too_large"
        case .malformedResponse: return "malformed_response"
        case .shutDown: return "shut_down"
        }
    }

    /// What a ``label`` means, in words (nil: not a label).
    public static func meaning(ofLabel label: String) -> String? {
        if let stage = ConnectStage(label: label) { return stage.meaning }
        switch label {
        case "stream_refused": return "the server refused the request's stream"
        case "going_away": return "the connection was going away (GOAWAY)"
        case "connection_closed": return "the connection closed with the request in flight"
        case "not_sent": return "the connection closed before the request was sent"
        case "timed_out": return "no answer within the request timeout"
        case "stream_reset": return "the server reset the request's stream"
        case "response_too_large": return "the answer was larger than the client takes"
        case "malformed_response": return "the answer broke HTTP"
        case "shut_down": return "the client was shutting down"
        default: return nil
        }
    }

    public var description: String {
        switch self {
        case .streamRefused: return "stream refused by the server"
        case let .goingAway(reason, processed):
            return "connection going away (\(reason ?? "no reason"))\(processed ? "" : ", request not processed")"
        case .connectionClosed: return "connection closed with the request in flight"
        case .notSent: return "connection closed before the request was sent"
        case .timedOut: return "no response before the request timeout"
        case .streamReset(let code): return "stream reset by the server (HTTP/2 error \(code))"
        case .connectFailed(let m, let stage):
            switch stage {
            case .tcp: return "could not connect: \(m)"
            case .tls: return "TLS handshake failed: \(m)"
            case .handshakeTimedOut, .closedInHandshake: return "connection not ready: \(m)"
            }
        case .shutDown: return "the client was shut down"
        case .responseTooLarge(let limit): return "the response body went past \(limit) bytes"
        case .malformedResponse(let m): return "malformed response: \(m)"
        }
    }
}

/// How far a connection that failed got: its failure's label names the step that did not complete.
public enum ConnectStage: Sendable, Hashable, CaseIterable {
    /// No TCP connection: refused, unreachable, or not within the connect timeout (`connect_failed`).
    case tcp
    /// The TLS handshake failed: the certificate was not trusted or not for the host, an alert, no protocol in
    /// common (`tls_failed`).
    case tls
    /// Connected, but the TLS and HTTP/2 handshakes had not ended within the connect timeout
    /// (`handshake_timed_out`).
    case handshakeTimedOut
    /// The server closed or reset the connection during the TLS or HTTP/2 handshake (`closed_in_handshake`).
    case closedInHandshake

    public var label: String {
        switch self {
        case .tcp: return "connect_failed"
        case .tls: return "tls_failed"
        case .handshakeTimedOut: return "handshake_timed_out"
        case .closedInHandshake: return "closed_in_handshake"
        }
    }

    /// The stage a ``label`` names (nil: not a connect's label).
    public init?(label: String) {
        guard let stage = Self.allCases.first(where: { $0.label == label }) else { return nil }
        self = stage
    }

    /// What did not happen, in words.
    public var meaning: String {
        switch self {
        case .tcp: return "no TCP connection could be made (refused, unreachable, or not within the connect timeout)"
        case .tls:
            return
                "the TLS handshake failed: the server's certificate was not trusted or not for its name, or it refused the handshake (the node's log names the error)"
        case .handshakeTimedOut:
            return
                "the TCP connection was made, but its TLS and HTTP/2 handshakes had not ended within the connect timeout"
        case .closedInHandshake:
            return "the server closed or reset the connection before its TLS and HTTP/2 handshakes had ended"
        }
    }
}

extension TransportError {
    /// The failure of a connection that `error` ended, prefixed with `context` (the host and port): a TransportError
    /// is kept as it is; the TLS layer seeing the connection end is `closed_in_handshake`, any other TLS error
    /// `tls_failed`; anything else failed the TCP connect, or, once `connected` (an error the channel met after its
    /// TCP connection was made: a reset), broke the handshake.
    public static func connectFailure(
        _ error: any Error,
        context: String? = nil,
        connected: Bool = false
    )
        -> TransportError
    {
        if let e = error as? TransportError { return e }
        let message = context.map { "\($0): \(error)" } ?? "\(error)"
        if closedInTLSHandshake(error) { return .connectFailed(message, stage: .closedInHandshake) }
        if isTLSError(error) { return .connectFailed(message, stage: .tls) }
        return .connectFailed(message, stage: connected ? .closedInHandshake : .tcp)
    }

    /// Whether `error` is the TLS layer seeing the connection end before its handshake did (the server closed it:
    /// not a certificate or a protocol refused).
    static func closedInTLSHandshake(_ error: any Error) -> Bool {
        guard let e = error as? NIOSSLError else { return false }
        return e == .uncleanShutdown || e == .handshakeFailed(.sslError([.eofDuringHandshake]))
    }

    /// Whether `error` came from the TLS layer (a handshake that failed, a certificate refused).
    static func isTLSError(_ error: any Error) -> Bool {
        error is NIOSSLError || error is BoringSSLError || error is NIOSSLExtraError
    }
}
