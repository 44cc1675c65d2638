import Foundation
import Hummingbird

/// Who is calling, decided once per request, and the rate limits that go with it.
///
/// A proven key (the admin's or an app's) is counted against its own bucket. A request without a key, or with one
/// nobody issued, is counted against its client address instead: unknown bearer strings never get a bucket, so
/// sending many of them can neither fill the table nor reset a throttled key.
extension RichPushAPI {
    enum Caller {
        case admin
        case app(APIGrant)
    }

    /// The SHA-256 of the bearer key (hashed once per request: the key itself is neither kept nor compared).
    static func bearerHash(_ request: Request) -> String? {
        guard let value = request.headers[.authorization] else { return nil }
        let parts = value.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer", !parts[1].isEmpty else { return nil }
        return APIKeys.hash(String(parts[1]))
    }

    func authenticate(_ request: Request, _ context: APIRequestContext) async throws -> Caller {
        guard let hash = Self.bearerHash(request) else {
            try refuseAuthentication(context, "send Authorization: Bearer <key>")
        }
        if isAdmin(hash: hash) {
            try throttle(hash)
            return .admin
        }
        guard let grant = try await store.authorize(keyHash: hash) else { try refuseAuthentication(context, "unknown API key") }
        try throttle(hash)
        return .app(grant)
    }

    private func throttle(_ keyHash: String) throws {
        if let wait = limiter.check(keyHash) { throw RateLimited(retryAfter: RateLimiter.retryAfter(wait)) }
    }

    private func refuseAuthentication(_ context: APIRequestContext, _ message: String) throws -> Never {
        if let wait = authFailureLimiter.check(context.clientKey) {
            throw RateLimited(retryAfter: RateLimiter.retryAfter(wait))
        }
        throw Failure(status: 401, code: "unauthenticated", message: message)
    }

    func isAdmin(hash: String) -> Bool {
        // Compared as fixed-length hashes, in constant time.
        let a = Array(hash.utf8), b = Array(adminKeyHash.utf8)
        guard a.count == b.count else { return false }
        return zip(a, b).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
    }

    func requireAdmin(_ request: Request, _ context: APIRequestContext) async throws {
        guard case .admin = try await authenticate(request, context) else {
            throw Failure(status: 403, code: "forbidden", message: "this route needs the admin key")
        }
    }

    /// The app of the route, when the key may use it with this scope.
    func requireApp(_ request: Request, _ context: APIRequestContext, _ scope: APIScope) async throws -> ServerApp {
        guard let appID = context.parameters.get("app") else { throw Failure(status: 404, code: "not-found", message: "no app in the path") }
        if case .app(let grant) = try await authenticate(request, context) {
            guard grant.appID == appID else { throw Failure(status: 403, code: "forbidden", message: "this key belongs to another app") }
            guard grant.scopes.contains(scope) else { throw Failure(status: 403, code: "forbidden", message: "this key lacks the '\(scope.rawValue)' scope") }
        }
        guard let app = try await store.app(id: appID) else { throw Failure(status: 404, code: "not-found", message: "no app '\(appID)'") }
        return app
    }

    /// A key of any app with this scope, or the admin key.
    func requireAnyKey(_ request: Request, _ context: APIRequestContext, _ scope: APIScope) async throws {
        if case .app(let grant) = try await authenticate(request, context), !grant.scopes.contains(scope) {
            throw Failure(status: 403, code: "forbidden", message: "this key lacks the '\(scope.rawValue)' scope")
        }
    }
}
