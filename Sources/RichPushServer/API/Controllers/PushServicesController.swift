import Foundation
import Hummingbird
import RichPushCore

/// `GET /v1/apps/{app}/push-services`: the push service origins the app's deliveries went to lately, as the node
/// that answers sees them: each origin's circuit (closed, open, probing), its sends in flight and its bound, and
/// the app's own bound. A read key opens it. Each node keeps its own (on PostgreSQL, another node may see another
/// state), and at most ``DeliveryAdmission/originsPerApp`` origins per app, the most recent first.
struct PushServicesController: AppRoutes {
    let store: any ServerStore
    let maxBodyBytes: Int
    /// The node's bounds and circuits (nil: this server runs no workers, and the list is empty).
    let admission: DeliveryAdmission?
    let nodeID: String?

    func addRoutes(to group: RouterGroup<APIRequestContext>) {
        let reading = group.app(.read, store: store)
        reading.get("push-services", use: list)
    }

    func list(_ request: Request, _ context: AppRequestContext) async throws -> PushServicesReply {
        let app = context.app
        let stamp = ISO8601DateFormatter()
        return PushServicesReply(
            appInFlight: admission?.held(app: app.id) ?? 0,
            appInFlightLimit: admission?.limits.perApp ?? 0,
            pushServices: (admission?.status(app: app.id) ?? []).map { .init($0, stamp: stamp) },
            node: nodeID
        )
    }
}
