import HTTPTypes
import Hummingbird

/// Answers 405 with `Allow` for a known path asked with a method it does not take, whatever the method (TRACE,
/// OPTIONS, QUERY, or a name nobody registered); an unknown path goes on to the router's 404.
struct MethodGuard: RouterMiddleware {
    typealias Context = APIRequestContext

    /// Each route's path as its parts (`{name}` parts match any one part), with the methods it takes.
    let table: [(parts: [Substring], methods: Set<String>)]

    init(routes: [(String, String)]) {
        var byPath: [String: Set<String>] = [:]
        for (method, path) in routes { byPath[path, default: []].insert(method.uppercased()) }
        table = byPath.map { (path, methods) in (path.split(separator: "/"), methods) }
    }

    func methods(for path: Substring) -> Set<String>? {
        let parts = path.split(separator: "/")
        var found: Set<String>?
        for route in table where route.parts.count == parts.count {
            let matches = zip(route.parts, parts).allSatisfy { pattern, part in pattern.hasPrefix("{") || pattern == part }
            if matches { found = (found ?? []).union(route.methods) }
        }
        return found
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let path = request.uri.path.split(separator: "?", maxSplits: 1).first ?? ""
        guard let allowed = methods(for: path) else { return try await next(request, context) }
        guard !allowed.contains(request.method.rawValue) else { return try await next(request, context) }
        let list = allowed.sorted().joined(separator: ", ")
        var r = RichPushAPI.json(405, ["error": ["code": "method-not-allowed", "message": .string("\(path) takes \(list)")]])
        r.headers[.allow] = list
        return r
    }
}
