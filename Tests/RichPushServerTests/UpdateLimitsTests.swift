import Foundation
import Hummingbird
import HummingbirdTesting
import RichPushCore
import Testing

@testable import RichPushServer

/// The updates route names the bound an update met: 409 `version-limit` past a notification's versions, 429
/// `update-rate-limited` with `Retry-After` past its rate; both name their setting.
@Suite struct UpdateLimitsTests {
    @Test func theRouteNamesTheCountAndTheRate() async throws {
        let f = try APITests.fixture()
        var api = f.api
        api.updateLimits = UpdateLimits(maxVersions: 2, perSecond: 0.01, burst: 1)
        try await Application(router: api.router()).test(.router) { client in
            let (app, key) = try await DeviceReceiptsTests.token(client)
            func root() async throws -> String {
                let (status, sent) = try await APITests.call(
                    client,
                    .post,
                    "/v1/apps/\(app)/notifications",
                    key: key,
                    body: [
                        "title": "Score", "collapse_id": "match",
                        "audience": ["apns_tokens": [.string(String(repeating: "ab", count: 32))]],
                    ]
                )
                #expect(status == 202)
                return try #require(sent["id"]?.stringValue)
            }
            func update(_ id: String) async throws -> (Int, JSONValue) {
                try await APITests.call(
                    client,
                    .post,
                    "/v1/apps/\(app)/notifications/\(id)/updates",
                    key: key,
                    body: ["title": "Score", "body": "next"]
                )
            }
            // A burst of one: the second update at once waits for the bucket (100 s at 0.01 a second).
            let id = try await root()
            #expect(try await update(id).0 == 202)
            let (fast, refusal) = try await update(id)
            #expect(fast == 429 && refusal["error"]?["code"] == "update-rate-limited", "\(refusal)")
            #expect(refusal["error"]?["message"]?.stringValue?.contains("updates.per_second") == true)
        }
        // Two versions at most: once they are taken, the next is refused for good, whatever the rate.
        api.updateLimits = UpdateLimits(maxVersions: 2, perSecond: 1_000, burst: 1_000)
        try await Application(router: api.router()).test(.router) { client in
            let (app, key) = try await DeviceReceiptsTests.token(client)
            let (_, sent) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/notifications",
                key: key,
                body: [
                    "title": "Score", "collapse_id": "match",
                    "audience": ["apns_tokens": [.string(String(repeating: "cd", count: 32))]],
                ]
            )
            let id = try #require(sent["id"]?.stringValue)
            var statuses: [Int] = []
            var last = JSONValue.null
            for _ in 0..<3 {
                let (s, answer) = try await APITests.call(
                    client,
                    .post,
                    "/v1/apps/\(app)/notifications/\(id)/updates",
                    key: key,
                    body: ["title": "Score", "body": "next"]
                )
                statuses.append(s)
                last = answer
            }
            #expect(statuses == [202, 202, 409])
            #expect(
                last["error"]?["code"] == "version-limit"
                    && last["error"]?["message"]?.stringValue?.contains("updates.max_versions") == true
            )
        }
    }
}
