import Foundation
import Hummingbird
import NIOCore
import RichPushCore

/// Receipts: what devices report they did with a notification.
extension RichPushAPI {
    /// A device's delivery report, posted to the address its payload carried (no API key: the address's signature
    /// admits reports for its notification only, until the notification's end). One report per `device`: a repeat
    /// is refused (409) and the first stands; a device without an id gets one of its own. A notification admits
    /// at most ``DeviceReceipts/maxReportsPerNotification`` reports (429 past it).
    func deviceReceipt(_ request: Request, _ context: APIRequestContext) async throws -> Response {
        guard let receipts else { throw Failure(status: 404, code: "not-found", message: "receipts are off on this server") }
        let id: String
        switch receipts.check(token: context.parameters.get("token") ?? "") {
        case .valid(let n): id = n
        case .expired:
            throw Failure(status: 410, code: "receipt-expired", message: "the notification has ended; its receipt address no longer takes reports")
        case .forged:
            throw Failure(status: 403, code: "bad-receipt-token", message: "the receipt address is not one this server gave out")
        }
        if let wait = receipts.limiter.check(id) { throw RateLimited(retryAfter: RateLimiter.retryAfter(wait)) }
        let receipt = try ReceiptBody.decode(try await bodyJSON(request, upTo: receipts.maxReportBytes), byApp: false)
        guard try await store.notification(id: id) != nil else { throw Failure(status: 404, code: "not-found", message: "no such notification") }
        let deviceID = receipt.from ?? "device-" + UUID().uuidString.lowercased()
        switch try await store.addDeviceReceipt(notificationID: id, device: deviceID, report: receipt.report, limit: receipts.maxReportsPerNotification) {
        case .recorded:
            metrics.receiptRecorded()
            return Self.json(201, ["recorded": true])
        case .repeated:
            throw Failure(status: 409, code: "already-reported", message: "this device already reported for this notification")
        case .full:
            throw Failure(status: 429, code: "receipts-full", message: "this notification holds as many receipts as it admits")
        }
    }

    /// A device's delivery report (RichPushMedia's `DeliveryReport.json`), posted by the app with a `send` key.
    func receipt(_ request: Request, _ context: APIRequestContext) async throws -> Response {
        let app = try await requireApp(request, context, .send)
        guard let id = context.parameters.get("id"), let n = try await store.notification(id: id), n.appID == app.id else {
            throw Failure(status: 404, code: "not-found", message: "no such notification")
        }
        let receipt = try ReceiptBody.decode(try await bodyJSON(request), byApp: true)
        try await store.saveReceipt(notificationID: id, token: receipt.from ?? "", report: receipt.report)
        return Self.json(201, ["recorded": true])
    }
}
