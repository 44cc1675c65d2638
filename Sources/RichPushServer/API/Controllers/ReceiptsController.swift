import Foundation
import Hummingbird
import NIOCore
import RichPushCore

/// `POST /v1/receipts/{token}`: what devices report they did with a notification, posted with no API key (the
/// address's signature admits reports for its notification only).
struct ReceiptsController: APIController {
    let receipts: DeviceReceipts
    let store: any ServerStore
    let metrics: ServerMetrics
    let maxBodyBytes: Int

    func addRoutes(to group: RouterGroup<APIRequestContext>) {
        group.post("receipts/:token", use: deviceReceipt)
    }

    /// A device's delivery report, posted to the address its payload carried (no API key: the address's signature
    /// admits reports for its notification only, until the notification's end). One report per `device`: a repeat
    /// is refused (409) and the first stands; a device without an id gets one of its own. A notification admits
    /// at most ``DeviceReceipts/maxReportsPerNotification`` reports (429 past it).
    func deviceReceipt(_ request: Request, _ context: APIRequestContext) async throws -> Response {
        let id: String
        switch receipts.check(token: context.parameters.get("token") ?? "") {
        case .valid(let n): id = n
        case .expired:
            throw APIError(
                .receiptExpired,
                "the notification has ended; its receipt address no longer takes reports"
            )
        case .forged:
            throw APIError(
                .badReceiptToken,
                "the receipt address is not one this server gave out"
            )
        }
        if let wait = receipts.limiter.check(id) { throw APIError.rateLimited(after: RateLimiter.retryAfter(wait)) }
        let receipt = try ReceiptBody.decode(try await bodyJSON(request, upTo: receipts.maxReportBytes), byApp: false)
        guard try await store.notification(id: id) != nil else {
            throw APIError(.notFound, "no such notification")
        }
        let deviceID = receipt.from ?? "device-" + UUID().uuidString.lowercased()
        switch try await store.addDeviceReceipt(
            notificationID: id,
            device: deviceID,
            report: receipt.report,
            limit: receipts.maxReportsPerNotification
        ) {
        case .recorded:
            metrics.receiptRecorded()
            return Response.json(201, ["recorded": true])
        case .repeated:
            throw APIError(
                .alreadyReported,
                "this device already reported for this notification"
            )
        case .full:
            throw APIError(
                .receiptsFull,
                "this notification holds as many receipts as it admits"
            )
        }
    }
}
