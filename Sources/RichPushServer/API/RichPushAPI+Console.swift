import Foundation
import Hummingbird
import RichPushCore

/// What a console needs besides sending: who a key is, an app's keys, its past notifications, a registry search,
/// and (in sandbox mode) what the simulated iPhone did with a notification.
extension RichPushAPI {
    /// `GET /v1/me`: the admin key, or an app's key with its scopes (and the app).
    func me(_ request: Request, _ context: APIRequestContext) async throws -> Response {
        switch try await authenticate(request, context) {
        case .admin:
            return Self.json(200, ["admin": true, "sandbox": .bool(simulate != nil)])
        case .app(let grant):
            guard let app = try await store.app(id: grant.appID) else { throw Failure(status: 404, code: "not-found", message: "this key's app is gone") }
            return Self.json(200, [
                "admin": false, "key_id": .string(grant.keyID), "scopes": .array(APIScope.allCases.filter(grant.scopes.contains).map { .string($0.rawValue) }),
                "app": app.json, "sandbox": .bool(simulate != nil),
            ])
        }
    }

    /// `GET /v1/apps/{app}/keys`: ids, scopes and dates; never a key.
    func listKeys(_ request: Request, _ context: APIRequestContext) async throws -> Response {
        let app = try await requireApp(request, context, .manage)
        return Self.json(200, ["keys": .array(try await store.keys(appID: app.id).map(\.json))])
    }

    /// A list's `limit` (1...100, default 20) from the query.
    static func listLimit(_ query: Parameters) throws -> Int {
        guard let l = query.get("limit") else { return 20 }
        guard let n = Int(l), (1...100).contains(n) else { throw Failure(status: 422, code: "invalid", message: "limit is a whole number from 1 to 100") }
        return n
    }

    /// `GET /v1/apps/{app}/notifications?before=&limit=`: newest first, with each one's counts by state.
    func listNotifications(_ request: Request, _ context: APIRequestContext) async throws -> Response {
        let app = try await requireApp(request, context, .read)
        let query = request.uri.queryParameters
        let limit = try Self.listLimit(query)
        var before: Double?
        if let b = query.get("before") {
            // Seconds since 1970, as `next_before` gives them; held to a range before any conversion.
            guard let t = Double(b), t.isFinite, (0...4_102_444_800).contains(t) else {
                throw Failure(status: 422, code: "invalid", message: "before is seconds since 1970 (a next_before from the page before)")
            }
            // Kept as the number given: a Date made from it may not give the same number back, and the page's
            // last notification would then be listed again on the next page.
            before = t
        }
        let found = try await store.notifications(appID: app.id, before: before, limit: limit)
        var items: [JSONValue] = []
        for n in found {
            let counts = try await queue.counts(notificationID: n.id)
            let message = n.message
            var item: [String: JSONValue] = [
                "id": .string(n.id), "created_at": .double(n.createdAt.timeIntervalSince1970),
                "counts": .object(Dictionary(uniqueKeysWithValues: counts.map { ($0.key.rawValue, JSONValue.int(Int64($0.value))) })),
                "total": .int(Int64(counts.values.reduce(0, +))),
            ]
            let alert = message["alert"]
            if let title = alert?["title"]?.stringValue ?? message["title"]?.stringValue { item["title"] = .string(title) }
            if let body = alert?["body"]?.stringValue ?? alert?.stringValue ?? message["body"]?.stringValue { item["body"] = .string(body) }
            items.append(.object(item))
        }
        var body: [String: JSONValue] = ["notifications": .array(items)]
        if found.count == limit, let last = found.last { body["next_before"] = .double(last.createdAt.timeIntervalSince1970) }
        return Self.json(200, .object(body))
    }

    /// `GET /v1/apps/{app}/devices?q=&after=&limit=`: devices whose token starts with q, or whose user id or a tag is q.
    func searchDevices(_ request: Request, _ context: APIRequestContext) async throws -> Response {
        let app = try await requireApp(request, context, .read)
        let query = request.uri.queryParameters
        let limit = try Self.listLimit(query)
        let q = query.get("q") ?? ""
        guard q.unicodeScalars.count <= 4096, !q.unicodeScalars.contains("\u{0}") else {
            throw Failure(status: 422, code: "invalid", message: "q is at most 4,096 characters, without NUL")
        }
        var after: Int64 = 0
        if let a = query.get("after") {
            guard let n = Int64(a), n >= 0 else { throw Failure(status: 422, code: "invalid", message: "after is a whole number of 0 or more (a next_after from the page before)") }
            after = n
        }
        let (devices, next) = try await registry.search(appID: app.id, matching: q, after: after, limit: limit)
        var body: [String: JSONValue] = ["devices": .array(devices.map(\.json)), "total": .int(Int64(try await registry.count(appID: app.id)))]
        if let next { body["next_after"] = .int(next) }
        return Self.json(200, .object(body))
    }

    /// `GET /v1/apps/{app}/notifications/{id}/simulation` (sandbox mode): the device library run on what the APNs
    /// emulator received for this notification: what the iPhone shows, attaches and skips, and why.
    func simulation(_ request: Request, _ context: APIRequestContext) async throws -> Response {
        let app = try await requireApp(request, context, .read)
        guard let simulate else { throw Failure(status: 404, code: "not-found", message: "the simulated iPhone runs in sandbox mode only") }
        guard let id = context.parameters.get("id"), let n = try await store.notification(id: id), n.appID == app.id else {
            throw Failure(status: 404, code: "not-found", message: "no such notification")
        }
        guard let result = await simulate(n.id) else {
            throw Failure(status: 404, code: "not-found", message: "the APNs emulator has not received this notification (yet)")
        }
        return Self.json(200, result)
    }
}
