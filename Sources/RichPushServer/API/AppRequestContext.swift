import Hummingbird
import NIOCore

/// The context of a route under `/v1/apps/{app}`: the API's context and the app of the path, which ``AppAccess``
/// found the caller may use with the route's scope before any handler runs. A handler of such a route never checks
/// the key itself: it is registered on a group that does (`RouterGroup.app(_:store:)`).
public struct AppRequestContext: ChildRequestContext {
    public typealias ParentContext = APIRequestContext
    public var coreContext: CoreRequestContextStorage
    /// The request's context before the app was known: the caller and the client's address.
    let api: APIRequestContext
    /// The app of the path.
    public let app: ServerApp
    /// Typed replies are written as the API writes JSON (``APIResponseEncoder``).
    public var responseEncoder: APIResponseEncoder { .init() }

    public init(context: APIRequestContext) throws {
        // Set by AppAccess, which every group of this context runs first; a route outside one finds no app.
        guard let app = context.app else { throw APIError(.notFound, "no app in the path") }
        coreContext = context.coreContext
        api = context
        self.app = app
    }

    var clientKey: String { api.clientKey }
    var caller: Caller? { api.caller }
    var remoteAddress: SocketAddress? { api.remoteAddress }
    func requireCaller() throws -> Caller { try api.requireCaller() }
    func requireAnyKey(_ scope: APIScope) throws -> String? { try api.requireAnyKey(scope) }
}

/// Lets a caller into the routes of `/v1/apps/{app}` that one of `scopes` opens: the admin key, or a key of that
/// app holding one of them (a refusal names each). The app, read once, goes into the context.
struct AppAccess: RouterMiddleware {
    typealias Context = APIRequestContext
    let scopes: [APIScope]
    let store: any ServerStore

    func handle(
        _ request: Request,
        context: APIRequestContext,
        next: (Request, APIRequestContext) async throws -> Response
    ) async throws -> Response {
        guard let appID = context.parameters.get("app") else { throw APIError(.notFound, "no app in the path") }
        if case .app(let grant) = try context.requireCaller() {
            guard grant.appID == appID else { throw APIError(.forbidden, "this key belongs to another app") }
            guard scopes.contains(where: grant.scopes.contains) else {
                let named = scopes.map { "'\($0.rawValue)'" }.joined(separator: " or ")
                throw APIError(.forbidden, "this key lacks the \(named) scope")
            }
        }
        guard let app = try await store.app(id: appID) else { throw APIError(.notFound, "no such app") }
        var context = context
        context.app = app
        return try await next(request, context)
    }
}

extension RouterGroup where Context == APIRequestContext {
    /// The routes under `apps/:app` that one of `scopes` opens; their handlers get the app in their context.
    func app(_ scopes: APIScope..., store: any ServerStore) -> RouterGroup<AppRequestContext> {
        group("apps/:app").add(middleware: AppAccess(scopes: scopes, store: store)).group(
            context: AppRequestContext.self
        )
    }
}
