import HTTPTypes
import Hummingbird
import NIOConcurrencyHelpers

/// Answers 405 with `Allow` for a known path asked with a method it does not take, whatever the method (TRACE,
/// OPTIONS, QUERY, or a name nobody registered); an unknown path is answered 404 `not-found` with its JSON body.
///
/// It runs in front of every route, so it is added to the router first; the table is the router's own list of
/// routes, read once they are all added (``fill(from:)``): no second list to keep in step.
final class MethodGuard: RouterMiddleware, Sendable {
    typealias Context = APIRequestContext

    /// Each route's path as its parts (`{name}` parts match any one part), with the methods it takes.
    private let table = NIOLockedValueBox<[(parts: [Substring], methods: Set<String>)]>([])

    /// Reads the routes the router serves; call once every route is added.
    func fill(from routes: [(method: String, path: String)]) {
        var byPath: [String: Set<String>] = [:]
        for (method, path) in routes { byPath[path, default: []].insert(method.uppercased()) }
        table.withLockedValue { $0 = byPath.map { (path, methods) in (path.split(separator: "/"), methods) } }
    }

    func methods(for path: Substring) -> Set<String>? {
        let parts = path.split(separator: "/")
        var found: Set<String>?
        for route in table.withLockedValue({ $0 }) where route.parts.count == parts.count {
            let matches = zip(route.parts, parts).allSatisfy { pattern, part in
                pattern.hasPrefix("{") || pattern == part
            }
            if matches { found = (found ?? []).union(route.methods) }
        }
        return found
    }

    func handle(
        _ request: Request,
        context: Context,
        next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        let path = request.uri.path.split(separator: "?", maxSplits: 1).first ?? ""
        // No route has this path: the same JSON error as every other refusal, where the router's own 404 has no body.
        guard let allowed = methods(for: path) else { return APIError(.notFound, "no such route").response }
        guard !allowed.contains(request.method.rawValue) else { return try await next(request, context) }
        let list = allowed.sorted().joined(separator: ", ")
        return APIError(.methodNotAllowed, "\(path) takes \(list)", headers: [.allow: list]).response
    }
}
