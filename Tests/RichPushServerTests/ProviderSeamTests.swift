import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import RichPushCore
import RichPushServer
import Testing

/// A provider is one folder and one registration line: the test-only pigeon (Pigeon/) takes devices, checks its
/// tokens and sizes, shows its request in dry runs, and receives a message sent through the API, the queue and a
/// worker, with its outcomes recorded like any other provider's.
@Suite struct ProviderSeamTests {
    @Test func aThirdProviderTakesAMessageThroughTheWholePath() async throws {
        let pigeon = PigeonProvider()
        let providers = Providers([APNsProvider(), FCMProvider(), pigeon])  // the registration line
        let f = try APITests.fixture()
        var api = f.api
        api.providers = providers
        let store = f.store
        let fanOuts = api.fanOuts
        let sender = ProviderDeliverySender(
            providers: providers,
            app: { id in (try? await store.app(id: id)).flatMap { $0 } },
            message: { id in try? await store.message(id: id) }
        )
        let worker = DeliveryWorker(
            configuration: .init(retry: RetryPolicy(baseDelay: 0.01, maxDelay: 0.1, maxAttempts: 3)),
            queue: f.queue,
            sender: sender,
            prune: { d, _ in _ = try? await f.registry.prune(appID: d.appID, token: d.target.stored, invalidSince: nil)
            }
        )

        try await Application(router: api.router()).test(.router) { client in
            let (app, key) = try await APITests.createApp(client)
            func call(
                _ method: HTTPRequest.Method,
                _ path: String,
                _ body: JSONValue? = nil
            ) async throws -> (
                Int, JSONValue
            ) {
                try await APITests.call(client, method, "/v1/apps/\(app)\(path)", key: key, body: body)
            }
            for token in ["pigeon-home", "pigeon-lost", "pigeon-tired"] {
                let (status, device) = try await call(
                    .post,
                    "/devices",
                    ["token": .string(token), "platform": "web", "provider": "pigeon"]
                )
                #expect(status == 200)
                #expect(device["provider"] == "pigeon")
            }
            // Its token rule and its name among the providers, both named in the refusal.
            let (badToken, refusal) = try await call(
                .post,
                "/devices",
                ["token": "crow-1", "platform": "web", "provider": "pigeon"]
            )
            #expect(badToken == 422)
            #expect(refusal["error"]?["issues"]?.arrayValue?.first?["rule"] == "pigeon-token")
            let (unknown, unknownRefusal) = try await call(
                .post,
                "/devices",
                ["token": "x", "platform": "web", "provider": "owl"]
            )
            #expect(unknown == 422)
            #expect(
                unknownRefusal["error"]?["issues"]?.arrayValue?.first?["message"]
                    == "provider is one of apns, fcm, pigeon"
            )

            // A dry run counts its devices and shows its request; its size rule refuses a heavy message.
            let (dry, preview) = try await call(
                .post,
                "/notifications",
                ["title": "Coo", "audience": ["all": true], "dry_run": true]
            )
            #expect(dry == 200)
            #expect(preview["deliveries"]?["pigeon"] == 3)
            #expect(preview["requests"]?["pigeon"]?["note"] == "Coo")
            let (heavy, heavyRefusal) = try await call(
                .post,
                "/notifications",
                ["title": "A very long message for a bird", "audience": ["all": true]]
            )
            #expect(heavy == 422)
            #expect(heavyRefusal["error"]?["issues"]?.arrayValue?.first?["rule"] == "pigeon-too-heavy")

            // The send: accepted, queued, claimed by a worker, sent through the pigeon, outcomes recorded.
            let (accepted, answer) = try await call(
                .post,
                "/notifications",
                ["title": "Coo", "audience": ["tokens": ["pigeon-home", "pigeon-lost", "pigeon-tired"]]]
            )
            #expect(accepted == 202)
            let id = try #require(answer["id"]?.stringValue)
            await fanOuts.idle()
            _ = try await worker.runOnce()
            #expect(pigeon.delivered.map(\.token) == ["pigeon-home"])
            #expect(pigeon.delivered.map(\.title) == ["Coo"])
            let (_, outcome) = try await call(.get, "/notifications/\(id)")
            let byTarget = Dictionary(
                uniqueKeysWithValues: (outcome["deliveries"]?.arrayValue ?? []).compactMap { d in
                    d["target"]?.stringValue.map { ($0, d) }
                }
            )
            #expect(byTarget["pigeon-home"]?["state"] == "delivered")
            #expect(byTarget["pigeon-home"]?["provider"] == "pigeon")
            #expect(byTarget["pigeon-home"]?["provider_id"]?.stringValue?.hasPrefix("feather-") == true)
            #expect(byTarget["pigeon-lost"]?["state"] == "pruned")
            #expect(byTarget["pigeon-tired"]?["state"] == "queued")
            // The lost pigeon's token is gone from the registry.
            let (_, found) = try await call(.get, "/devices?q=pigeon-lost")
            #expect(found["devices"]?.arrayValue?.isEmpty == true)
        }
    }
}
