import Hummingbird

/// Puts the client's address in the context when the peer is one of the operator's trusted proxies
/// (``TrustedProxies``); in front of every route, so that limits and logs see the client, not the proxy.
struct ClientAddressMiddleware: RouterMiddleware {
    typealias Context = APIRequestContext
    let proxies: TrustedProxies

    func handle(
        _ request: Request,
        context: Context,
        next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        guard !proxies.ranges.isEmpty else { return try await next(request, context) }
        var context = context
        let peer = context.remoteAddress?.ipAddress.flatMap { IPAddress(host: $0) }
        context.clientKey = proxies.clientKey(peer: peer, headers: request.headers)
        return try await next(request, context)
    }
}
