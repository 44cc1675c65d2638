import Hummingbird
import NIOCore

/// The context of one API request: Hummingbird's core context, the client's address (failed authentication is
/// limited by it: an unknown key has no bucket of its own) and, on routes behind ``Authenticator``, the caller.
public struct APIRequestContext: RequestContext, RemoteAddressRequestContext {
    public var coreContext: CoreRequestContextStorage
    public let remoteAddress: SocketAddress?
    /// Who is calling, decided once by ``Authenticator``; nil on routes that take no key.
    public var caller: Caller?
    /// The client's address as requests are counted under it (an IPv4 address or an IPv6 /64): the peer's, or
    /// the one the operator's trusted proxies forwarded for (``ClientAddressMiddleware``). Failed authentications
    /// and a public key's requests are limited by it.
    var clientKey: String
    /// The app of a route under `/v1/apps/{app}`, once ``AppAccess`` let the caller in (read by
    /// ``AppRequestContext``); nil elsewhere.
    var app: ServerApp?
    /// Typed replies are written as the API writes JSON (``APIResponseEncoder``).
    public var responseEncoder: APIResponseEncoder { .init() }

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
        clientKey = remoteAddress?.ipAddress.flatMap { IPAddress(host: $0)?.clientKey } ?? "unknown"
    }

    /// The proven caller; a route behind the authenticator always has one.
    func requireCaller() throws -> Caller {
        guard let caller else { throw APIError(.unauthenticated, "send Authorization: Bearer <key>") }
        return caller
    }

    /// Only the admin key passes.
    func requireAdmin() throws {
        guard case .admin = try requireCaller() else { throw APIError(.forbidden, "this route needs the admin key") }
    }

    /// A key of any app with this scope, or the admin key.
    /// Checks the scope; returns the key's app (nil for the admin key), which quotas count against.
    @discardableResult
    func requireAnyKey(_ scope: APIScope) throws -> String? {
        guard case .app(let grant) = try requireCaller() else { return nil }
        guard grant.scopes.contains(scope) else {
            throw APIError(.forbidden, "this key lacks the '\(scope.rawValue)' scope")
        }
        return grant.appID
    }
}

/// Who a request comes from: the admin key, or an app's key with its scopes.
public enum Caller: Sendable {
    case admin
    case app(APIGrant)
}
