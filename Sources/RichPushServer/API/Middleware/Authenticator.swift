import Foundation
import Hummingbird

/// Decides who is calling, once per request, before the route runs, and puts the caller in the context.
///
/// A proven key (the admin's or an app's) is counted against its own bucket. A request without a key, or with one
/// nobody issued, is counted against its client address instead: unknown bearer strings never get a bucket, so
/// sending many of them can neither fill the table nor reset a throttled key.
struct Authenticator: RouterMiddleware {
    typealias Context = APIRequestContext

    let store: any ServerStore
    /// SHA-256 of the admin key (the key itself is never kept).
    let adminKeyHash: String
    let limiter: RateLimiter
    let failureLimiter: RateLimiter
    /// A public key's requests per client address and app (anyone holds that key: one visitor must not spend the
    /// whole key's budget).
    let publicClientLimiter: RateLimiter

    func handle(
        _ request: Request,
        context: Context,
        next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        var context = context
        context.caller = try await authenticate(request, context)
        return try await next(request, context)
    }

    /// The SHA-256 of the bearer key (hashed once per request: the key itself is neither kept nor compared).
    static func bearerHash(_ request: Request) -> String? {
        guard let value = request.headers[.authorization] else { return nil }
        let parts = value.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer", !parts[1].isEmpty else { return nil }
        return APIKeys.hash(String(parts[1]))
    }

    func authenticate(_ request: Request, _ context: Context) async throws -> Caller {
        guard let hash = Self.bearerHash(request) else {
            try refuse(context, "send Authorization: Bearer <key>")
        }
        if Self.equalHashes(hash, adminKeyHash) {
            try throttle(hash)
            return .admin
        }
        // A client already out of failed attempts is refused before its key is looked up: a flood of made-up keys
        // from one address costs no database work once its budget is spent. A key this node found valid lately is
        // looked up all the same: the flood's address may be a legitimate caller's too (one NAT, one proxy).
        if let wait = failureLimiter.peek(context.clientKey), await !store.isKnownKey(keyHash: hash) {
            throw APIError.rateLimited(after: RateLimiter.retryAfter(wait))
        }
        guard let grant = try await store.authorize(keyHash: hash) else { try refuse(context, "unknown API key") }
        if grant.isPublic, let wait = publicClientLimiter.check(grant.appID + " " + context.clientKey) {
            throw APIError.rateLimited(
                after: RateLimiter.retryAfter(wait),
                "too many requests from this client address with the app's public key"
            )
        }
        try throttle(hash)
        return .app(grant)
    }

    private func throttle(_ keyHash: String) throws {
        if let wait = limiter.check(keyHash) { throw APIError.rateLimited(after: RateLimiter.retryAfter(wait)) }
    }

    private func refuse(_ context: Context, _ message: String) throws -> Never {
        if let wait = failureLimiter.check(context.clientKey) {
            throw APIError.rateLimited(after: RateLimiter.retryAfter(wait))
        }
        throw APIError(.unauthenticated, message)
    }

    /// Compared as fixed-length hashes, in constant time.
    static func equalHashes(_ x: String, _ y: String) -> Bool {
        let a = Array(x.utf8)
        let b = Array(y.utf8)
        guard a.count == b.count else { return false }
        return zip(a, b).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
    }
}
