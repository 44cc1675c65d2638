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

    func list(_ request: Request, _ context: AppRequestContext) async throws -> Response {
        let app = context.app
        let stamp = ISO8601DateFormatter()
        let origins: [JSONValue] = (admission?.status(app: app.id) ?? []).map { o in
            var fields: [String: JSONValue] = [
                "origin": .string(o.origin), "state": .string(o.state), "in_flight": .int(Int64(o.inFlight)),
                "in_flight_limit": .int(Int64(o.limit)), "failures_in_a_row": .int(Int64(o.failuresInARow)),
                "last_used_at": .string(stamp.string(from: o.lastUsed)),
            ]
            if let t = o.openedAt { fields["opened_at"] = .string(stamp.string(from: t)) }
            if let t = o.retryAt { fields["retry_at"] = .string(stamp.string(from: t)) }
            if let r = o.lastFailure { fields["last_failure"] = .string(r) }
            return .object(fields)
        }
        var body: [String: JSONValue] = [
            "app_in_flight": .int(Int64(admission?.held(app: app.id) ?? 0)),
            "app_in_flight_limit": .int(Int64(admission?.limits.perApp ?? 0)),
            "push_services": .array(origins),
        ]
        if let nodeID { body["node"] = .string(nodeID) }
        return Response.json(200, .object(body))
    }
}
