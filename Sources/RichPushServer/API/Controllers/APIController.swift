import Foundation
import Hummingbird
import NIOCore
import NIOHTTP1
import RichPushCore

/// What every controller of `/v1` routes shares: reading a JSON body within the API's limit.
protocol APIController: Sendable {
    /// The largest body a route reads unless it has a limit of its own.
    var maxBodyBytes: Int { get }
}

extension APIController {
    /// The body as JSON, up to `limit` bytes (the API's limit unless a route has its own).
    /// `empty`: what a request without a body reads as (nil: it is refused as invalid JSON). An object that names a key
    /// twice is refused: which value counts would otherwise depend on the reader.
    func bodyJSON(_ request: Request, upTo limit: Int? = nil, empty: JSONValue? = nil) async throws -> JSONValue {
        var request = request
        let bound = limit ?? maxBodyBytes
        let buffer: ByteBuffer
        // The route's own limit in the refusal (the API's is the middleware's default).
        do { buffer = try await request.collectBody(upTo: bound) } catch is NIOTooManyBytesError {
            throw APIError.bodyTooLarge(bound)
        } catch let error as HTTPParserError {
            // The body's framing broke (a chunk size that is not hexadecimal): the client's fault, named.
            throw APIError(
                .malformedRequest,
                "the request is not valid HTTP/1.1: \(ParserRefusalExplainer.cause(error))"
            )
        }
        if buffer.readableBytes == 0, let empty { return empty }
        do { return try JSONValue.parse(Array(buffer.readableBytesView), repeatedKeys: .refuse) } catch {
            throw APIError(.invalidJSON, "\(error)")
        }
    }
}

/// A controller of routes under `/v1/apps/{app}`: the caller must hold a key of that app with the route's scope
/// (or the admin key).
protocol AppRoutes: APIController {
    var store: any ServerStore { get }
}

extension AppRoutes {
    /// Whether the caller may learn facts of the registry (how many devices an audience reaches, which tokens are
    /// registered): the admin key, or a key with the read scope.
    func mayReadRegistry(_ context: AppRequestContext) -> Bool {
        guard let caller = try? context.requireCaller() else { return false }  // no caller: nothing to learn
        if case .app(let grant) = caller { return grant.scopes.contains(.read) }
        return true
    }
}

/// The query parameters of a paged list.
enum ListQuery {
    /// A list's `limit` (1...100, default 20) from the query.
    static func limit(_ query: Parameters, default fallback: Int = 20) throws -> Int {
        guard let l = query.get("limit") else { return fallback }
        guard let n = Int(l), (1...100).contains(n) else {
            throw APIError(.invalid, "limit is a whole number from 1 to 100")
        }
        return n
    }

    /// A list's `after` cursor (0 or more, default 0: from the start) from the query.
    static func after(_ query: Parameters) throws -> Int64 {
        guard let a = query.get("after") else { return 0 }
        guard let n = Int64(a), n >= 0 else {
            throw APIError(.invalid, "after is a whole number of 0 or more (a next_after from the page before)")
        }
        return n
    }
}

extension Response {
    /// A JSON answer.
    static func json(_ status: Int, _ value: JSONValue) -> Response {
        Response(
            status: .init(code: status),
            headers: [.contentType: "application/json"],
            body: .init(byteBuffer: ByteBuffer(bytes: value.serialized()))
        )
    }
}
