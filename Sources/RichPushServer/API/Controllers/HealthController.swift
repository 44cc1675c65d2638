import Foundation
import Hummingbird
import NIOCore
import RichPushCore

/// `/health` (live and ready) and `/metrics`: no key. Without a key `/health` says the status only (live, ready,
/// the database up or down); with the admin key it also says since when, why, and which node answered. Neither
/// carries secrets or tokens; keep `/metrics` off the public internet all the same.
struct HealthController: Sendable {
    let backend: any StorageBackend
    /// SHA-256 of the admin key: the details are the operator's.
    let adminKeyHash: String
    let metrics: ServerMetrics
    let fanOuts: BackgroundWork
    /// This node's id, shown by `/health` (several nodes on one database).
    let nodeID: String?
    /// The node's connections (nil in tests that run the API without a listener).
    let connections: ConnectionLimits?
    /// The watched disks, read at each scrape: an idle node's free space is current too (nil: none watched).
    var diskFloor: DiskFloor? = nil

    func addRoutes(to router: Router<APIRequestContext>) {
        // Live: the process answers. Ready: its database answers too (a load balancer sends traffic to ready nodes).
        router.get("/health") { request, _ in healthAnswer(ready: true, details: isAdmin(request)) }
        router.get("/health/ready") { request, _ in healthAnswer(ready: true, details: isAdmin(request)) }
        router.get("/health/live") { request, _ in healthAnswer(ready: false, details: isAdmin(request)) }
        router.get("/metrics") { _, context in await metricsAnswer(context) }
    }

    /// The metrics in Prometheus' text format, with the gauges read now (queue depth only while the database answers).
    func metricsAnswer(_ context: APIRequestContext) async -> Response {
        metrics.databaseUp(backend.health.isUp)
        if backend.health.isUp {
            do { metrics.queueDepth(try await backend.queue.counts()) } catch {
                context.logger.warning("metrics: could not count the queue", metadata: ["error": "\(error)"])
            }
            do { metrics.webhookEndpoints(try await backend.webhooks.stateCounts()) } catch {
                context.logger.warning("metrics: could not count webhook endpoints", metadata: ["error": "\(error)"])
            }
        }
        metrics.fanOutsRunning(fanOuts.count)
        diskFloor?.read()
        if let open = connections?.open { metrics.connectionsOpen(open.total, clients: open.clients) }
        return Response(
            status: .ok,
            headers: [.contentType: "text/plain; version=0.0.4"],
            body: .init(byteBuffer: ByteBuffer(string: metrics.render()))
        )
    }

    /// Whether the request carries the admin key (hashed and compared in constant time; no database work).
    func isAdmin(_ request: Request) -> Bool {
        Authenticator.bearerHash(request).map { Authenticator.equalHashes($0, adminKeyHash) } ?? false
    }

    /// `/health` (ready unless `ready` is false: then liveness alone, always 200).
    func healthAnswer(ready checkReady: Bool, details: Bool) -> Response {
        let status = backend.health.status
        var body: [String: JSONValue] = [
            "live": true, "ready": .bool(status.up), "database": status.up ? "up" : "down",
        ]
        if details {
            // What the operator follows a rolling upgrade by; not told to anyone who asks.
            body["version"] = .string(RichPushVersion.current)
            body["database_since"] = .string(ISO8601DateFormatter().string(from: status.since))
            if let reason = status.reason { body["reason"] = .string(reason) }
            if let nodeID { body["node"] = .string(nodeID) }
        }
        var r = Response.json(checkReady && !status.up ? 503 : 200, .object(body))
        if checkReady && !status.up { r.headers[.retryAfter] = "5" }
        return r
    }
}
