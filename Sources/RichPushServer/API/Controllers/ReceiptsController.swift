import Foundation
import Hummingbird
import NIOCore
import RichPushCore

/// `POST /v1/receipts/{token}`: what devices report they did with a notification, posted with no API key (the
/// address's signature admits reports for its notification only).
struct ReceiptsController: APIController {
    let receipts: DeviceReceipts
    let store: any ReceiptStore
    let metrics: ServerMetrics
    let maxBodyBytes: Int
    let minutes: MinuteCounter

    func addRoutes(to group: RouterGroup<APIRequestContext>) {
        group.post("receipts/:token", use: deviceReceipt)
        group.post("receipts/:token/opens", use: deviceOpen)
    }

    /// The notification and delivery the path's receipt address names, if its signature holds, it has not expired,
    /// and its notification is within its rate.
    func admitted(_ context: APIRequestContext) throws -> (String, Int64) {
        switch receipts.check(token: context.parameters.get("token") ?? "") {
        case .valid(let n, let d):
            if let wait = receipts.limiter.check(n) { throw APIError.rateLimited(after: RateLimiter.retryAfter(wait)) }
            return (n, d)
        case .expired:
            throw APIError(.receiptExpired, "the notification has ended; its receipt address no longer takes reports")
        case .forged:
            throw APIError(.badReceiptToken, "the receipt address is not one this server gave out")
        }
    }

    /// What the person did with the notification (opened it, with the action chosen, or dismissed it), posted by
    /// the app to the receipt address the notification carried plus `/opens`: bound to that delivery, one per
    /// delivery (the first stands), under the same signature, expiry and per-notification rate as receipts.
    func deviceOpen(_ request: Request, _ context: APIRequestContext) async throws -> EditedResponse<Recorded> {
        let (id, delivery) = try admitted(context)
        let body = try DeliveryOpen.read(
            try await bodyJSON(request, upTo: DeliveryOpen.maxBodyBytes(byApp: false)),
            byApp: false
        )
        return try await Self.record(
            body,
            delivery: delivery,
            of: id,
            in: store,
            minutes: minutes,
            metrics: metrics,
            unknown: "no such delivery of this notification"
        )
    }

    /// Records an open for its delivery and answers: 201, 409 `already-reported` when the delivery has one, 409
    /// `delivery-not-accepted` when the push service did not accept the delivery (an open of it is not counted; one
    /// still queued or being sent may be reported again once it is delivered, hence its `Retry-After`), 404
    /// (`unknown`) when the delivery is not the notification's. What both routes that take opens do.
    static func record(
        _ body: DeliveryOpen.Report,
        delivery: Int64,
        of id: String,
        in store: any ReceiptStore,
        minutes: MinuteCounter,
        metrics: ServerMetrics,
        unknown: String
    ) async throws -> EditedResponse<Recorded> {
        let open = DeliveryOpen(
            deliveryID: delivery,
            notificationID: id,
            event: body.event,
            action: body.action,
            link: body.link
        )
        switch try await store.recordOpen(open) {
        case .recorded:
            if body.event == .opened { minutes.add(id, .opened) }
            metrics.openRecorded(body.event)
            return Recorded().created
        case .repeated: throw APIError(.alreadyReported, "this delivery's open or dismissal is already reported")
        case .notDelivered: throw APIError(.notFound, unknown)
        case .notAccepted(let state): throw Self.notAccepted(state)
        }
    }

    /// The answer to an open of a delivery the push service has not accepted.
    static func notAccepted(_ state: DeliveryState) -> APIError {
        switch state {
        case .queued, .leased:
            return APIError(
                .deliveryNotAccepted,
                "this delivery is not yet accepted by the push service (\(state.rawValue)): an open counts once it is delivered",
                retryAfter: 5
            )
        default:
            return APIError(
                .deliveryNotAccepted,
                "the push service did not accept this delivery (\(state.rawValue)): no device was given it, so an open of it is not counted"
            )
        }
    }

    /// A device's delivery report, posted to the address its payload carried (no API key: the address's signature
    /// admits one report, for its delivery only, until the notification's end). The first report stands; a repeat
    /// is refused (409), and so is a delivery the address does not name (404). What is kept is a few numbers per
    /// delivery, whatever the report's size: the post costs one indexed read and one row.
    func deviceReceipt(_ request: Request, _ context: APIRequestContext) async throws -> EditedResponse<Recorded> {
        let (id, delivery) = try admitted(context)
        let body = try ReceiptBody.decode(try await bodyJSON(request, upTo: receipts.maxReportBytes), byApp: false)
        let receipt = DeliveryReceipt(deliveryID: delivery, notificationID: id, report: body.report)
        switch try await store.record(receipt) {
        case .recorded:
            minutes.add(id, .received)
            metrics.receiptRecorded()
            return Recorded().created
        case .repeated:
            throw APIError(.alreadyReported, "this delivery already has its report")
        case .notDelivered:
            throw APIError(.notFound, "no such delivery of this notification")
        case .notAccepted(let state): throw Self.notAccepted(state)
        }
    }
}
