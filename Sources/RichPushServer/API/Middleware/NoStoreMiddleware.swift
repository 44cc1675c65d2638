import HTTPTypes
import Hummingbird

/// `Cache-Control: no-store` on every answer to a keyed request that has none of its own: such answers are one
/// caller's (some hold a secret shown once: a key, a webhook secret, an identity private key), and no cache on the
/// way, nor the browser's, may keep them.
struct NoStoreMiddleware: RouterMiddleware {
    typealias Context = APIRequestContext

    func handle(
        _ request: Request,
        context: Context,
        next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        var response = try await next(request, context)
        if response.headers[.cacheControl] == nil { response.headers[.cacheControl] = "no-store" }
        return response
    }
}
