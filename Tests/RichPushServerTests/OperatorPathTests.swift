import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import RichPushCore
import RichPushServer
import Testing

/// What a newcomer and an operator meet: a reused Idempotency-Key refused, apps listed and deleted by the admin,
/// a send to a service the app has no credentials for warned about, deliveries that say what their reason means and
/// when they change, the version on /health and /metrics, and JSON for every refusal.
@Suite struct OperatorPathTests {
    typealias Client = any TestClientProtocol

    static func withAPI(_ body: @escaping @Sendable (Client, APITests.Fixture) async throws -> Void) async throws {
        let f = try APITests.fixture()
        let app = Application(router: f.api.router())
        try await app.test(.router) { client in try await body(client, f) }
    }

    /// draft-ietf-httpapi-idempotency-key-header §2.7: a key reused with another body is refused (422); the same body,
    /// its keys in another order, gets the first answer.
    @Test func anIdempotencyKeyReusedWithAnotherBodyIsRefused() async throws {
        try await Self.withAPI { client, f in
            let (app, key) = try await APITests.createApp(client)
            let token = String(format: "%064x", 7)
            let first: JSONValue = ["title": "Hi", "collapse_id": "c1", "audience": ["apns_tokens": [.string(token)]]]
            let (s1, b1) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/notifications",
                key: key,
                body: first,
                headers: [("Idempotency-Key", "order-1")]
            )
            #expect(s1 == 202)
            #expect(b1["_request_sha256"] == nil)
            let reordered: JSONValue = [
                "audience": ["apns_tokens": [.string(token)]], "collapse_id": "c1", "title": "Hi",
            ]
            let (s2, b2) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/notifications",
                key: key,
                body: reordered,
                headers: [("Idempotency-Key", "order-1")]
            )
            #expect(s2 == 202 && b2 == b1)
            let other: JSONValue = ["title": "Hello", "audience": ["apns_tokens": [.string(token)]]]
            let (s3, b3) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/notifications",
                key: key,
                body: other,
                headers: [("Idempotency-Key", "order-1")]
            )
            #expect(s3 == 422)
            #expect(b3["error"]?["code"] == "idempotency-key-reused")
            #expect(b3["error"]?["issues"]?.arrayValue?.first?["rule"] == "idempotency-key-reused")
            #expect(b3["error"]?["issues"]?.arrayValue?.first?["path"] == "Idempotency-Key")
            // An update in place keeps the same rule.
            let id = try #require(b1["id"]?.stringValue)
            let u1: JSONValue = ["title": "Hi again"]
            let (s4, b4) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/notifications/\(id)/updates",
                key: key,
                body: u1,
                headers: [("Idempotency-Key", "update-1")]
            )
            #expect(s4 == 202)
            let (s5, b5) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/notifications/\(id)/updates",
                key: key,
                body: u1,
                headers: [("Idempotency-Key", "update-1")]
            )
            #expect(s5 == 202 && b5 == b4)
            let (s6, b6) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/notifications/\(id)/updates",
                key: key,
                body: ["title": "Changed"],
                headers: [("Idempotency-Key", "update-1")]
            )
            #expect(s6 == 422 && b6["error"]?["code"] == "idempotency-key-reused")
            // The same key and body for another notification is another request: refused too (a key names one request
            // per app), where it once answered with the first notification's update.
            let (_, other2) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/notifications",
                key: key,
                body: ["title": "Other", "collapse_id": "c2", "audience": ["apns_tokens": [.string(token)]]]
            )
            let otherID = try #require(other2["id"]?.stringValue)
            let (s7, b7) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/notifications/\(otherID)/updates",
                key: key,
                body: u1,
                headers: [("Idempotency-Key", "update-1")]
            )
            #expect(s7 == 422 && b7["error"]?["code"] == "idempotency-key-reused", "\(b7)")
            _ = f
        }
    }

    /// The admin lists every app a page at a time and deletes one with all it holds; an app key may do neither, and
    /// a 404 does not repeat the id it was given.
    @Test func theAdminListsAppsAndDeletesOneWithAllItHolds() async throws {
        try await Self.withAPI { client, f in
            var apps: [(String, String)] = []
            for _ in 0..<3 { apps.append(try await APITests.createApp(client)) }
            let (s1, page1) = try await APITests.call(client, .get, "/v1/apps?limit=2", key: "admin-secret")
            #expect(s1 == 200)
            #expect(page1["apps"]?.arrayValue?.count == 2)
            let after = try #require(page1["next_after"]?.stringValue)
            let (_, page2) = try await APITests.call(
                client,
                .get,
                "/v1/apps?limit=2&after=\(after)",
                key: "admin-secret"
            )
            let listed = ((page1["apps"]?.arrayValue ?? []) + (page2["apps"]?.arrayValue ?? [])).compactMap {
                $0["id"]?.stringValue
            }
            #expect(Set(listed) == Set(apps.map(\.0)))
            let (forbidden, _) = try await APITests.call(client, .get, "/v1/apps", key: apps[0].1)
            #expect(forbidden == 403)
            let (refused, _) = try await APITests.call(client, .delete, "/v1/apps/\(apps[0].0)", key: apps[0].1)
            #expect(refused == 403)
            let (badAfter, bad) = try await APITests.call(client, .get, "/v1/apps?after=a%27b", key: "admin-secret")
            #expect(badAfter == 422 && bad["error"]?["issues"]?.arrayValue?.first?["path"] == "after")

            let (app, key) = apps[0]
            let (reg, _) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/devices",
                key: key,
                body: ["token": .string(String(format: "%064x", 1)), "platform": "ios"]
            )
            #expect(reg == 200)
            let (sent, _) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/notifications",
                key: key,
                body: ["title": "Hi", "audience": ["all": true]]
            )
            #expect(sent == 202)
            await f.api.fanOuts.idle()
            let (deleted, body) = try await APITests.call(client, .delete, "/v1/apps/\(app)", key: "admin-secret")
            #expect(deleted == 200 && body["removed"]?.stringValue == app)
            let (withKey, _) = try await APITests.call(client, .get, "/v1/apps/\(app)", key: key)
            #expect(withKey == 401)
            let (asAdmin, gone) = try await APITests.call(client, .get, "/v1/apps/\(app)", key: "admin-secret")
            #expect(asAdmin == 404)
            #expect(gone["error"]?["message"]?.stringValue.map { !$0.contains(app) } == true)
            #expect(try await f.registry.count(appID: app) == 0)
            let (again, _) = try await APITests.call(client, .delete, "/v1/apps/\(app)", key: "admin-secret")
            #expect(again == 404)
            let (_, left) = try await APITests.call(client, .get, "/v1/apps", key: "admin-secret")
            #expect(
                Set(left["apps"]?.arrayValue?.compactMap { $0["id"]?.stringValue } ?? [])
                    == Set(apps.dropFirst().map(\.0))
            )
        }
    }

    /// Outside sandbox mode (no fallback client), a send to tokens of a service the app holds no credentials for is
    /// accepted with a warning naming it, and so is its dry run; a registry send warns when the app has none at all.
    @Test func aSendThroughAServiceWithoutCredentialsIsWarnedAbout() async throws {
        try await Self.withAPI { client, _ in
            let (app, key) = try await APITests.createApp(client)
            let apns: JSONValue = ["title": "Hi", "audience": ["apns_tokens": [.string(String(format: "%064x", 3))]]]
            let (s1, b1) = try await APITests.call(client, .post, "/v1/apps/\(app)/notifications", key: key, body: apns)
            #expect(s1 == 202)
            #expect(b1["warnings"]?.arrayValue?.compactMap { $0["rule"]?.stringValue } == ["no-apns-credentials"])
            #expect(b1["warnings"]?.arrayValue?.first?["message"]?.stringValue?.contains("apns_not_configured") == true)
            let dry: JSONValue = [
                "title": "Hi", "dry_run": true, "audience": ["apns_tokens": [.string(String(format: "%064x", 3))]],
            ]
            let (s2, b2) = try await APITests.call(client, .post, "/v1/apps/\(app)/notifications", key: key, body: dry)
            #expect(s2 == 200)
            #expect(b2["warnings"]?.arrayValue?.compactMap { $0["rule"]?.stringValue } == ["no-apns-credentials"])
            let all: JSONValue = ["title": "Hi", "audience": ["all": true]]
            let (_, b3) = try await APITests.call(client, .post, "/v1/apps/\(app)/notifications", key: key, body: all)
            #expect(
                Set(b3["warnings"]?.arrayValue?.compactMap { $0["rule"]?.stringValue } ?? [])
                    == ["no-apns-credentials", "no-fcm-credentials"]
            )
            // Many Live Activities in one request: each item's answer warns, as its own send's would.
            for (i, activity) in ["a", "b"].enumerated() {
                let token: JSONValue = [
                    "kind": "activity", "token": .string(String(format: "%064x", 10 + i)),
                    "activity_type": "Order", "activity_id": .string(activity),
                ]
                #expect(
                    try await APITests.call(client, .post, "/v1/apps/\(app)/live/tokens", key: key, body: token).0
                        == 200
                )
            }
            let items: JSONValue = [
                "items": .array(
                    ["a", "b"].map {
                        [
                            "live_activity": ["event": "update", "content_state": ["n": 1]],
                            "audience": ["live_activity": .string($0)],
                        ]
                    }
                )
            ]
            let (s4, b4) = try await APITests.call(client, .post, "/v1/apps/\(app)/live/updates", key: key, body: items)
            #expect(s4 == 202, "\(b4)")
            #expect(
                b4["notifications"]?.arrayValue?.map {
                    $0["warnings"]?.arrayValue?.compactMap { $0["rule"]?.stringValue } ?? []
                } == [["no-apns-credentials"], ["no-apns-credentials"]],
                "\(b4)"
            )
        }
    }

    /// Each delivery says what its reason means, when it last changed and, while it waits, when it is next tried;
    /// the notification its title and when it was accepted.
    @Test func deliveriesSayWhatTheirReasonMeansAndWhenTheyAreTriedNext() async throws {
        try await Self.withAPI { client, f in
            let (app, key) = try await APITests.createApp(client)
            let token = String(format: "%064x", 9)
            let (_, sent) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/notifications",
                key: key,
                body: ["title": "Your order", "audience": ["apns_tokens": [.string(token)]]]
            )
            let id = try #require(sent["id"]?.stringValue)
            let claimed = try await f.queue.claim(owner: "w", limit: 10, now: Date(), lease: 60)
            let d = try #require(claimed.first)
            let next = Date().addingTimeInterval(120)
            #expect(
                try await f.queue.reschedule(
                    id: d.id,
                    owner: "w",
                    notBefore: next,
                    reason: "ServiceUnavailable",
                    now: Date()
                )
            )
            let (s, out) = try await APITests.call(client, .get, "/v1/apps/\(app)/notifications/\(id)", key: key)
            #expect(s == 200)
            #expect(out["title"] == "Your order")
            #expect(abs((out["created_at"]?.doubleValue ?? 0) - Date().timeIntervalSince1970) < 60)
            let row = try #require(out["deliveries"]?.arrayValue?.first)
            #expect(row["reason"] == "ServiceUnavailable")
            #expect(row["meaning"]?.stringValue?.isEmpty == false)
            #expect(abs((row["next_attempt_at"]?.doubleValue ?? 0) - next.timeIntervalSince1970) < 1)
            #expect(abs((row["updated_at"]?.doubleValue ?? 0) - Date().timeIntervalSince1970) < 60)
            #expect(DeliveryReasons.meaning("apns_not_configured")?.contains("PATCH /v1/apps") == true)
            #expect(DeliveryReasons.meaning("webpush_410")?.contains("dropped") == true)
            #expect(DeliveryReasons.meaning("BadDeviceToken")?.contains("environment") == true)
            #expect(DeliveryReasons.meaning("UNREGISTERED") != nil)
            #expect(DeliveryReasons.meaning("nonsense") == nil)
            // APNs' and FCM's transport failures say what did not happen, connecting or answering.
            #expect(
                DeliveryReasons.meaning("transport_tls_failed")?.hasPrefix(
                    "no connection to APNs or FCM: the TLS handshake failed"
                ) == true
            )
            #expect(
                DeliveryReasons.meaning("transport_timed_out")
                    == "APNs or FCM did not answer: no answer within the request timeout"
            )
        }
    }

    /// The version on /health (without a key) and in the build-info metric; an unknown route is a JSON 404.
    @Test func healthAndMetricsNameTheVersionAndUnknownRoutesAnswerJSON() async throws {
        try await Self.withAPI { client, _ in
            let (s, health) = try await APITests.call(client, .get, "/health", key: "admin-secret")
            #expect(s == 200 && health["version"]?.stringValue == RichPushVersion.current)
            let (_, open) = try await APITests.call(client, .get, "/health", key: nil)
            #expect(open["version"] == nil)
            let metrics = try await client.execute(uri: "/metrics", method: .get) { String(buffer: $0.body) }
            #expect(metrics.contains("richpush_build_info{version=\"\(RichPushVersion.current)\"} 1"))
            let (missing, body) = try await APITests.call(client, .get, "/v1/no-such-thing", key: "admin-secret")
            #expect(missing == 404 && body["error"]?["code"] == "not-found")
        }
    }
}
