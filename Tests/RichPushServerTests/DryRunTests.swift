import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import RichPushCore
import RichPushFCM
import RichPushSandbox
import RichPushServer
import RichPushTestSupport
import Testing

/// Dry runs against the FCM emulator over real TLS HTTP/2: the requests a send would make, the deliveries it would
/// create, FCM's verdict on each token, and nothing stored or sent.
@Suite struct DryRunTests {
    @Test func aDryRunShowsTheRequestsCountsAndTokenVerdictsAndSendsNothing() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("dry-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let sandbox = try await Sandbox.start(directory: dir, threads: 1)
        let f = try APITests.fixture()
        let account = try ServiceAccount(contentsOf: sandbox.files["service-account"]!)
        let providers = try Providers.sandbox(sandbox)
        var api = f.api
        api.providers = providers
        sandbox.fcm.unregister(token: "fcm-gone-token-0001")
        try await Application(router: api.router()).test(.router) { client in
            let (app, key) = try await APITests.createApp(client)
            for (i, platform) in ["ios", "ios", "ios", "android", "android", "ios"].enumerated() {
                let token = platform == "ios" ? String(format: "%064x", i + 1) : "fcm-registered-token-\(i)"
                let tags: JSONValue = i < 5 ? ["vip"] : []
                #expect(
                    try await APITests.call(
                        client,
                        .post,
                        "/v1/apps/\(app)/devices",
                        key: key,
                        body: ["token": .string(token), "platform": .string(platform), "tags": tags]
                    ).0 == 200
                )
            }
            // A registry tag: counted per provider, both requests shown.
            let (status, tag) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/notifications",
                key: key,
                body: [
                    "title": "Sale", "media": "https://cdn.example.com/a.jpg", "audience": ["tag": "vip"],
                    "dry_run": true,
                ]
            )
            #expect(status == 200, "\(tag)")
            #expect(tag["deliveries"] == ["apns": 3, "fcm": 2])
            #expect(tag["requests"]?["apns"]?["payload"]?["aps"]?["mutable-content"] == 1)
            #expect(tag["requests"]?["apns"]?["headers"]?["apns-topic"] == "com.example.app")
            #expect(
                tag["requests"]?["fcm"]?["body"]?["message"]?["android"]?["notification"]?["image"]
                    == "https://cdn.example.com/a.jpg"
            )
            #expect(tag["requests"]?["fcm"]?["path"]?.stringValue?.contains(account.projectID) == true)
            #expect(tag["id"] == nil)

            // Tokens as given: FCM's verdict on each, without a delivery.
            let accepted = sandbox.fcm.acceptedCount
            let (_, tokens) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/notifications",
                key: key,
                body: [
                    "title": "Hi", "dry_run": true,
                    "audience": [
                        "apns_tokens": [.string(String(repeating: "ab", count: 32))],
                        "fcm_tokens": ["fcm-fresh-token-0001", "fcm-gone-token-0001"],
                    ],
                ]
            )
            #expect(tokens["deliveries"] == ["apns": 1, "fcm": 2])
            #expect(
                tokens["fcm_tokens"] == ["fcm-fresh-token-0001": "valid", "fcm-gone-token-0001": "UNREGISTERED"],
                "\(tokens)"
            )
            #expect(tokens["requests"]?["apns"]?["path"] == .string("/3/device/" + String(repeating: "ab", count: 32)))
            #expect(sandbox.fcm.acceptedCount == accepted)

            // An invalid dry run is refused like a send; a wrong type for dry_run is named.
            #expect(
                try await APITests.call(
                    client,
                    .post,
                    "/v1/apps/\(app)/notifications",
                    key: key,
                    body: ["dry_run": true, "audience": ["tag": "vip"]]
                ).0 == 422
            )
            let bad = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/notifications",
                key: key,
                body: ["title": "x", "dry_run": "yes", "audience": ["tag": "vip"]]
            )
            #expect(bad.0 == 422 && (bad.1["error"]?["issues"]?.arrayValue ?? []).contains { $0["path"] == "dry_run" })
        }
        // Nothing queued, nothing sent.
        #expect(try await f.queue.counts().values.reduce(0, +) == 0)
        #expect(sandbox.apns.acceptedCount == 0)
        await providers.shutdown()
        await sandbox.stop()
    }
}
