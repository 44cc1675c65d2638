import Crypto
import Foundation
import GRDB
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import RichPushCore
import RichPushFCM
import RichPushSandbox
import RichPushServer
import RichPushTestSupport
import Testing

/// Per-app credentials, keys, audiences (FCM topics, raw tokens, spread), the durable fan-out, the in-memory
/// store twin, and the configuration file, over real SQLite and the sandbox emulators.
@Suite struct AppsAndAudiencesTests {
    typealias Client = any TestClientProtocol
    static let admin = "admin-secret-key-0001"

    static func sqlite() throws -> (RichPushAPI, SQLiteServerStore, SQLiteDeviceRegistry, SQLiteDeliveryQueue) {
        let backend = try SQLiteBackend(
            path: FileManager.default.temporaryDirectory.appendingPathComponent("apps-\(UUID().uuidString).sqlite").path
        )
        let api = RichPushAPI(
            backend: backend,
            adminKey: admin,
            validation: .init(allowInsecureMedia: true, requireTargets: false)
        )
        return (api, backend.sqliteStore, backend.sqliteRegistry, backend.sqliteQueue)
    }

    static func call(
        _ client: Client,
        _ method: HTTPRequest.Method,
        _ uri: String,
        key: String?,
        body: JSONValue? = nil
    ) async throws -> (Int, JSONValue, String) {
        var headers = HTTPFields()
        if let key { headers[.authorization] = "Bearer \(key)" }
        return try await client.execute(
            uri: uri,
            method: method,
            headers: headers,
            body: body.map { ByteBuffer(bytes: $0.serialized()) }
        ) { r in
            (
                Int(r.status.code), (try? JSONValue.parse(Array(r.body.readableBytesView))) ?? .null,
                String(buffer: r.body)
            )
        }
    }

    @Test func credentialsAreCheckedStoredAndNeverShown() async throws {
        let (api, _, _, _) = try Self.sqlite()
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("creds-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let creds = try SandboxCredentials.generate()
        _ = try creds.write(to: dir, tokenURI: "https://oauth2.googleapis.com/token")
        let account = try String(contentsOf: dir.appendingPathComponent("service-account.json"), encoding: .utf8)
        try await Application(router: api.router()).test(.router) { client in
            let apns: JSONValue = [
                "key": .string(creds.apnsKeyPEM), "key_id": .string(creds.apnsKeyID),
                "team_id": .string(creds.apnsTeamID), "environment": "development",
            ]
            let (s, created, text) = try await Self.call(
                client,
                .post,
                "/v1/apps",
                key: Self.admin,
                body: [
                    "name": "Shop", "bundle_id": "com.example.app", "apns": apns,
                    "fcm": ["service_account": .string(account)],
                ]
            )
            #expect(s == 201, "\(created)")
            #expect(!text.contains("PRIVATE KEY") && !text.contains("private_key"))
            #expect(
                created["app"]?["apns"] == [
                    "key_id": .string(creds.apnsKeyID), "team_id": .string(creds.apnsTeamID),
                    "environment": "development",
                ]
            )
            #expect(created["app"]?["fcm"]?["project_id"] == .string(creds.fcmProjectID))
            let appID = try #require(created["app"]?["id"]?.stringValue)
            let key = try #require(created["api_key"]?.stringValue)
            let (_, shown, shownText) = try await Self.call(client, .get, "/v1/apps/\(appID)", key: key)
            #expect(!shownText.contains("PRIVATE KEY") && shown["app"]?["revision"] == 1)

            // Each bad field is named with its rule.
            let (bad, problem, _) = try await Self.call(
                client,
                .patch,
                "/v1/apps/\(appID)",
                key: key,
                body: [
                    "apns": [
                        "key": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----", "key_id": "short",
                        "team_id": .string(creds.apnsTeamID), "environment": "staging",
                    ],
                    "fcm": ["service_account": ["type": "service_account"]],
                ]
            )
            #expect(bad == 422)
            let paths = Set(
                (problem["error"]?["issues"]?.arrayValue ?? []).map {
                    "\($0["path"]?.stringValue ?? "") \($0["rule"]?.stringValue ?? "")"
                }
            )
            #expect(
                paths == [
                    "apns.key apns-p8", "apns.key_id apns-key-id", "apns.environment enum",
                    "fcm.service_account service-account",
                ],
                "\(paths)"
            )
            // Removing credentials bumps the revision.
            let (ok, changed, _) = try await Self.call(
                client,
                .patch,
                "/v1/apps/\(appID)",
                key: key,
                body: ["apns": .null]
            )
            #expect(ok == 200 && changed["app"]?["apns"] == .null && changed["app"]?["revision"] == 2)
        }
    }

    @Test func keysHaveScopesAndCanBeRevoked() async throws {
        let (api, _, _, _) = try Self.sqlite()
        try await Application(router: api.router()).test(.router) { client in
            let (_, created, _) = try await Self.call(
                client,
                .post,
                "/v1/apps",
                key: Self.admin,
                body: ["name": "Shop", "bundle_id": "com.example.app"]
            )
            let appID = try #require(created["app"]?["id"]?.stringValue)
            let manage = try #require(created["api_key"]?.stringValue)
            let (s, readKey, _) = try await Self.call(
                client,
                .post,
                "/v1/apps/\(appID)/keys",
                key: manage,
                body: ["scopes": ["read"]]
            )
            #expect(s == 201 && readKey["scopes"] == ["read"])
            let reader = try #require(readKey["api_key"]?.stringValue)
            #expect(try await Self.call(client, .get, "/v1/apps/\(appID)", key: reader).0 == 200)
            #expect(
                try await Self.call(
                    client,
                    .post,
                    "/v1/apps/\(appID)/notifications",
                    key: reader,
                    body: ["title": "x", "audience": ["all": true]]
                ).0 == 403
            )
            #expect(
                try await Self.call(client, .post, "/v1/apps/\(appID)/keys", key: reader, body: ["scopes": ["send"]]).0
                    == 403
            )
            #expect(
                try await Self.call(
                    client,
                    .post,
                    "/v1/apps/\(appID)/keys",
                    key: manage,
                    body: ["scopes": ["send", "fly"]]
                ).0 == 422
            )
            let id = try #require(readKey["id"]?.stringValue)
            #expect(try await Self.call(client, .delete, "/v1/apps/\(appID)/keys/\(id)", key: manage).0 == 200)
            #expect(try await Self.call(client, .get, "/v1/apps/\(appID)", key: reader).0 == 401)
            #expect(try await Self.call(client, .delete, "/v1/apps/\(appID)/keys/\(id)", key: manage).0 == 404)
        }
    }

    /// Registry facts need the read scope, in dry runs and in a send's answer: a send-only key learns neither how
    /// many devices a tag or user has nor which tokens are registered; audiences named outright (raw provider
    /// tokens, FCM topics) are counted for any key, and a key with read sees every count.
    @Test func aSendOnlyKeyLearnsNoRegistryFacts() async throws {
        let (api, _, registry, _) = try Self.sqlite()
        try await Application(router: api.router()).test(.router) { client in
            let (_, created, _) = try await Self.call(
                client,
                .post,
                "/v1/apps",
                key: Self.admin,
                body: ["name": "Shop", "bundle_id": "com.example.app"]
            )
            let appID = try #require(created["app"]?["id"]?.stringValue)
            let manage = try #require(created["api_key"]?.stringValue)
            for i in 1...3 {
                try await registry.upsert(
                    Device(appID: appID, token: String(format: "%064x", i), platform: .ios, tags: ["vip"])
                )
            }
            func key(_ scopes: [JSONValue]) async throws -> String {
                let (_, made, _) = try await Self.call(
                    client,
                    .post,
                    "/v1/apps/\(appID)/keys",
                    key: manage,
                    body: ["scopes": .array(scopes)]
                )
                return try #require(made["api_key"]?.stringValue)
            }
            let sender = try await key(["send"])
            let reader = try await key(["send", "read"])
            func dryRun(_ key: String, _ audience: JSONValue) async throws -> JSONValue {
                let (status, answer, _) = try await Self.call(
                    client,
                    .post,
                    "/v1/apps/\(appID)/notifications",
                    key: key,
                    body: ["title": "x", "audience": audience, "dry_run": true]
                )
                #expect(status == 200, "\(answer)")
                return answer
            }
            let tag: JSONValue = ["tag": "vip"]
            let tokens: JSONValue = ["tokens": .array([.string(String(format: "%064x", 1)), "not-registered"])]
            for audience in [tag, tokens, ["all": true], ["user": "u1"]] {
                let hidden = try await dryRun(sender, audience)
                #expect(hidden["deliveries"] == .null && hidden["deliveries_withheld"]?.stringValue != nil, "\(hidden)")
                // The request it would send is still shown: that is no registry fact.
                #expect(hidden["requests"]?["apns"] != nil)
            }
            #expect(try await dryRun(reader, tag)["deliveries"]?["apns"] == 3)
            #expect(try await dryRun(reader, tokens)["deliveries"]?["apns"] == 1)
            #expect(try await dryRun(Self.admin, tag)["deliveries"]?["apns"] == 3)
            let raw = try await dryRun(sender, ["apns_tokens": .array([.string(String(format: "%064x", 9))])])
            #expect(raw["deliveries"]?["apns"] == 1 && raw["deliveries_withheld"] == nil)
            // A real send's answer: registered tokens found are not counted for a send-only key.
            let (status, sent, _) = try await Self.call(
                client,
                .post,
                "/v1/apps/\(appID)/notifications",
                key: sender,
                body: ["title": "x", "audience": tokens]
            )
            #expect(status == 202 && sent["deliveries"] == .null, "\(sent)")
            let (_, counted, _) = try await Self.call(
                client,
                .post,
                "/v1/apps/\(appID)/notifications",
                key: reader,
                body: ["title": "x", "audience": tokens]
            )
            #expect(counted["deliveries"] == 1, "\(counted)")
        }
    }

    /// Each app sends with its own credentials: the sandbox's key is accepted by the APNs emulator, another key
    /// is refused (InvalidProviderToken, final), and an app without credentials and no fallback is not sent.
    @Test func eachAppSendsWithItsOwnCredentials() async throws {
        let (api, store, registry, queue) = try Self.sqlite()
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("own-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let sandbox = try await Sandbox.start(directory: dir, threads: 1)
        let c = sandbox.credentials
        let account = try ServiceAccount(contentsOf: sandbox.files["service-account"]!)
        let providers = try Providers.sandbox(sandbox, fallbacks: false)
        let good = ServerApp(
            id: "good",
            name: "Good",
            bundleID: "com.example.app",
            apns: .init(keyPEM: c.apnsKeyPEM, keyID: c.apnsKeyID, teamID: c.apnsTeamID, environment: .development),
            fcm: .init(
                serviceAccountJSON: try String(contentsOf: sandbox.files["service-account"]!, encoding: .utf8),
                projectID: c.fcmProjectID,
                clientEmail: account.clientEmail
            )
        )
        let stranger = ServerApp(
            id: "stranger",
            name: "Stranger",
            bundleID: "com.example.app",
            apns: .init(
                keyPEM: P256.Signing.PrivateKey().pemRepresentation,
                keyID: "ZZZZZZZZZZ",
                teamID: c.apnsTeamID,
                environment: .production
            )
        )
        let bare = ServerApp(id: "bare", name: "Bare", bundleID: "com.example.app")
        for app in [good, stranger, bare] { _ = try await store.createApp(app) }
        let token = String(repeating: "ab", count: 32)
        for app in ["good", "stranger", "bare"] {
            try await registry.upsert(Device(appID: app, token: token, platform: .ios))
            try await registry.upsert(Device(appID: app, token: "fcm-token-\(app)", platform: .android))
            _ = try await api.intake.accept(
                AcceptPlan(
                    notification: .init(
                        id: "n-\(app)",
                        appID: app,
                        message: PushMessage(alert: .init(title: "Hi")).json,
                        response: .null,
                        createdAt: Date()
                    ),
                    idempotencyKey: nil,
                    audience: .all,
                    notBefore: Date(),
                    expiresAt: nil
                )
            ) { _ in .null }
            try await api.intake.completeFanOut(notificationID: "n-\(app)")
        }
        let sender = ProviderDeliverySender(
            providers: providers,
            app: { id in (try? await store.app(id: id)).flatMap { $0 } },
            message: { id in try? await store.message(id: id) }
        )
        let worker = DeliveryWorker(queue: queue, sender: sender)
        try await worker.runOnce()
        func outcome(_ app: String) async throws -> [String] {
            try await queue.deliveries(notificationID: "n-\(app)").map {
                "\($0.provider.rawValue) \($0.state.rawValue) \($0.reason ?? "-")"
            }.sorted()
        }
        #expect(try await outcome("good") == ["apns delivered -", "fcm delivered -"])
        #expect(try await outcome("stranger") == ["apns failed InvalidProviderToken", "fcm failed fcm_not_configured"])
        #expect(try await outcome("bare") == ["apns failed apns_not_configured", "fcm failed fcm_not_configured"])
        await providers.shutdown()
        await sandbox.stop()
    }

    @Test func fcmTopicsConditionsAndRawTokensNeedNoRegistry() async throws {
        let (api, _, _, queue) = try Self.sqlite()
        try await Application(router: api.router()).test(.router) { client in
            let (_, created, _) = try await Self.call(
                client,
                .post,
                "/v1/apps",
                key: Self.admin,
                body: ["name": "Shop", "bundle_id": "com.example.app"]
            )
            let appID = try #require(created["app"]?["id"]?.stringValue)
            let key = try #require(created["api_key"]?.stringValue)
            let (s1, topic, _) = try await Self.call(
                client,
                .post,
                "/v1/apps/\(appID)/notifications",
                key: key,
                body: ["title": "News", "audience": ["fcm_topic": "news"]]
            )
            #expect(s1 == 202 && topic["deliveries"] == 1)
            #expect(
                try await queue.deliveries(notificationID: topic["id"]!.stringValue!).map(\.target) == [.topic("news")]
            )
            let (_, cond, _) = try await Self.call(
                client,
                .post,
                "/v1/apps/\(appID)/notifications",
                key: key,
                body: ["title": "Both", "targets": ["condition": "'a' in topics && 'b' in topics"]]
            )
            #expect(
                try await queue.deliveries(notificationID: cond["id"]!.stringValue!).map(\.target) == [
                    .condition("'a' in topics && 'b' in topics")
                ]
            )
            let apnsToken = String(repeating: "0f", count: 32)
            let (_, raw, _) = try await Self.call(
                client,
                .post,
                "/v1/apps/\(appID)/notifications",
                key: key,
                body: [
                    "title": "Raw",
                    "audience": ["apns_tokens": .array([.string(apnsToken)]), "fcm_tokens": .array(["fcm-raw-1"])],
                ]
            )
            #expect(
                try await queue.deliveries(notificationID: raw["id"]!.stringValue!).map {
                    "\($0.provider.rawValue):\($0.target)"
                } == ["apns:\(apnsToken)", "fcm:fcm-raw-1"]
            )
            // A token is never read back as a topic or a condition: tokens with those prefixes are refused, raw or
            // registered (the queue keeps all three in one column).
            let (s2, forged, _) = try await Self.call(
                client,
                .post,
                "/v1/apps/\(appID)/notifications",
                key: key,
                body: ["title": "Forged", "audience": ["fcm_tokens": .array(["topic:news"])]]
            )
            #expect(s2 == 422 && "\(forged)".contains("do not begin with topic:"), "\(s2) \(forged)")
            let (s3, device, _) = try await Self.call(
                client,
                .post,
                "/v1/apps/\(appID)/devices",
                key: key,
                body: ["token": "condition:news", "platform": "android"]
            )
            #expect(s3 == 422 && "\(device)".contains("do not begin with topic: or condition:"), "\(s3) \(device)")
            // Unregistered tokens in `tokens` (registry) are not sent; the answer says how many were found.
            let (_, registered, _) = try await Self.call(
                client,
                .post,
                "/v1/apps/\(appID)/notifications",
                key: key,
                body: ["title": "Reg", "audience": ["tokens": ["nobody"]]]
            )
            #expect(registered["deliveries"] == 0)
            let (bad, problem, _) = try await Self.call(
                client,
                .post,
                "/v1/apps/\(appID)/notifications",
                key: key,
                body: ["title": "Bad", "audience": ["apns_tokens": ["xyz"], "tag": "t"]]
            )
            #expect(bad == 422 && problem["error"]?["issues"]?.arrayValue?.first?["path"] == "audience")
            let (bad2, problem2, _) = try await Self.call(
                client,
                .post,
                "/v1/apps/\(appID)/notifications",
                key: key,
                body: ["title": "Bad", "audience": ["apns_tokens": ["xyz"]]]
            )
            #expect(
                bad2 == 422 && problem2["error"]?["issues"]?.arrayValue?.first?["path"] == "audience.apns_tokens[0]"
            )
        }
    }

    /// A spread send's deliveries are due evenly over the window, in the SQLite fan-out and the generic one.
    @Test(arguments: [true, false])
    func aSpreadSendIsDueEvenlyOverItsWindow(sqlite: Bool) async throws {
        let backend: any StorageBackend =
            sqlite
            ? try SQLiteBackend(
                path: FileManager.default.temporaryDirectory.appendingPathComponent(
                    "spread-\(UUID().uuidString).sqlite"
                ).path
            ) : MemoryBackend()
        let (registry, queue) = (backend.registry, backend.queue)
        for i in 0..<10 {
            try await registry.upsert(Device(appID: "app", token: "t\(i)", platform: .android, tags: ["x"]))
        }
        let start = Date(timeIntervalSince1970: 2_000_000_000)
        let n = try await backend.fanOut(
            FanOutRequest(notificationID: "n", appID: "app", audience: .tag("x"), notBefore: start, spread: 9)
        )
        #expect(n == 10)
        let offsets = try await queue.deliveries(notificationID: "n").map {
            ($0.notBefore.timeIntervalSince(start) * 1000).rounded() / 1000
        }.sorted()
        #expect(offsets == (0..<10).map(Double.init))
    }

    /// A fan-out the process did not finish (it died after answering) is found and finished at the next start,
    /// chunk by chunk with its progress stored, and never twice.
    @Test func anUnfinishedFanOutResumesAfterARestart() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("resume-\(UUID().uuidString).sqlite")
            .path
        do {
            let pool = try SQLiteDeliveryQueue.openPool(path: path)
            let registry = try SQLiteDeviceRegistry(pool: pool)
            for i in 0..<10 { try await registry.upsert(Device(appID: "app", token: "t\(i)", platform: .android)) }
            let intake = try SQLiteIntake(
                store: try SQLiteServerStore(pool: pool),
                registry: registry,
                queue: try SQLiteDeliveryQueue(pool: pool),
                chunk: 3
            )
            let accepted = try await intake.accept(
                AcceptPlan(
                    notification: .init(
                        id: "n1",
                        appID: "app",
                        message: ["title": "x"],
                        response: .null,
                        createdAt: Date()
                    ),
                    idempotencyKey: nil,
                    audience: .all,
                    notBefore: Date(),
                    expiresAt: nil,
                    spread: 5
                )
            ) { _ in .null }
            #expect(accepted.fanOutPending)
        }
        // "Restart": everything opened again from the file.
        let pool = try SQLiteDeliveryQueue.openPool(path: path)
        let queue = try SQLiteDeliveryQueue(pool: pool)
        let intake = try SQLiteIntake(
            store: try SQLiteServerStore(pool: pool),
            registry: try SQLiteDeviceRegistry(pool: pool),
            queue: queue,
            chunk: 3
        )
        #expect(try await intake.pendingFanOuts() == ["n1"])
        #expect(try await intake.completeFanOut(notificationID: "n1") == 10)
        #expect(try await intake.pendingFanOuts() == [])
        #expect(try await intake.completeFanOut(notificationID: "n1") == 0)
        let deliveries = try await queue.deliveries(notificationID: "n1")
        #expect(Set(deliveries.map(\.target)).count == 10 && deliveries.count == 10)
        let progress = try await pool.read { db in
            try Row.fetchOne(
                db,
                sql: "SELECT fanout_inserted, fanout_total, fanout_state FROM notifications WHERE id = 'n1'"
            )!
        }
        #expect(
            progress["fanout_inserted"] as Int == 10 && progress["fanout_total"] as Int == 10
                && progress["fanout_state"] as String == "done"
        )
    }

    /// A whole app's fan-out inserts its deliveries in token order (the order of the deliveries'
    /// `(notification_id, target)` index), resumes after its last token, and one begun in row order (by an older
    /// version) ends in row order.
    @Test func aWholeAppsFanOutGoesInTokenOrder() async throws {
        let pool = try SQLiteDeliveryQueue.openPool(
            path: FileManager.default.temporaryDirectory.appendingPathComponent("order-\(UUID().uuidString).sqlite")
                .path
        )
        let registry = try SQLiteDeviceRegistry(pool: pool)
        let tokens = (0..<10).map { String(format: "%064x", ($0 * 7) % 10) }  // registered out of token order
        for t in tokens { try await registry.upsert(Device(appID: "app", token: t, platform: .ios)) }
        let queue = try SQLiteDeliveryQueue(pool: pool)
        let intake = try SQLiteIntake(
            store: try SQLiteServerStore(pool: pool),
            registry: registry,
            queue: queue,
            chunk: 3
        )
        let start = Date(timeIntervalSince1970: 2_000_000_000)
        for id in ["fresh", "resumed", "legacy"] {
            let plan = AcceptPlan(
                notification: .init(id: id, appID: "app", message: ["title": "x"], response: .null, createdAt: start),
                idempotencyKey: nil,
                audience: .all,
                notBefore: start,
                expiresAt: nil,
                spread: 9
            )
            #expect(try await intake.accept(plan) { _ in .null }.fanOutPending)
        }
        // "resumed": its first four tokens done before a crash; "legacy": its first four rows, in row order.
        try await pool.write { db in
            for (id, done) in [("resumed", tokens.sorted().prefix(4)), ("legacy", tokens.prefix(4))] {
                for t in done {
                    try db.execute(
                        sql: """
                            INSERT INTO deliveries (notification_id, app_id, provider, target, state, not_before, updated_at)
                            VALUES (?, 'app', 'apns', ?, 'queued', 0, 0)
                            """,
                        arguments: [id, t]
                    )
                }
            }
            try db.execute(
                sql: "UPDATE notifications SET fanout_token = ?, fanout_inserted = 4 WHERE id = 'resumed'",
                arguments: [tokens.sorted()[3]]
            )
            try db.execute(sql: "UPDATE notifications SET fanout_cursor = 4, fanout_inserted = 4 WHERE id = 'legacy'")
        }
        #expect(try await intake.completeFanOut(notificationID: "fresh") == 10)
        #expect(try await intake.completeFanOut(notificationID: "resumed") == 6)
        #expect(try await intake.completeFanOut(notificationID: "legacy") == 6)
        func inserted(_ id: String) async throws -> [(String, Double)] {
            try await pool.read { db in
                try Row.fetchAll(
                    db,
                    sql: "SELECT target, not_before FROM deliveries WHERE notification_id = ? ORDER BY id",
                    arguments: [id]
                ).map { ($0[0], ($0[1] as Double) - start.timeIntervalSince1970) }
            }
        }
        let fresh = try await inserted("fresh")
        #expect(fresh.map(\.0) == tokens.sorted() && fresh.map(\.1) == (0..<10).map(Double.init))
        let resumed = try await inserted("resumed")
        #expect(resumed.map(\.0) == tokens.sorted() && resumed.dropFirst(4).map(\.1) == (4..<10).map(Double.init))
        #expect(try await inserted("legacy").map(\.0) == tokens)  // row ids 1 to 10: registered in that order
        #expect(try await intake.pendingFanOuts().isEmpty)
    }

    /// The store and its in-memory twin follow the same rules.
    @Test(arguments: [true, false])
    func storeRules(sqlite: Bool) async throws {
        let store: any ServerStore = sqlite ? try Self.sqlite().1 : MemoryServerStore()
        let (app, key) = try await store.createApp(ServerApp(id: "", name: "A", bundleID: "com.example.a"))
        #expect(app.id.hasPrefix("app_") && app.revision == 1)
        #expect(try await store.authorize(key: key)?.appID == app.id)
        #expect(try await store.authorize(key: APIKeys.hash(key)) == nil)
        let (grant, readKey) = try await store.createKey(appID: app.id, scopes: [.read])
        #expect(try await store.authorize(key: readKey)?.scopes == [.read])
        #expect(try await store.revokeKey(appID: "other", keyID: grant.keyID) == false)
        #expect(try await store.revokeKey(appID: app.id, keyID: grant.keyID))
        #expect(try await store.authorize(key: readKey) == nil)
        var renamed = app
        renamed.name = "B"
        #expect(try await store.updateApp(renamed)?.revision == 2)
        #expect(try await store.app(id: app.id)?.name == "B")
        let n = StoredNotification(
            id: "n1",
            appID: app.id,
            message: ["title": "x"],
            response: ["id": "n1"],
            createdAt: Date()
        )
        #expect(try await store.insertNotification(n, idempotencyKey: "k").created)
        var again = n
        again.id = "n2"
        let (first, created) = try await store.insertNotification(again, idempotencyKey: "k")
        #expect(!created && first.id == "n1")
    }
}

@Suite struct ConfigurationTests {
    @Test func fileThenEnvironmentWithProblemsNamed() throws {
        var c = ServerConfiguration()
        #expect(ServerConfiguration().lanes == 2)
        try c.apply(
            json:
                #"{"database": "/var/lib/rp.sqlite", "port": 9000, "workers": {"concurrency": 50, "lanes": 3}, "sandbox": {"enabled": false}, "media": {"cache_megabytes": 128}}"#
        )
        #expect(
            c.database == "/var/lib/rp.sqlite" && c.port == 9000 && c.concurrency == 50 && c.lanes == 3 && !c.sandbox
                && c.mediaCacheMegabytes == 128
        )
        try c.apply(environment: [
            "RICHPUSH_PORT": "9100", "RICHPUSH_SANDBOX": "1", "RICHPUSH_ADMIN_KEY": "an-admin-key-of-20ch",
        ])
        #expect(c.port == 9100 && c.sandbox && c.adminKey == "an-admin-key-of-20ch")
        #expect(c.publicBase(boundPort: 9100) == "http://127.0.0.1:9100")
        func problem(_ text: String) -> String? {
            var c = ServerConfiguration()
            do { try c.apply(json: text) } catch let p as ServerConfiguration.Problem { return p.key } catch {
                return "other"
            }
            return nil
        }
        #expect(problem(#"{"workers": {"concurency": 5}}"#) == "workers.concurency")
        #expect(problem(#"{"workers": {"lanes": 0}}"#) == "workers.lanes")
        #expect(problem(#"{"workers": {"lanes": 17}}"#) == "workers.lanes")
        #expect(problem(#"{"notifications": {"retention_days": -1}}"#) == "notifications.retention_days")
        #expect(problem(#"{"notifications": {"keep": 3}}"#) == "notifications.keep")
        #expect(problem(#"{"notifications": 3}"#) == "notifications")
        var kept = ServerConfiguration()
        #expect(kept.notificationRetentionDays == 30)
        try kept.apply(json: #"{"notifications": {"retention_days": 0}}"#)
        #expect(kept.notificationRetentionDays == 0)
        #expect(kept.livePriority10PerHour == nil)
        try kept.apply(json: #"{"live": {"priority10_per_hour": 60}}"#)
        #expect(kept.livePriority10PerHour == 60)
        #expect(problem(#"{"live": {"priority10_per_hour": 0}}"#) == "live.priority10_per_hour")
        #expect(problem(#"{"live": {"budget": 1}}"#) == "live.budget")
        #expect(problem(#"{"port": "eighty"}"#) == "port")
        #expect(problem(#"{"public_url": "ftp://x"}"#) == "public_url")
        #expect(problem(#"{"admin_key": "short"}"#) == "admin_key")
        #expect(problem(#"{"sandbox": {"apns_port": 1}}"#) == "sandbox")
        #expect(problem("[1]") == "(file)")
        var e = ServerConfiguration()
        #expect(throws: ServerConfiguration.Problem.self) { try e.apply(environment: ["RICHPUSH_SANDBOX": "maybe"]) }
    }
}
