import Foundation
import Hummingbird
import NIOCore
import RichPushCore

/// `/v1/apps/{app}/devices`: the registry. Registering takes the `manage` or the `register` scope (the key a page
/// or an app ships, which can do nothing else), removing `manage`, searching `read`. A page on another origin may
/// register: the route answers CORS preflights, and its answers allow any origin (keys are bearer tokens, never
/// cookies, so no credentials ride along).
///
/// With the public key a registration speaks for its device only (``Registrant``): a user id needs the app
/// backend's identity proof, and a token already registered keeps its user. Every registration meets the
/// ``RegistrationLimits``.
struct DevicesController: AppRoutes {
    let store: any ServerStore
    let registry: any DeviceRegistry
    let providers: Providers
    let counts: CountCaches
    let maxBodyBytes: Int
    let limits: RegistrationLimits

    func addRoutes(to group: RouterGroup<APIRequestContext>) {
        let reading = group.app(.read, store: store)
        let registering = group.app(.register, .manage, store: store)
        let managing = group.app(.manage, store: store)
        reading.get("devices", use: searchDevices)
        registering.post("devices", use: registerDevice)
        managing.delete("devices/:token", use: removeDevice)
    }

    func registerDevice(_ request: Request, _ context: AppRequestContext) async throws -> RegisteredDevice {
        let app = context.app
        var device = try DeviceBody.decode(
            try await bodyJSON(request, upTo: DeviceBody.maxBodyBytes),
            appID: app.id,
            providers: providers
        ).device
        let owner = try await Registrant.of(request, context, store: store).admit(&device)
        do { try await registry.register(device, owner: owner, limits: limits) } catch let quota as QuotaReached {
            throw APIError(quota)
        }
        // The error middleware allows any origin to read this route's answers.
        return RegisteredDevice(token: device.token, provider: device.provider.rawValue)
    }

    /// The answer to a CORS preflight for registering: any origin, POST, the three headers a registration sends.
    static func preflight() -> Response {
        var headers = HTTPFields()
        headers[.accessControlAllowOrigin] = "*"
        headers[.accessControlAllowMethods] = "POST"
        headers[.accessControlAllowHeaders] = "authorization, content-type, richpush-identity"
        headers[.accessControlMaxAge] = "600"
        return Response(status: .noContent, headers: headers)
    }

    func removeDevice(_ request: Request, _ context: AppRequestContext) async throws -> Removed {
        let app = context.app
        let token = context.parameters.get("token") ?? ""
        guard try await registry.remove(appID: app.id, token: token) else {
            throw APIError(.notFound, "no such device")
        }
        return Removed(removed: token)
    }

    /// `GET /v1/apps/{app}/devices?q=&after=&limit=`: devices whose token starts with q, or whose user id or a tag is q.
    func searchDevices(_ request: Request, _ context: AppRequestContext) async throws -> DevicePage {
        let app = context.app
        let query = request.uri.queryParameters
        let limit = try ListQuery.limit(query)
        let q = query.get("q") ?? ""
        guard q.unicodeScalars.count <= 4096, !q.unicodeScalars.contains("\u{0}") else {
            throw APIError(.invalid, "q is at most 4,096 characters, without NUL")
        }
        let after = try ListQuery.after(query)
        let (devices, next) = try await registry.search(appID: app.id, matching: q, after: after, limit: limit)
        return DevicePage(
            devices: devices.map(\.json),
            total: try await counts.devices(app.id) { try await registry.count(appID: app.id) },
            nextAfter: next
        )
    }
}
