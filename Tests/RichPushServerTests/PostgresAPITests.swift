import Foundation
import Hummingbird
import HummingbirdTesting
import RichPushCore
import RichPushServer
import Testing

/// The API on a PostgreSQL backend with what PostgreSQL cannot keep: NUL characters. The fuzzer found them stopping
/// a request with 500 (an app's name) and a fan-out for good (a tag of the audience); every text that becomes a
/// column is refused at the edge, naming the field, and a message's text (stored as escaped JSON) goes through.
@Suite struct PostgresAPITests {
    @Test func nulCharactersAreRefusedWhereTheyWouldBeColumns() async throws {
        let backend = try await PostgresFixture.backend()
        let api = RichPushAPI(
            backend: backend,
            adminKey: "admin-secret",
            validation: .init(allowInsecureMedia: true, requireTargets: false)
        )
        try await Application(router: api.router()).test(.router) { client in
            let (nameStatus, name) = try await APITests.call(
                client,
                .post,
                "/v1/apps",
                key: "admin-secret",
                body: ["name": "Sh\u{0}op", "bundle_id": "com.example.app"]
            )
            #expect(
                nameStatus == 422 && name["error"]?["issues"]?.arrayValue?.first?["path"] == "name"
                    && name["error"]?["issues"]?.arrayValue?.first?["rule"] == "nul",
                "\(name)"
            )
            let (app, key) = try await APITests.createApp(client)
            for (field, value) in [
                ("user_id", "u\u{0}"), ("locale", "en\u{0}"), ("time_zone", "Europe/\u{0}"), ("app_version", "1\u{0}"),
            ] as [(String, String)] {
                var device: [String: JSONValue] = [
                    "token": .string(String(repeating: "ab", count: 32)), "platform": "ios",
                ]
                device[field] = .string(value)
                let (s, b) = try await APITests.call(
                    client,
                    .post,
                    "/v1/apps/\(app)/devices",
                    key: key,
                    body: .object(device)
                )
                #expect(
                    s == 422 && b["error"]?["issues"]?.arrayValue?.first?["path"] == .string(field)
                        && b["error"]?["issues"]?.arrayValue?.first?["rule"] == "nul",
                    "\(field): \(b) \(backend.health.status)"
                )
            }
            let (tagStatus, tag) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/devices",
                key: key,
                body: [
                    "token": .string(String(repeating: "ab", count: 32)), "platform": "ios", "tags": ["ok", "b\u{0}d"],
                ]
            )
            #expect(tagStatus == 422 && tag["error"]?["issues"]?.arrayValue?.first?["path"] == "tags[1]", "\(tag)")
            for audience: JSONValue in [
                ["tag": "a\u{0}b"], ["user": "\u{0}"], ["topic": "x\u{0}"], ["tokens": ["t\u{0}"]],
            ] {
                let (s, b) = try await APITests.call(
                    client,
                    .post,
                    "/v1/apps/\(app)/notifications",
                    key: key,
                    body: ["title": "Hi", "audience": audience]
                )
                #expect(s == 422 && b["error"]?["issues"]?.arrayValue?.first?["rule"] == "nul", "\(audience): \(b)")
            }
            // A message's own text is kept as JSON: it goes through, and reads back whole.
            let (sent, accepted) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/notifications",
                key: key,
                body: [
                    "title": "Hi\u{0}there", "audience": ["apns_tokens": [.string(String(repeating: "cd", count: 32))]],
                ]
            )
            #expect(sent == 202, "\(accepted)")
            let id = try #require(accepted["id"]?.stringValue)
            #expect(try await backend.store.message(id: id)?.alert.title == "Hi\u{0}there")
        }
        await backend.close()
    }
}
