import HTTPTypes
import Hummingbird
import NIOConcurrencyHelpers

/// Answers 405 with `Allow` for a known path asked with a method it does not take, whatever the method (TRACE,
/// OPTIONS, QUERY, or a name nobody registered); an unknown path is answered 404 `not-found` with its JSON body.
/// HEAD is answered wherever GET is, with the GET answer's head alone.
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

    /// GET routes that take no HEAD: an answer that streams holds a place (a live view's) from its route until its
    /// body ends, and HEAD drops the body unwritten, so each HEAD would keep a place for good.
    static let withoutHead: [[Substring]] = ["/v1/apps/{app}/notifications/{id}/events"].map {
        $0.split(separator: "/")
    }

    static func matches(_ pattern: [Substring], _ parts: [Substring]) -> Bool {
        pattern.count == parts.count && zip(pattern, parts).allSatisfy { p, part in p.hasPrefix("{") || p == part }
    }

    func methods(for path: Substring) -> Set<String>? {
        let parts = path.split(separator: "/")
        var found: Set<String>?
        for route in table.withLockedValue({ $0 }) where Self.matches(route.parts, parts) {
            found = (found ?? []).union(route.methods)
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
        guard var allowed = methods(for: path) else { return APIError(.notFound, "no such route").response }
        guard !allowed.contains(request.method.rawValue) else { return try await next(request, context) }
        // HEAD is GET without the body (RFC 9110, sections 9.1 and 9.3.2: a general-purpose server supports both):
        // the GET route answers, and only its head is sent, with the length the body would have had.
        // The router makes each HEAD route from its GET route (which drops the body); the length the body would
        // have had is kept here, where the GET route's answer passes with its body.
        let streams = Self.withoutHead.contains { Self.matches($0, path.split(separator: "/")) }
        if allowed.contains("GET"), !streams {
            if request.method == .head {
                var response = try await next(request, context)
                if response.headers[.contentLength] == nil, let length = response.body.contentLength, length > 0 {
                    response.headers[.contentLength] = String(length)
                }
                return response
            }
            allowed.insert("HEAD")
        }
        let list = allowed.sorted().joined(separator: ", ")
        return APIError(.methodNotAllowed, "\(path) takes \(list)", headers: [.allow: list]).response
    }
}
