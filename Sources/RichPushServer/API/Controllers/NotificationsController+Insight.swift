import Foundation
import Hummingbird
import NIOCore
import RichPushCore

extension NotificationsController {
    /// `POST /v1/apps/{app}/notifications/{id}/opens`: the app's report of an open or a dismissal, with a key that
    /// registers devices (the one an app ships) or sends, naming the device's token: bound to this notification's
    /// delivery to that token, one per delivery. For a notification whose payload had no room for a receipt address.
    func appOpen(_ request: Request, _ context: APIRequestContext) async throws -> Response {
        let app = try await requireApp(context, anyOf: [.register, .send])
        guard let id = context.parameters.get("id"), let n = try await store.notification(id: id), n.appID == app.id
        else {
            throw APIError(.notFound, "no such notification")
        }
        let body = try DeliveryOpen.read(try await bodyJSON(request, upTo: 8192), byApp: true)
        guard let delivery = try await backend.receipts.delivery(notificationID: id, target: body.token ?? "") else {
            throw APIError(.notFound, "this notification was not sent to that token")
        }
        let open = DeliveryOpen(deliveryID: delivery, notificationID: id, event: body.event, action: body.action)
        switch try await backend.receipts.recordOpen(open) {
        case .recorded:
            metrics.openRecorded(body.event)
            return Response.json(201, ["recorded": true])
        case .repeated: throw APIError(.alreadyReported, "this delivery's open or dismissal is already reported")
        case .notDelivered: throw APIError(.notFound, "this notification was not sent to that token")
        }
    }

    /// `GET /v1/apps/{app}/notifications/{id}/funnel`: the notification's funnel as JSON, or with `format=csv` as
    /// CSV. Three grouped reads, whatever the send's size.
    func funnel(_ request: Request, _ context: APIRequestContext) async throws -> Response {
        let app = try await requireApp(context, .read)
        guard let id = context.parameters.get("id"), let n = try await store.notification(id: id), n.appID == app.id
        else {
            throw APIError(.notFound, "no such notification")
        }
        let format = request.uri.queryParameters.get("format") ?? "json"
        guard format == "json" || format == "csv" else { throw APIError(.invalid, "format is json or csv") }
        let f = try await Self.funnel(of: id, receipts: backend.receipts)
        if format == "csv" {
            var r = Response(status: .ok, body: .init(byteBuffer: ByteBuffer(string: f.csv)))
            r.headers[.contentType] = "text/csv; charset=utf-8"
            r.headers[.contentDisposition] = "attachment; filename=\"funnel-\(id.prefix(36)).csv\""
            return r
        }
        var body = f.json
        if case .object(var o) = body {
            o["id"] = .string(id)
            body = .object(o)
        }
        return Response.json(200, body)
    }

    static func funnel(of id: String, receipts: any ReceiptStore) async throws -> Funnel {
        Funnel(
            breakdown: try await receipts.breakdown(notificationID: id),
            receipts: try await receipts.summary(notificationID: id),
            opens: try await receipts.openSummary(notificationID: id)
        )
    }
}
