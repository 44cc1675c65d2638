import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import RichPushCore
import Testing

@testable import RichPushServer

/// The webhook routes as their callers meet them: the `manage` scope, every bad field named, HTTPS only and no
/// address the policy refuses, a bound per app, secrets never shown twice, another app's endpoint not found, and an
/// app's deletion taking its endpoints and events.
@Suite struct WebhookAPITests {
    typealias Client = any TestClientProtocol

    static func issues(_ body: JSONValue) -> [String] {
        (body["error"]?["issues"]?.arrayValue ?? []).compactMap { i in
            guard let p = i["path"]?.stringValue, let r = i["rule"]?.stringValue else { return nil }
            return "\(p):\(r)"
        }
    }

    @Test func endpointsAreCheckedBoundedAndScoped() async throws {
        try await OperatorPathTests.withAPI { client, f in
            let (app, key) = try await APITests.createApp(client)
            let path = "/v1/apps/\(app)/webhooks"
            let bad: [(JSONValue, String)] = [
                (["url": "http://hooks.example.com/x"], "url:https"),
                (["url": "https://user:pw@hooks.example.com/x"], "url:credentials"),
                (["url": "https://10.1.2.3/x"], "url:address"),
                (["url": "https://[::1]/x"], "url:address"),
                (["url": "https://localhost/x"], "url:address"),
                (["url": "https://hooks.example.com/x#f"], "url:fragment"),
                (["url": "not a url"], "url:url-characters"),
                (["url": "hooks.example.com/x"], "url:url"),
                (["url": "https://0*"], "url:url-host"),
                (["url": "https://a..b/x"], "url:url-host"),
                (["url": "https://a'b.example/"], "url:url-host"),
                (["url": "https://h.example:0/x"], "url:url-port"),
                (["url": "ftp://h.example/x"], "url:https"),
                (["url": .string("https://h.example/" + String(repeating: "a", count: 2100))], "url:length"),
                (["url": "https://h.example/x", "events": ["delivery.exploded"]], "events[0]:enum"),
                (["url": "https://h.example/x", "events": ["webhook.test"]], "events[0]:enum"),
                (["url": "https://h.example/x", "events": []], "events:empty"),
                (["url": "https://h.example/x", "batch_size": 0], "batch_size:range"),
                (["url": "https://h.example/x", "batch_size": 1001], "batch_size:range"),
                (["url": "https://h.example/x", "enabled": false], "enabled:unknown-field"),
                (["url": "https://h.example/x", "secret": "whsec_x"], "secret:unknown-field"),
                ([:], "url:required"),
            ]
            for (body, issue) in bad {
                let (s, answer) = try await APITests.call(client, .post, path, key: key, body: body)
                #expect(s == 422, "\(body)")
                #expect(Self.issues(answer).contains(issue), "\(body): \(answer)")
            }
            // A key without `manage` may not see or change them.
            let (_, sendKey) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/keys",
                key: "admin-secret",
                body: ["scopes": ["send", "read"]]
            )
            let limited = try #require(sendKey["key"]?.stringValue ?? sendKey["api_key"]?.stringValue)
            #expect(try await APITests.call(client, .get, path, key: limited).0 == 403)

            var ids: [String] = []
            for i in 0..<WebhookLimits.endpointsPerApp {
                let (s, made) = try await APITests.call(
                    client,
                    .post,
                    path,
                    key: key,
                    body: ["url": .string("https://hooks.example.com/\(i)"), "events": ["token.invalid"]]
                )
                #expect(s == 201)
                #expect(made["secret"]?.stringValue?.hasPrefix("whsec_") == true)
                #expect(made["events"] == ["token.invalid"])
                ids.append(try #require(made["id"]?.stringValue))
            }
            let (over, refused) = try await APITests.call(
                client,
                .post,
                path,
                key: key,
                body: ["url": "https://h.example/x"]
            )
            #expect(over == 422 && Self.issues(refused) == [":webhooks-per-app"])
            let (_, listed) = try await APITests.call(client, .get, path, key: key)
            #expect(listed["webhooks"]?.arrayValue?.count == WebhookLimits.endpointsPerApp)
            #expect(listed["webhooks"]?.arrayValue?.allSatisfy { $0["secret"] == nil } == true)

            // Changed, disabled, enabled.
            let one = "\(path)/\(ids[0])"
            let (p, patched) = try await APITests.call(
                client,
                .patch,
                one,
                key: key,
                body: ["events": ["delivery.failed", "open"], "batch_size": 5, "enabled": false]
            )
            #expect(p == 200 && patched["batch_size"] == 5 && patched["state"] == "disabled")
            #expect(patched["events"] == ["delivery.failed", "open"])
            #expect(patched["disabled_reason"] == "disabled by the app")
            #expect(patched["next_attempt_at"] == nil)
            // Kept as media URLs are: scheme and host in lower case, the path as written.
            let (_, upper) = try await APITests.call(
                client,
                .patch,
                one,
                key: key,
                body: ["url": "HTTPS://Hooks.Example.COM/A%2Fb"]
            )
            #expect(upper["url"] == "https://hooks.example.com/A%2Fb")
            #expect(try await APITests.call(client, .patch, one, key: key, body: ["url": "http://x.example"]).0 == 422)

            // Another app's key, unknown ids, path tricks: not found.
            let (other, otherKey) = try await APITests.createApp(client)
            #expect(
                try await APITests.call(client, .get, "/v1/apps/\(other)/webhooks/\(ids[0])", key: otherKey).0 == 404
            )
            for id in ["wh_0000000000000000", "..", "wh_%2e%2e", String(repeating: "w", count: 300)] {
                #expect(try await APITests.call(client, .get, "\(path)/\(id)", key: key).0 == 404, "\(id)")
            }

            // Replays: within what is kept, from before to.
            let now = Date()
            let stamp = ISO8601DateFormatter()
            let replays: [(JSONValue, Int)] = [
                (["from": .string(stamp.string(from: now.addingTimeInterval(-3600)))], 202),
                (["from": .string(stamp.string(from: now.addingTimeInterval(-10 * 86_400)))], 422),
                (["from": .string(stamp.string(from: now.addingTimeInterval(60)))], 422),
                (
                    [
                        "from": .string(stamp.string(from: now.addingTimeInterval(3600))),
                        "to": .string(stamp.string(from: now.addingTimeInterval(7200))),
                    ], 422
                ),
                (["from": "yesterday"], 422),
                // Not a real time (Foundation's parser once rolled it over into the next day).
                (["from": .string(String(stamp.string(from: now).prefix(11)) + "24:00:00Z")], 422),
                (["from": .string(stamp.string(from: now.addingTimeInterval(-3600)) + "*")], 422),
                ([:], 422),
            ]
            // The endpoint is disabled (above): a replay would never run.
            let (disabled, why) = try await APITests.call(client, .post, "\(one)/replay", key: key, body: replays[0].0)
            #expect(disabled == 409 && why["error"]?["code"] == "endpoint-disabled", "\(why)")
            #expect(try await APITests.call(client, .patch, one, key: key, body: ["enabled": true]).0 == 200)
            for (body, status) in replays {
                #expect(
                    try await APITests.call(client, .post, "\(one)/replay", key: key, body: body).0 == status,
                    "\(body)"
                )
            }
            // One under way: the next is 429. Of twenty asked at once of another endpoint, one starts.
            #expect(try await APITests.call(client, .post, "\(one)/replay", key: key, body: replays[0].0).0 == 429)
            let two = "\(path)/\(ids[1])"
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<20 {
                    group.addTask {
                        try await APITests.call(client, .post, "\(two)/replay", key: key, body: replays[0].0).0
                    }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.filter { $0 == 202 }.count == 1 && statuses.filter { $0 == 429 }.count == 19)
            // Tests need a sender (this API has none: webhooks are off here).
            #expect(try await APITests.call(client, .post, "\(one)/test", key: key).0 == 404)

            // The secret rotates; the answer shows the new one once, and no cache may keep it. The route takes no
            // field: one given is refused, not passed over.
            for body: JSONValue in [["x": 1], ["secret": "whsec_mine"], [1]] {
                let (refused, why) = try await APITests.call(
                    client,
                    .post,
                    "\(one)/rotate-secret",
                    key: key,
                    body: body
                )
                #expect(refused == 422, "\(body): \(why)")
            }
            let (r, rotated) = try await APITests.call(client, .post, "\(one)/rotate-secret", key: key)
            #expect(r == 200 && rotated["secret"]?.stringValue?.hasPrefix("whsec_") == true)
            let cache = try await client.execute(
                uri: "\(one)/rotate-secret",
                method: .post,
                headers: [.authorization: "Bearer \(key)"],
                body: ByteBuffer(string: "{}")
            ) { ($0.status.code, $0.headers[.cacheControl]) }
            #expect(cache.0 == 200 && cache.1 == "no-store")
            let (_, shown) = try await APITests.call(client, .get, one, key: key)
            #expect(shown["secret"] == nil && shown["previous_secret_until"] != nil)
            // Two rotations at once: each moves the one before it aside, so both answered secrets sign (a read
            // and a write of their own once let the second drop the first's).
            let answered = try await withThrowingTaskGroup(of: String?.self) { group in
                for _ in 0..<2 {
                    group.addTask {
                        try await APITests.call(client, .post, "\(two)/rotate-secret", key: key).1["secret"]?
                            .stringValue
                    }
                }
                return try await group.reduce(into: Set<String>()) { if let s = $1 { $0.insert(s) } }
            }
            let stored = try #require(try await f.api.backend.webhooks.endpoint(appID: app, id: ids[1]))
            #expect(answered.count == 2 && Set([stored.secret] + [stored.previousSecret].compactMap { $0 }) == answered)

            // Deleted; the app's deletion takes the rest with its events.
            #expect(try await APITests.call(client, .delete, one, key: key).0 == 200)
            #expect(try await APITests.call(client, .delete, one, key: key).0 == 404)
            #expect(try await f.api.backend.webhooks.endpoints(appID: app).count == WebhookLimits.endpointsPerApp - 1)
            try await f.api.backend.webhooks.append(
                [NewWebhookEvent(appID: app, type: .tokenInvalid, detail: ["token": "x"])],
                now: Date()
            )
            #expect(
                try await f.api.backend.webhooks.events(appID: app, after: .start, through: nil, limit: 10).count == 1
            )
            #expect(try await APITests.call(client, .delete, "/v1/apps/\(app)", key: "admin-secret").0 == 200)
            #expect(try await f.api.backend.webhooks.endpoints(appID: app).isEmpty)
            #expect(try await f.api.backend.webhooks.events(appID: app, after: .start, through: nil, limit: 10).isEmpty)
        }
    }

    /// 64 reads of an app's endpoints at once on SQLite: each answered. (The store's reads once returned rows, which
    /// are not Sendable, and so took GRDB's blocking read: 16 at once held every thread of the concurrency pool
    /// waiting for a reader connection, and the node froze for good.)
    @Test func manyReadsAtOnceAreAnswered() async throws {
        try await OperatorPathTests.withAPI { client, _ in
            let (app, key) = try await APITests.createApp(client)
            let path = "/v1/apps/\(app)/webhooks"
            let (_, made) = try await APITests.call(client, .post, path, key: key, body: ["url": "https://h.example/x"])
            let id = try #require(made["id"]?.stringValue)
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for i in 0..<64 {
                    group.addTask {
                        try await APITests.call(client, .get, i % 2 == 0 ? path : "\(path)/\(id)", key: key).0
                    }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.count == 64 && statuses.allSatisfy { $0 == 200 })
        }
    }
}
