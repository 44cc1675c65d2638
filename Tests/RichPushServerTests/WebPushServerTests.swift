import Crypto
import Foundation
import Hummingbird
import HummingbirdTesting
import NIOCore
import NIOPosix
import RichPushCore
import RichPushSandbox
import RichPushTransport
import RichPushWebPush
import Testing

@testable import RichPushServer

/// A sandbox in a scratch folder, an event loop for providers, and the sandbox's CA to trust.
struct WebPushFixture {
    let dir: URL
    let sandbox: Sandbox
    let group: MultiThreadedEventLoopGroup
    var trust: TLSTrust { .certificateAuthority(pem: sandbox.credentials.caCertificatePEM) }

    static func start() async throws -> WebPushFixture {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("webpush-\(UUID().uuidString)")
        return WebPushFixture(
            dir: dir,
            sandbox: try await Sandbox.start(directory: dir, threads: 1),
            group: MultiThreadedEventLoopGroup(numberOfThreads: 1)
        )
    }

    func stop() async throws {
        try await group.shutdownGracefully()
        await sandbox.stop()
    }

    func removeFolder() { try? FileManager.default.removeItem(at: dir) }
}

/// Web Push through the server: the app's VAPID key, browsers registered by their subscription, a rich message
/// encrypted for each and posted to the sandbox's push service, which decrypts what a browser would get.
@Suite struct WebPushServerTests {
    static func providers(_ sandbox: Sandbox, group: EventLoopGroup) throws -> Providers {
        let trust = TLSTrust.certificateAuthority(pem: sandbox.credentials.caCertificatePEM)
        let base = try Providers.sandbox(sandbox)
        return Providers(
            base.all + [
                WebPushProvider(.init(policy: AddressPolicy(allowAll: true), trust: trust), eventLoopGroup: group)
            ]
        )
    }

    @Test func aRichMessageReachesEachBrowserEncryptedAndGoneOnesArePruned() async throws {
        let f = try await WebPushFixture.start()
        defer { f.removeFolder() }
        let (dir, sandbox, group) = (f.dir, f.sandbox, f.group)
        let providers = try Self.providers(sandbox, group: group)
        let backend = try SQLiteBackend(path: dir.appendingPathComponent("db.sqlite").path)
        let api = RichPushAPI(
            backend: backend,
            adminKey: "admin-secret",
            validation: .init(allowInsecureMedia: true, requireTargets: false),
            providers: providers
        )
        let app = Application(router: api.router())
        try await app.test(.router) { client in
            let (appID, key) = try await APITests.createApp(client)
            let keysPath = "/v1/apps/\(appID)/webpush/keys"

            // The key: the subject is checked, the answer holds only the public half, a second needs replace.
            let (badStatus, bad) = try await APITests.call(client, .post, keysPath, key: key, body: ["subject": "me"])
            #expect(
                badStatus == 422 && bad["error"]?["issues"]?.arrayValue?.first?["rule"] == "vapid-subject",
                "\(bad)"
            )
            let (plainStatus, refusedKey) = try await APITests.call(
                client,
                .post,
                keysPath,
                key: key,
                body: ["subject": "mailto:a@example.com", "default_url": "http://shop.example.com/", "replace": "yes"]
            )
            let plainRules = refusedKey["error"]?["issues"]?.arrayValue?.compactMap { $0["rule"]?.stringValue } ?? []
            #expect(plainStatus == 422 && Set(plainRules) == ["https-url", "type"], "\(refusedKey)")
            let (status, made) = try await APITests.call(
                client,
                .post,
                keysPath,
                key: key,
                body: ["subject": "mailto:push@example.com", "default_url": "https://shop.example.com/"]
            )
            #expect(status == 201, "\(made)")
            let publicKey = try #require(made["webpush"]?["public_key"]?.stringValue)
            #expect(JWT.decodeBase64URL(Substring(publicKey))?.count == 65)
            let (again, exists) = try await APITests.call(
                client,
                .post,
                keysPath,
                key: key,
                body: ["subject": "mailto:push@example.com"]
            )
            #expect(again == 409 && exists["error"]?["code"] == "key-exists", "\(exists)")
            let (_, shown) = try await APITests.call(client, .get, "/v1/apps/\(appID)", key: key)
            #expect(shown["app"]?["webpush"]?["public_key"] == .string(publicKey))
            #expect(shown["app"]?["webpush"]?["private_key"] == nil)
            let stored = try #require(try await backend.store.app(id: appID)?.webPush)
            #expect(!shown.jsonString.contains(Data(stored.privateKey).base64EncodedString()))

            // Browsers: two by their subscription, one by the token form; refusals name the rule.
            let subs = (0..<3).map { _ in sandbox.webPush.subscribe(applicationServerKey: publicKey) }
            for s in subs.prefix(2) {
                let (st, body) = try await APITests.call(
                    client,
                    .post,
                    "/v1/apps/\(appID)/devices",
                    key: key,
                    body: ["platform": "web", "subscription": s, "user_id": "u1"]
                )
                #expect(st == 200 && body["provider"] == "webpush", "\(body)")
            }
            let third = try WebPushSubscription(json: subs[2])
            let (st3, body3) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(appID)/devices",
                key: key,
                body: ["platform": "web", "provider": "webpush", "token": .string(third.token)]
            )
            #expect(st3 == 200, "\(body3)")
            var plain = subs[0]
            if case .object(var o) = plain {
                o["endpoint"] = .string("http://push.example.net/w/1")
                plain = .object(o)
            }
            let refusals: [(JSONValue, String)] = [
                (["platform": "web", "subscription": plain], "webpush-endpoint-scheme"),
                (["platform": "ios", "subscription": subs[0]], "platform"),
                (
                    ["platform": "web", "subscription": ["endpoint": "https://push.example.net/w/1"]],
                    "webpush-subscription"
                ),
                (["platform": "web", "provider": "webpush", "token": "https://push.example.net/w/1"], "webpush-token"),
                // The token form is a browser's as much as the subscription form.
                (["platform": "ios", "provider": "webpush", "token": .string(third.token)], "platform"),
                (["platform": "android", "provider": "webpush", "token": .string(third.token)], "platform"),
                // Stored percent-encoded: 2,047 bytes of text would be a 6,000-byte endpoint, pruned at its first send.
                (
                    [
                        "platform": "web",
                        "subscription": [
                            "endpoint": .string("https://push.example.net/" + String(repeating: "é", count: 1011)),
                            "keys": subs[0]["keys"]!,
                        ],
                    ], "webpush-endpoint"
                ),
            ]
            for (body, rule) in refusals {
                let (st, answer) = try await APITests.call(
                    client,
                    .post,
                    "/v1/apps/\(appID)/devices",
                    key: key,
                    body: body
                )
                let rules = answer["error"]?["issues"]?.arrayValue?.compactMap { $0["rule"]?.stringValue } ?? []
                #expect(st == 422 && rules.contains(rule), "\(body): \(answer)")
            }

            // The second browser's user revoked permission: its push service answers 410.
            sandbox.webPush.unregister(subs[1]["endpoint"]!.stringValue!)
            let (sent, accepted) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(appID)/notifications",
                key: key,
                body: [
                    "title": "Goal!", "body": "2–1 in the 90th", "media": "https://cdn.example.com/goal.jpg",
                    "collapse_id": "match-42", "priority": "high", "ttl": 600, "audience": ["all": true],
                ]
            )
            #expect(sent == 202 || sent == 201, "\(accepted)")
            let id = try #require(accepted["id"]?.stringValue)
            await api.fanOuts.idle()
            let registry = backend.sqliteRegistry
            let worker = DeliveryWorker(
                queue: backend.sqliteQueue,
                sender: ProviderDeliverySender(
                    providers: providers,
                    app: { try? await backend.store.app(id: $0) },
                    message: { try? await backend.store.message(id: $0) }
                ),
                metrics: api.metrics,
                prune: { d, _ in
                    _ = try? await registry.prune(appID: d.appID, token: d.target.stored, invalidSince: nil)
                }
            )
            _ = try await worker.runOnce()
            let (_, outcome) = try await APITests.call(client, .get, "/v1/apps/\(appID)/notifications/\(id)", key: key)
            #expect(outcome["counts"] == ["delivered": 2, "pruned": 1], "\(outcome)")
            let gone = try WebPushSubscription(json: subs[1]).token
            #expect(try await registry.device(appID: appID, token: gone) == nil)

            let got = sandbox.webPush.recorded()
            #expect(got.count == 2)
            for r in got {
                let m = try #require(r.json)
                #expect(m["web_push"] == 8030 && m["mutable"] == true, "\(m)")
                let n = try #require(m["notification"])
                #expect(n["title"] == "Goal!" && n["body"] == "2–1 in the 90th")
                #expect(n["image"] == "https://cdn.example.com/goal.jpg")
                #expect(n["navigate"] == "https://shop.example.com/" && n["tag"] == "match-42")
                #expect(n["data"]?["rp"]?["id"] == .string(id))
                #expect(r.ttl == 600 && r.urgency == "high" && r.topic == "match-42")
                #expect(r.subject == "mailto:push@example.com")
            }
        }
        await providers.shutdown()
        try await f.stop()
    }

    /// An endpoint is an address a user chose: with the outbound policy, one that resolves to loopback (or any
    /// internal address) is never connected to, and the delivery ends with the reason.
    @Test func anEndpointAtAnInternalAddressIsNeverConnectedTo() async throws {
        let f = try await WebPushFixture.start()
        defer { f.removeFolder() }
        let (sandbox, group) = (f.sandbox, f.group)
        let trust = f.trust
        let provider = WebPushProvider(.init(trust: trust), eventLoopGroup: group)
        let app = ServerApp(
            id: "app_1",
            name: "Shop",
            bundleID: "com.example.app",
            webPush: WebPushCredentials(
                privateKey: Array(P256.Signing.PrivateKey().rawRepresentation),
                subject: "mailto:a@example.com"
            )
        )
        let subscription = try WebPushSubscription(json: sandbox.webPush.subscribe())
        for endpoint in [subscription.endpoint.absoluteString, "https://localhost:\(sandbox.webPush.port)/push/x"] {
            var s = subscription
            s.endpoint = URL(string: endpoint)!
            let result = await provider.send(
                DeliveryRecord(
                    id: 1,
                    notificationID: "n",
                    appID: app.id,
                    provider: .webPush,
                    target: .token(s.token),
                    state: .queued,
                    attempts: 1,
                    notBefore: Date(),
                    updatedAt: Date()
                ),
                message: PushMessage(alert: .init(title: "Hi")),
                app: app,
                receipt: nil
            )
            guard case .failed(let decision, let reason) = result else {
                Issue.record("\(endpoint) was sent to")
                continue
            }
            #expect(decision == .dropToken && reason.hasPrefix("webpush_address_refused"), "\(reason)")
        }
        #expect(sandbox.webPush.acceptedCount == 0)
        // At registration, what needs no lookup is refused by name: an internal address written as one, localhost.
        // The IPv4-mapped and SIIT forms are refused whatever they embed (::ffff:0:0/96, ::ffff:0:0:0/96).
        for host in [
            "127.0.0.1", "10.0.0.7", "[::1]", "localhost", "169.254.169.254", "[::ffff:8.8.8.8]", "[::ffff:0:0]",
            "[::ffff:0:808:808]", "[64:ff9b:1::1]", "[2001::1]", "[2002:808:808::1]", "[100::1]", "192.0.0.9",
        ] {
            var s = subscription
            s.endpoint = URL(string: "https://\(host)/push/x")!
            #expect(provider.tokenProblem(s.token)?.rule == "webpush-endpoint-address", "\(host)")
        }
        var outside = subscription
        outside.endpoint = URL(string: "https://fcm.googleapis.com/fcm/send/abc")!
        #expect(provider.tokenProblem(outside.token) == nil)
        await provider.shutdown()
        try await f.stop()
    }
}

/// Every answer class of a push service, through the provider: what the delivery does next.
@Suite struct WebPushProviderAnswerTests {
    /// The app these tests send for, its VAPID key `key`.
    static func app(signingWith key: P256.Signing.PrivateKey) -> ServerApp {
        ServerApp(
            id: "app_1",
            name: "Shop",
            bundleID: "com.example.app",
            webPush: WebPushCredentials(privateKey: Array(key.rawRepresentation), subject: "mailto:a@example.com")
        )
    }

    /// A fan-out's deliveries share one rendering of their notification: each subscription still gets its own
    /// receipt address and its own `TTL` (what is left of the expiration when it is sent), and the rest of the
    /// payload, its timestamp too, is the notification's.
    @Test func aNotificationIsRenderedOnceAndEachDeliveryGetsItsOwnReceiptAndTTL() async throws {
        let f = try await WebPushFixture.start()
        defer { f.removeFolder() }
        let provider = WebPushProvider(
            .init(policy: AddressPolicy(allowAll: true), trust: f.trust),
            eventLoopGroup: f.group
        )
        let key = P256.Signing.PrivateKey()
        let app = Self.app(signingWith: key)
        let tokens = try (0..<2).map { _ in
            try WebPushSubscription(
                json: f.sandbox.webPush.subscribe(applicationServerKey: VAPID.publicKey(key.publicKey))
            ).token
        }
        let receipts = DeviceReceipts(secret: [UInt8](repeating: 7, count: 32), base: "https://push.example.com")
        let template = try #require(receipts.template(for: "n_1", until: Date().addingTimeInterval(3600)))
        var message = PushMessage(alert: .init(title: "Sale"), media: [PushMedia(url: "https://cdn.example.com/a.jpg")])
        message.receiptURL = template
        message.expiration = Int64(Date().timeIntervalSince1970) + 600
        var addresses: [String] = []
        for (n, token) in tokens.enumerated() {
            if n > 0 { try await Task.sleep(nanoseconds: 2_100_000_000) }
            let stamp = try #require(receipts.stamp(address: template, notificationID: "n_1", delivery: Int64(n + 1)))
            addresses.append(stamp.address(template))
            let d = DeliveryRecord(
                id: Int64(n + 1),
                queued: NewDelivery(notificationID: "n_1", appID: app.id, provider: .webPush, target: .token(token))
            )
            guard case .delivered = await provider.send(d, message: message, app: app, receipt: stamp) else {
                Issue.record("delivery \(n + 1) was refused")
                return
            }
        }
        let got = f.sandbox.webPush.recorded()
        try #require(got.count == 2)
        let payloads = try got.map { try #require($0.json) }
        #expect(payloads.map { $0["notification"]?["data"]?["rp"]?["receipt"]?.stringValue } == addresses)
        #expect(Set(addresses).count == 2 && addresses.allSatisfy { !$0.contains(DeviceReceipts.placeholder) })
        func withoutReceipt(_ v: JSONValue) -> String {
            v.jsonString.replacingOccurrences(
                of: v["notification"]?["data"]?["rp"]?["receipt"]?.stringValue ?? "",
                with: ""
            )
        }
        #expect(withoutReceipt(payloads[0]) == withoutReceipt(payloads[1]))
        // 2.1 s apart, against an expiration in whole seconds: the second is asked to be kept 2 s less at least.
        #expect(got[0].ttl <= 600 && got[0].ttl >= 590 && got[1].ttl <= got[0].ttl - 2, "\(got.map(\.ttl))")
        await provider.shutdown()
        try await f.stop()
    }

    @Test func eachAnswerOfThePushServiceMapsToItsNextStep() async throws {
        let f = try await WebPushFixture.start()
        defer { f.removeFolder() }
        let (sandbox, group) = (f.sandbox, f.group)
        let trust = f.trust
        let provider = WebPushProvider(
            .init(policy: AddressPolicy(allowAll: true), trust: trust, requestTimeout: .seconds(2)),
            eventLoopGroup: group
        )
        let key = P256.Signing.PrivateKey()
        let app = Self.app(signingWith: key)
        let mine = try WebPushSubscription(
            json: sandbox.webPush.subscribe(applicationServerKey: VAPID.publicKey(key.publicKey))
        )
        let message = PushMessage(alert: .init(title: "Hi"))
        func send(_ token: String = mine.token, _ m: PushMessage = message, app a: ServerApp = app) async -> SendResult
        {
            await provider.send(token: token, message: m, app: a, receiptURL: nil)
        }
        guard case .delivered(let location) = await send() else {
            Issue.record("the first push was refused")
            return
        }
        #expect(location?.contains("/message/") == true)

        sandbox.webPush.inject(.tooManyRequests(retryAfter: 7))
        #expect(await send() == .failed(.retryAfter(7), reason: "webpush_429"))
        sandbox.webPush.inject(.unavailable(retryAfter: 3))
        #expect(await send() == .failed(.retryAfter(3), reason: "webpush_503"))
        sandbox.webPush.inject(.internalError)
        #expect(await send() == .failed(.retry, reason: "webpush_500"))
        sandbox.webPush.inject(.stall)
        // A failure without an answer names its cause, in the reason and in words.
        #expect(await send() == .failed(.retry, reason: "webpush_transport_timed_out"))
        #expect(
            DeliveryReasons.meaning("webpush_transport_timed_out")
                == "the push service did not answer: no answer within the request timeout; tried again"
        )
        #expect(DeliveryReasons.meaning("webpush_transport_connect_failed")?.contains("no connection") == true)
        #expect(DeliveryReasons.meaning("webpush_transport") != nil)
        sandbox.webPush.clearFaults()
        // A service whose certificate the node does not trust names TLS (it read connect_failed, as a refused port).
        let untrusting = WebPushProvider(
            .init(policy: AddressPolicy(allowAll: true), trust: .system, requestTimeout: .seconds(2)),
            eventLoopGroup: group
        )
        #expect(
            await untrusting.send(token: mine.token, message: message, app: app, receiptURL: nil)
                == .failed(.retry, reason: "webpush_transport_tls_failed")
        )
        await untrusting.shutdown()
        #expect(
            DeliveryReasons.meaning("webpush_transport_tls_failed")?.hasPrefix(
                "no connection to the push service: the TLS handshake failed"
            ) == true
        )

        // Another site's key: the service refuses the token (403), the app's credentials are what to fix.
        let other = ServerApp(
            id: "app_2",
            name: "Other",
            bundleID: "com.example.other",
            webPush: WebPushCredentials(
                privateKey: Array(P256.Signing.PrivateKey().rawRepresentation),
                subject: "mailto:b@example.com"
            )
        )
        #expect(await send(app: other) == .failed(.fixCredentials, reason: "webpush_403"))
        // No key at all: nothing is sent.
        #expect(
            await send(app: ServerApp(id: "app_3", name: "None", bundleID: "x"))
                == .failed(.fixCredentials, reason: "webpush_not_configured")
        )
        // Too large once encrypted: refused before sending, and the validator names the rule for any audience
        // that may reach browsers.
        var big = message
        big.data = ["blob": .string(String(repeating: "x", count: 4000))]
        #expect(await send(mine.token, big) == .failed(.fixRequest, reason: "webpush_payload_too_large"))
        let issues = provider.sizeIssues(big, audience: .all, now: { Date() })
        #expect(issues.map(\.rule) == ["webpush-size"])
        #expect(provider.sizeIssues(big, audience: .fcmTopic("news"), now: { Date() }).isEmpty)
        // Gone (410), and a subscription the service never made (404): both prune.
        sandbox.webPush.unregister(mine.endpoint.absoluteString)
        #expect(await send() == .failed(.dropToken, reason: "webpush_410"))
        var unknown = mine
        unknown.endpoint = URL(string: "https://127.0.0.1:\(sandbox.webPush.port)/push/no-such-subscription")!
        #expect(await send(unknown.token) == .failed(.dropToken, reason: "webpush_404"))
        // A token that is not a subscription.
        #expect(await send("not a subscription") == .failed(.dropToken, reason: "webpush_bad_subscription"))
        #expect(sandbox.webPush.acceptedCount == 1)

        await provider.shutdown()
        try await f.stop()
    }
}

/// The neutral message's `web` part: an icon, a badge and buttons, checked and rendered for browsers.
@Suite struct WebOptionsTests {
    @Test func iconBadgeAndButtonsAreReadCheckedAndRendered() throws {
        let json: JSONValue = [
            "title": "Goal!", "deep_link": "https://shop.example.com/m/42",
            "web": [
                "icon": "https://cdn.example.com/logo.png", "badge": "https://cdn.example.com/badge.png",
                "actions": [
                    ["action": "watch", "title": "Watch", "navigate": "https://shop.example.com/live"],
                    ["action": "later", "title": "Later"],
                ],
            ],
        ]
        let (m, report) = PushMessage.read(json)
        #expect(report.isValid, "\(report.errors)")
        let validator = MessageValidator(options: .init(requireTargets: false))
        #expect(validator.validate(json: json).isValid)
        #expect(PushMessage.read(m.json).0 == m, "the stored form reads back")
        let n = try #require(WebPushMessage(m).payload["notification"])
        // A live activity's states replace one another in the browser too: by collapse id, else the shared tag.
        var live = PushMessage(alert: .init(title: "Order A-17", body: "12 minutes"))
        live.liveActivity = LiveActivity(event: .update, contentState: ["eta": 12])
        live.pushType = .liveactivity
        #expect(WebPushMessage(live).payload["notification"]?["tag"] == .string(LiveActivity.defaultAndroidTag))
        #expect(WebPushMessage(live).topic == LiveActivity.defaultAndroidTag)
        live.collapseID = "order-A-17"
        #expect(WebPushMessage(live).payload["notification"]?["tag"] == "order-A-17")
        #expect(WebPushMessage(live).topic == "order-A-17")
        #expect(n["icon"] == "https://cdn.example.com/logo.png" && n["badge"] == "https://cdn.example.com/badge.png")
        #expect(
            n["actions"]
                == [
                    ["action": "watch", "title": "Watch", "navigate": "https://shop.example.com/live"],
                    // A button without a page opens the notification's own link.
                    ["action": "later", "title": "Later", "navigate": "https://shop.example.com/m/42"],
                ]
        )

        let bad: JSONValue = [
            "title": "T",
            "web": [
                "icon": "http://cdn.example.com/logo.png",
                "actions": [
                    ["action": "a b", "title": .string(String(repeating: "t", count: 65))],
                    ["action": "x", "title": "X"],
                    ["action": "x", "title": "Y"],
                ],
            ],
        ]
        let rules = Set(validator.validate(json: bad).errors.map { "\($0.path) \($0.rule)" })
        #expect(
            rules.isSuperset(of: [
                "web.icon https-required", "web.actions max-items", "web.actions[0].action action-id",
                "web.actions[0].title length", "web.actions[2].action duplicate",
            ]),
            "\(rules)"
        )
        let shape = PushMessage.read(["title": "T", "web": ["actions": [["title": "no id"]], "colour": "red"]]).1
        #expect(
            shape.errors.contains { $0.path == "web.actions[0].action" && $0.rule == "required" },
            "\(shape.errors)"
        )
        #expect(shape.errors.contains { $0.path.hasPrefix("web") && $0.path.hasSuffix("colour") }, "\(shape.errors)")
    }
}
