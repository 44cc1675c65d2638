import Foundation
import Hummingbird
import NIOCore
import RichPushCore
import ServiceLifecycle

extension NotificationsController {
    /// `POST /v1/apps/{app}/notifications/{id}/opens`: the app's report of an open or a dismissal, with a key that
    /// registers devices (the one an app ships) or sends, naming the device's token: bound to this notification's
    /// delivery to that token, one per delivery. For a notification whose payload had no room for a receipt address.
    func appOpen(_ request: Request, _ context: AppRequestContext) async throws -> EditedResponse<Recorded> {
        let app = context.app
        let (id, _) = try await requireNotification(context)
        let body = try DeliveryOpen.read(
            try await bodyJSON(request, upTo: DeliveryOpen.maxBodyBytes(byApp: true)),
            byApp: true
        )
        guard let delivery = try await backend.receipts.delivery(notificationID: id, target: body.token ?? "") else {
            throw APIError(.notFound, "this notification was not sent to that token")
        }
        return try await ReceiptsController.record(
            body,
            delivery: delivery,
            of: id,
            in: backend.receipts,
            minutes: minutes,
            metrics: metrics,
            unknown: "this notification was not sent to that token"
        )
    }

    /// `GET /v1/apps/{app}/notifications/{id}/funnel`: the notification's funnel as JSON, or with `format=csv` as
    /// CSV. Read through the ``InsightCache`` the live view shares: at most once a second whatever the readers.
    func funnel(_ request: Request, _ context: AppRequestContext) async throws -> Response {
        let app = context.app
        let (id, _) = try await requireNotification(context)
        let format = request.uri.queryParameters.get("format") ?? "json"
        guard format == "json" || format == "csv" else { throw APIError(.invalid, "format is json or csv") }
        let f = try await numbers.numbers(id).funnel
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

    /// `GET /v1/apps/{app}/notifications/{id}/events`: the notification's numbers as server-sent events, each
    /// `event: insight` with the deliveries by state, the funnel, the opens per 10 minutes and the counts over time
    /// while watched (`series`: `[t, sent, provider_accepted, received, opened]`). One reader per notification
    /// however many watch (``InsightStreams``); 429 past the node's watchers. The stream ends after `seconds` (1 to
    /// 3,600, default 600): a view open longer opens a new one. A key revoked while its view is open ends the view
    /// within a second or so.
    func events(_ request: Request, _ context: AppRequestContext) async throws -> Response {
        let app = context.app
        let (id, _) = try await requireNotification(context)
        var lifetime = 600
        if let s = request.uri.queryParameters.get("seconds") {
            guard let n = Int(s), (1...3600).contains(n) else {
                throw APIError(.invalid, "seconds is a whole number from 1 to 3600")
            }
            lifetime = n
        }
        // Counted per app and per key as well as per node: one app's key cannot take the views another app needs.
        let key: String
        switch try context.requireCaller() {
        case .admin: key = "admin"
        case .app(let grant): key = grant.keyID
        }
        let watcher: UUID
        let stream: AsyncStream<ByteBuffer>
        switch insight.watch(id, app: app.id, key: key) {
        case .success(let admitted): (watcher, stream) = admitted
        case .failure(let refusal): throw APIError.rateLimited(after: 5, refusal.description)
        }
        let insight = self.insight
        let seconds = lifetime
        // An app's key is looked at again every second while its view is open: a key revoked meanwhile ends the
        // view (it kept reading until its lifetime ran out, up to an hour). The grant comes from the key cache, which
        // a revocation clears on every node, so a look costs no database work until then.
        let keyHash = key == "admin" ? nil : Authenticator.bearerHash(request)
        let store = self.store
        let body = ResponseBody { writer in
            defer { insight.stop(id, watcher) }
            try await withThrowingTaskGroup(of: Void.self) { group in
                // The view's lifetime: when it ends, so does the stream (cancelled once the stream ended first).
                group.addTask {
                    do { try await Task.sleep(nanoseconds: UInt64(seconds) * 1_000_000_000) } catch { return }
                    insight.stop(id, watcher)
                }
                if let keyHash {
                    group.addTask {
                        while true {
                            do { try await Task.sleep(nanoseconds: 1_000_000_000) } catch { return }
                            do {
                                guard try await store.authorize(keyHash: keyHash) == nil else { continue }
                            } catch {
                                continue  // the database did not answer: that is not a revocation
                            }
                            insight.stop(id, watcher)
                            return
                        }
                    }
                }
                // The server stopping ends the stream (an open view would otherwise hold the shutdown).
                try await withGracefulShutdownHandler {
                    for await chunk in stream { try await writer.write(chunk) }
                } onGracefulShutdown: {
                    insight.stop(id, watcher)
                }
                group.cancelAll()
            }
            try await writer.finish(nil)
        }
        var response = Response(status: .ok, body: body)
        response.headers[.contentType] = "text/event-stream; charset=utf-8"
        response.headers[.cacheControl] = "no-store"
        return response
    }

    /// One event's numbers: deliveries by state, the funnel, opens over time (read once for every watcher, from
    /// the cache the funnel route reads).
    static func insightEvent(_ id: String, numbers: InsightCache) async throws -> JSONValue {
        let n = try await numbers.numbers(id)
        let byState = n.byState
        let counts = Dictionary(uniqueKeysWithValues: byState.map { ($0.key.rawValue, JSONValue.int(Int64($0.value))) })
        let total = byState.values.reduce(0, +)
        return [
            "id": .string(id), "counts": .object(counts), "total": .int(Int64(total)), "funnel": n.funnel.json,
            "opens_over_time": .array(n.timeline.map { [.int($0.start), .int(Int64($0.opens))] }),
        ]
    }

    /// `GET /v1/apps/{app}/insights?hours=`: the app's deliveries queued, delivered, failed, devices' reports and
    /// opens per hour over the last `hours` (1 to 720, default 48), with its most common failure reasons and its
    /// devices by the notification permission their apps reported (counted at most once a minute); with
    /// `format=csv`, one line per hour.
    func appInsights(_ request: Request, _ context: AppRequestContext) async throws -> Response {
        let app = context.app
        let query = request.uri.queryParameters
        var hours = 48
        if let h = query.get("hours") {
            guard let n = Int(h), (1...720).contains(n) else {
                throw APIError(.invalid, "hours is a whole number from 1 to 720")
            }
            hours = n
        }
        let format = query.get("format") ?? "json"
        guard format == "json" || format == "csv" else { throw APIError(.invalid, "format is json or csv") }
        let now = Date()
        // Whole hours: the first one is the hour `hours - 1` before the current one.
        let since = Date(timeIntervalSince1970: (floor(now.timeIntervalSince1970 / 3600) - Double(hours - 1)) * 3600)
        let (rows, failures) = try await backend.receipts.appHours(appID: app.id, since: since)
        let kinds = MinuteCount.Kind.allCases
        if format == "csv" {
            var lines = ["hour," + kinds.map(\.rawValue).joined(separator: ",")]
            let iso = ISO8601DateFormatter()
            for h in rows {
                lines.append(
                    iso.string(from: Date(timeIntervalSince1970: TimeInterval(h.hour))) + ","
                        + kinds.map { String(h.counts[$0] ?? 0) }.joined(separator: ",")
                )
            }
            var r = Response(
                status: .ok,
                body: .init(byteBuffer: ByteBuffer(string: lines.joined(separator: "\r\n") + "\r\n"))
            )
            r.headers[.contentType] = "text/csv; charset=utf-8"
            r.headers[.contentDisposition] = "attachment; filename=\"insights-\(app.id).csv\""
            return r
        }
        let list: [[String: Int64]] = rows.map { h in
            var o = ["hour": h.hour]
            for k in kinds { o[k.rawValue] = Int64(h.counts[k] ?? 0) }
            return o
        }
        let permissions = try await counts.permissions(app.id) { try await registry.permissions(appID: app.id) }
        return try HourlyInsight(
            app: app.id,
            since: Int64(since.timeIntervalSince1970),
            hours: list,
            topFailures: failures.map { .init(reason: $0.0, count: $0.1) },
            devicesByPermission: permissions
        ).response(from: request, context: context)
    }

}
