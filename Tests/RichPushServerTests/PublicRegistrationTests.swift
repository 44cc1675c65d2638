import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import RichPushCore
import RichPushServer
import RichPushTransport
import Testing

/// The public registration surface attacked as an outsider with the key every page and app ships (`register`), on
/// the memory twin, SQLite and PostgreSQL: each attack of issue 35 replayed (a claimed user, a foreign activity,
/// another user's push-to-start, a known token re-pointed, a removal that tells whether a token exists, `/v1/me`
/// showing credentials, oversize fields, unbounded registrations, a live audience public writes could block), and
/// what the app's own backend and server-side keys may still do.
@Suite struct PublicRegistrationTests {
    typealias Kind = StorageBackendTests.Kind
    static let admin = "admin-secret-key-0001"

    /// An app and its keys over a router; `proof` signs for a user with the app's identity key.
    struct World {
        let client: any TestClientProtocol
        let backend: any StorageBackend
        let app: String
        let manage: String
        let register: String
        let read: String
        let send: String
        let identity: P256.Signing.PrivateKey
        let kid: String

        func call(
            _ method: HTTPRequest.Method,
            _ uri: String,
            key: String,
            proof: String? = nil,
            _ body: JSONValue? = nil
        ) async throws -> (Int, JSONValue) {
            var headers: HTTPFields = [.authorization: "Bearer \(key)"]
            if let proof { headers[HTTPField.Name("RichPush-Identity")!] = proof }
            return try await client.execute(
                uri: uri,
                method: method,
                headers: headers,
                body: body.map { ByteBuffer(bytes: $0.serialized()) }
            ) { ($0.status.code, (try? JSONValue.parse(Array($0.body.readableBytesView))) ?? .null) }
        }

        func proof(
            _ user: String,
            activities: [String] = [],
            pushToStart: [String] = [],
            app: String? = nil,
            lifetime: TimeInterval = 600,
            now: Date = Date(),
            key: P256.Signing.PrivateKey? = nil
        ) throws -> String {
            try IdentityProof.mint(
                subject: user,
                appID: app ?? self.app,
                key: key ?? identity,
                lifetime: lifetime,
                activities: activities,
                pushToStart: pushToStart,
                now: now
            )
        }

        /// Registers a device with the register key; the status and the answer.
        func device(_ body: JSONValue, proof: String? = nil) async throws -> (Int, JSONValue) {
            try await call(.post, "/v1/apps/\(app)/devices", key: register, proof: proof, body)
        }

        func live(_ body: JSONValue, proof: String? = nil) async throws -> (Int, JSONValue) {
            try await call(.post, "/v1/apps/\(app)/live/tokens", key: register, proof: proof, body)
        }

        /// The registry's device for a token, as the read key finds it.
        func stored(_ token: String) async throws -> Device? {
            try await backend.registry.device(appID: app, token: token)
        }
    }

    static func code(_ answer: JSONValue) -> String? { answer["error"]?["code"]?.stringValue }
    static func rules(_ answer: JSONValue) -> [String] {
        answer["error"]?["issues"]?.arrayValue?.compactMap { i in
            guard let path = i["path"]?.stringValue, let rule = i["rule"]?.stringValue else { return nil }
            return path + ":" + rule
        } ?? []
    }
    static func hex(_ i: Int, length: Int = 64) -> String {
        let h = String(i, radix: 16)
        return String(repeating: "0", count: max(0, length - h.count)) + h
    }

    func withWorld(
        _ kind: Kind,
        limits: RegistrationLimits = RegistrationLimits(),
        maxTokensPerRequest: Int = 10_000,
        eventBudget: RateLimiter? = nil,
        _ body: @escaping @Sendable (World) async throws -> Void
    ) async throws {
        let backend = try await StorageBackendTests.make(kind)
        var api = RichPushAPI(backend: backend, adminKey: Self.admin, validation: .init(requireTargets: false))
        api.registrationLimits = limits
        api.publicEventBudget = eventBudget
        api.maxTokensPerRequest = maxTokensPerRequest
        api.limiter = RateLimiter(rate: 1_000_000, burst: 1_000_000)
        do {
            try await Application(router: api.router()).test(.router) { client in
                func call(
                    _ method: HTTPRequest.Method,
                    _ uri: String,
                    key: String,
                    _ body: JSONValue?
                ) async throws
                    -> JSONValue
                {
                    try await client.execute(
                        uri: uri,
                        method: method,
                        headers: [.authorization: "Bearer \(key)"],
                        body: body.map { ByteBuffer(bytes: $0.serialized()) }
                    ) { (try? JSONValue.parse(Array($0.body.readableBytesView))) ?? .null }
                }
                let made = try await call(
                    .post,
                    "/v1/apps",
                    key: Self.admin,
                    ["name": "Shop", "bundle_id": "com.example.shop"]
                )
                let app = try #require(made["app"]?["id"]?.stringValue)
                let manage = try #require(made["api_key"]?.stringValue)
                func key(_ scopes: [String]) async throws -> String {
                    let k = try await call(
                        .post,
                        "/v1/apps/\(app)/keys",
                        key: manage,
                        ["scopes": .array(scopes.map(JSONValue.string))]
                    )
                    return try #require(k["api_key"]?.stringValue)
                }
                let identity = try await call(.post, "/v1/apps/\(app)/identity/keys", key: manage, [:])
                // What the database's health said, should the answer be a refusal.
                let pem = try #require(identity["private_key"]?.stringValue, "\(identity) \(backend.health.status)")
                let world = World(
                    client: client,
                    backend: backend,
                    app: app,
                    manage: manage,
                    register: try await key(["register"]),
                    read: try await key(["read"]),
                    send: try await key(["send"]),
                    identity: try P256.Signing.PrivateKey(pemRepresentation: pem),
                    kid: try #require(identity["kid"]?.stringValue)
                )
                try await body(world)
            }
        } catch {
            await backend.close()
            throw error
        }
        await backend.close()
    }

    /// The public key churning live tokens (new ones, removals) past the app's event budget: every registration
    /// and removal is done, and the outbox takes the budget's burst and no more; the app's own backend (a server
    /// key) is outside the budget.
    @Test(arguments: Kind.allCases)
    func publicCallersCauseAtMostTheAppsEventBudget(_ kind: Kind) async throws {
        let budget = RateLimiter(rate: 0.001, burst: 10)
        try await withWorld(kind, eventBudget: budget) { w in
            let (made, _) = try await w.call(
                .post,
                "/v1/apps/\(w.app)/webhooks",
                key: w.manage,
                ["url": "https://hooks.example.com/live", "events": ["live.token"]]
            )
            #expect(made == 201)
            // A 503 (the database judged down: on a loaded test machine its health check can miss its bound for a
            // while) is retried as a client would; what is tested is the budget.
            func retried(_ call: () async throws -> (Int, JSONValue)) async throws -> Int {
                var status = 503
                for _ in 0..<120 where status == 503 {
                    status = try await call().0
                    if status == 503 { try await Task.sleep(for: .milliseconds(500)) }
                }
                return status
            }
            for i in 0..<15 {
                let token = Self.hex(0xE000 + i)
                let r = try await retried {
                    try await w.live(["kind": "push_to_start", "token": .string(token), "activity_type": "Churn"])
                }
                #expect(r == 200, "\(w.backend.health.status)")
                let d = try await retried {
                    try await w.call(.delete, "/v1/apps/\(w.app)/live/tokens/\(token)", key: w.register)
                }
                #expect(d == 200, "\(w.backend.health.status)")
            }
            let stored = try await w.backend.liveTokens.tokens(
                appID: w.app,
                audience: .pushToStart(type: "Churn", userID: nil),
                limit: 100
            )
            #expect(stored.isEmpty, "every removal was done")
            // Events are read as a sender reads them: on PostgreSQL one written just now stays out of sight while an
            // older transaction (another test's) is open, so the count is awaited, then checked.
            func events(atLeast n: Int) async throws -> [WebhookEvent] {
                let deadline = Date().addingTimeInterval(20)
                while true {
                    let found = try await w.backend.webhooks.events(
                        appID: w.app,
                        after: .start,
                        through: nil,
                        limit: 1000,
                        hearing: nil
                    )
                    if found.count >= n || Date() > deadline { return found }
                    try await Task.sleep(for: .milliseconds(50))
                }
            }
            #expect(try await events(atLeast: 10).count == 10, "30 public writes, a burst of 10")
            // The app's backend registers with its own key: its events are written.
            let (r, _) = try await w.call(
                .post,
                "/v1/apps/\(w.app)/live/tokens",
                key: w.manage,
                ["kind": "push_to_start", "token": .string(Self.hex(0xF001)), "activity_type": "Churn"]
            )
            #expect(r == 200)
            #expect(try await events(atLeast: 11).count == 11)
        }
    }

    @Test(arguments: Kind.allCases)
    func aClaimedUserNeedsAProofAndAKnownTokenKeepsItsUser(_ kind: Kind) async throws {
        try await withWorld(kind) { w in
            let a = Self.hex(1)
            // The attack: the register key alone claims Bob.
            var (status, answer) = try await w.device(["platform": "ios", "token": .string(a), "user_id": "bob"])
            #expect(status == 401 && Self.code(answer) == "identity-required", "\(answer)")
            #expect(Self.rules(answer) == ["user_id:identity-required"])
            #expect(try await w.stored(a) == nil)
            // Bob's own device, with the proof his backend signed.
            (status, answer) = try await w.device(
                ["platform": "ios", "token": .string(a), "user_id": "bob"],
                proof: try w.proof("bob")
            )
            #expect(status == 200, "\(answer)")
            #expect(try await w.stored(a)?.userID == "bob")
            // The user may be left to the proof.
            let b = Self.hex(2)
            (status, _) = try await w.device(["platform": "ios", "token": .string(b)], proof: try w.proof("bob"))
            #expect(status == 200)
            #expect(try await w.stored(b)?.userID == "bob")
            // A proof for Alice does not claim Bob.
            (status, answer) = try await w.device(
                ["platform": "ios", "token": .string(b), "user_id": "bob"],
                proof: try w.proof("alice")
            )
            #expect(status == 403 && Self.code(answer) == "identity-wrong-user", "\(answer)")
            // Re-pointing Bob's known token without a proof: taken, but Bob's it stays.
            (status, _) = try await w.device(["platform": "ios", "token": .string(a), "tags": ["cheap"]])
            #expect(status == 200)
            let kept = try await w.stored(a)
            #expect(kept?.userID == "bob" && kept?.tags == ["cheap"])
            // A new token without a proof is anonymous.
            let c = Self.hex(3)
            (status, _) = try await w.device(["platform": "ios", "token": .string(c)])
            #expect(status == 200)
            let anonymous = try await w.stored(c)
            #expect(anonymous != nil && anonymous?.userID == nil)
            // Server-side keys set user ids directly, and a proof header means nothing to them.
            (status, _) = try await w.call(
                .post,
                "/v1/apps/\(w.app)/devices",
                key: w.manage,
                proof: "not a proof",
                ["platform": "ios", "token": .string(a), "user_id": "carol"]
            )
            #expect(status == 200)
            #expect(try await w.stored(a)?.userID == "carol")
            let sends = try await w.call(
                .post,
                "/v1/apps/\(w.app)/devices",
                key: w.send,
                ["platform": "ios", "token": .string(c), "user_id": "dan"]
            )
            // (The send key may not register at all: the route takes register or manage.)
            #expect(sends.0 == 403)
        }
    }

    @Test(arguments: Kind.allCases)
    func aRefusedProofIsNamed(_ kind: Kind) async throws {
        try await withWorld(kind) { w in
            let body: JSONValue = ["platform": "ios", "token": .string(Self.hex(9)), "user_id": "bob"]
            let stranger = P256.Signing.PrivateKey()
            let now = Date()
            // Forged: another key, this app's key id.
            let forgedInput =
                JWT.base64URL(Data(#"{"alg":"ES256","kid":"\#(w.kid)"}"#.utf8)) + "."
                + JWT.base64URL(
                    Data(#"{"sub":"bob","aud":"\#(w.app)","exp":\#(Int(now.timeIntervalSince1970) + 600)}"#.utf8)
                )
            let forged =
                forgedInput + "." + JWT.base64URL(try stranger.signature(for: Data(forgedInput.utf8)).rawRepresentation)
            let cases: [(String, String)] = [
                (forged, "identity-invalid"),
                ("garbage", "identity-invalid"),
                (try w.proof("bob", key: stranger), "identity-unknown-key"),
                (try w.proof("bob", now: now.addingTimeInterval(-7200)), "identity-expired"),
                (try w.proof("bob", now: now.addingTimeInterval(3600)), "identity-not-yet-valid"),
                (try w.proof("bob", app: "app_other"), "identity-wrong-app"),
                (try w.proof("bob", lifetime: 3 * 86_400), "identity-invalid"),
            ]
            for (proof, code) in cases {
                let (status, answer) = try await w.device(body, proof: proof)
                #expect(status == 401 && Self.code(answer) == code, "\(code): \(answer)")
            }
            #expect(try await w.stored(Self.hex(9)) == nil)
            // A deleted key proves nothing any more.
            let (deleted, _) = try await w.call(.delete, "/v1/apps/\(w.app)/identity/keys/\(w.kid)", key: w.manage)
            #expect(deleted == 200)
            let (status, answer) = try await w.device(body, proof: try w.proof("bob"))
            #expect(status == 401 && Self.code(answer) == "identity-unknown-key", "\(answer)")
        }
    }

    @Test(arguments: Kind.allCases)
    func liveTokensNeedWhatTheProofGrants(_ kind: Kind) async throws {
        try await withWorld(kind) { w in
            let order = Self.hex(0xA1)
            let activity: JSONValue = [
                "kind": "activity", "token": .string(order), "activity_type": "Delivery", "activity_id": "order-42",
            ]
            // The attack: the register key alone joins an order's activity.
            var (status, answer) = try await w.live(activity)
            #expect(status == 401 && Self.code(answer) == "identity-required", "\(answer)")
            (status, answer) = try await w.live(activity, proof: try w.proof("mallory", activities: ["order-7"]))
            #expect(status == 403 && Self.code(answer) == "identity-not-granted", "\(answer)")
            (status, answer) = try await w.live(activity, proof: try w.proof("bob", activities: ["order-42"]))
            #expect(status == 200 && answer["user_id"]?.stringValue == "bob", "\(answer)")
            #expect(
                try await w.backend.liveTokens.tokens(appID: w.app, audience: .activity("order-42"), limit: 10) == [
                    order
                ]
            )

            // Push-to-start: anonymous is allowed; under a user only with a proof listing the type.
            let start = Self.hex(0xB1)
            let startBody: JSONValue = [
                "kind": "push_to_start", "token": .string(start), "activity_type": "Delivery", "user_id": "bob",
            ]
            (status, answer) = try await w.live(startBody)
            #expect(status == 401 && Self.code(answer) == "identity-required", "\(answer)")
            (status, answer) = try await w.live(startBody, proof: try w.proof("bob"))
            #expect(status == 403 && Self.code(answer) == "identity-not-granted", "\(answer)")
            (status, _) = try await w.live(startBody, proof: try w.proof("bob", pushToStart: ["Delivery"]))
            #expect(status == 200)
            let bobs: LiveAudience = .pushToStart(type: "Delivery", userID: "bob")
            #expect(try await w.backend.liveTokens.tokens(appID: w.app, audience: bobs, limit: 10) == [start])
            // Re-pointed anonymously: Bob's token is left as it is.
            (status, _) = try await w.live(["kind": "push_to_start", "token": .string(start), "activity_type": "Other"])
            #expect(status == 200)
            #expect(try await w.backend.liveTokens.tokens(appID: w.app, audience: bobs, limit: 10) == [start])
            let others: LiveAudience = .pushToStart(type: "Other", userID: nil)
            #expect(try await w.backend.liveTokens.tokens(appID: w.app, audience: others, limit: 10).isEmpty)
            let anonymous = Self.hex(0xC1)
            (status, _) = try await w.live([
                "kind": "push_to_start", "token": .string(anonymous), "activity_type": "Other",
            ])
            #expect(status == 200)

            // Removing with the register key: one answer whether the token is Bob's, nobody's or unknown.
            let path = "/v1/apps/\(w.app)/live/tokens/"
            let held = try await w.call(.delete, path + start, key: w.register)
            let unknown = try await w.call(.delete, path + Self.hex(0xDD), key: w.register)
            #expect(held.0 == 200 && unknown.0 == 200)
            #expect(held.1["token"] == .string(start) && held.1.objectValue?.count == unknown.1.objectValue?.count)
            #expect(try await w.backend.liveTokens.tokens(appID: w.app, audience: bobs, limit: 10) == [start])
            let free = try await w.call(.delete, path + anonymous, key: w.register)
            #expect(free.0 == 200)
            #expect(try await w.backend.liveTokens.tokens(appID: w.app, audience: others, limit: 10).isEmpty)
            // Bob's own proof removes Bob's token; a wrong one is still refused by name.
            let own = try await w.call(.delete, path + start, key: w.register, proof: try w.proof("bob"))
            #expect(own.0 == 200 && own.1 == held.1)
            #expect(try await w.backend.liveTokens.tokens(appID: w.app, audience: bobs, limit: 10).isEmpty)
            let expired = try await w.call(
                .delete,
                path + order,
                key: w.register,
                proof: try w.proof("bob", now: Date().addingTimeInterval(-7200))
            )
            #expect(expired.0 == 401 && Self.code(expired.1) == "identity-expired")
            // The manage key says what there is.
            let (gone, _) = try await w.call(.delete, path + Self.hex(0xDD), key: w.manage)
            #expect(gone == 404)
        }
    }

    @Test(arguments: [Kind.memory])
    func meShowsThePublicKeyItsScopeAndAppOnly(_ kind: Kind) async throws {
        try await withWorld(kind) { w in
            for (key, full) in [(w.register, false), (w.send, false), (w.read, true), (w.manage, true)] {
                let (status, me) = try await w.call(.get, "/v1/me", key: key)
                #expect(status == 200)
                let app = try #require(me["app"]?.objectValue)
                #expect(app["id"] == .string(w.app))
                if full {
                    #expect(app.keys.contains("apns") && app.keys.contains("bundle_id"), "\(me)")
                } else {
                    // Nothing about credentials: not the APNs key id, not the team, not the FCM account.
                    #expect(app.keys.sorted() == ["id"], "\(me)")
                }
            }
            let (_, me) = try await w.call(.get, "/v1/me", key: w.register)
            #expect(me["scopes"] == ["register"])
        }
    }

    @Test(arguments: Kind.allCases)
    func oversizeFieldsAreRefusedNamingTheFieldAndRule(_ kind: Kind) async throws {
        try await withWorld(kind) { w in
            let euro = "\u{20AC}"  // three bytes of UTF-8
            let cases: [(JSONValue, String)] = [
                (["platform": "ios", "token": .string(String(repeating: "ab", count: 101))], "token:length"),
                (["platform": "android", "token": .string(String(repeating: "a", count: 1025))], "token:length"),
                (["platform": "android", "token": .string(String(repeating: "a", count: 5000))], "token:length"),
                (
                    [
                        "platform": "ios", "token": .string(Self.hex(5)),
                        "tags": .array((0..<33).map { .string("t\($0)") }),
                    ],
                    "tags:max-items"
                ),
                (
                    [
                        "platform": "ios", "token": .string(Self.hex(5)),
                        "topics": [.string(String(repeating: euro, count: 22))],
                    ],
                    "topics[0]:utf8-length"
                ),
                (
                    [
                        "platform": "ios", "token": .string(Self.hex(5)),
                        "tags": [.string(String(repeating: "x", count: 65))],
                    ],
                    "tags[0]:length"
                ),
            ]
            for (body, rule) in cases {
                let (status, answer) = try await w.device(body)
                #expect(status == 422 && Self.rules(answer).contains(rule), "\(rule): \(answer)")
            }
            // A user id of 129 bytes in 43 characters, through the manage key (which may name users).
            let (status, answer) = try await w.call(
                .post,
                "/v1/apps/\(w.app)/devices",
                key: w.manage,
                [
                    "platform": "ios", "token": .string(Self.hex(5)),
                    "user_id": .string(String(repeating: euro, count: 43)),
                ]
            )
            #expect(status == 422 && Self.rules(answer) == ["user_id:utf8-length"], "\(answer)")
            let (live, liveAnswer) = try await w.live([
                "kind": "push_to_start", "token": .string(String(repeating: "ab", count: 101)), "activity_type": "T",
            ])
            #expect(live == 422 && Self.rules(liveAnswer).contains("token:length"), "\(liveAnswer)")
            // At the bounds all is taken.
            let (ok, okAnswer) = try await w.device([
                "platform": "ios", "token": .string(String(repeating: "ab", count: 100)),
                "tags": .array((0..<32).map { .string(String(repeating: "\($0 % 10)", count: 64)) }),
                "topics": [.string(String(repeating: euro, count: 21))],
            ])
            #expect(ok == 200, "\(okAnswer)")
            // A registration body is read up to 64 KB: every field at its longest, each byte escaped at JSON's
            // longest (`\u0001`, six bytes), fits; 64 KB and one byte is refused naming the route's limit.
            let control = String(repeating: "\u{1}", count: 64)
            let longest: JSONValue = [
                "platform": "web", "token": .string(String(repeating: "ab", count: 100)),
                "user_id": .string(String(repeating: "\u{1}", count: 128)),
                "tags": .array((0..<32).map { _ in .string(control) }),
                "topics": .array((0..<32).map { _ in .string(control) }),
                "locale": .string(String(repeating: "\u{1}", count: 35)),
                "time_zone": .string(String(repeating: "\u{1}", count: 64)),
                "app_version": .string(String(repeating: "\u{1}", count: 64)),
            ]
            #expect(longest.serialized().count < 64 * 1024, "\(longest.serialized().count) bytes")
            let (oversize, oversizeAnswer) = try await w.client.execute(
                uri: "/v1/apps/\(w.app)/devices",
                method: .post,
                headers: [.authorization: "Bearer \(w.register)"],
                body: ByteBuffer(bytes: [UInt8](repeating: UInt8(ascii: " "), count: 64 * 1024 + 1))
            ) { ($0.status.code, (try? JSONValue.parse(Array($0.body.readableBytesView))) ?? .null) }
            #expect(oversize == 413 && Self.code(oversizeAnswer) == "body-too-large", "\(oversizeAnswer)")
            #expect(oversizeAnswer["error"]?["message"]?.stringValue?.contains("65536") == true, "\(oversizeAnswer)")
        }
    }

    @Test(arguments: Kind.allCases)
    func quotasAreReachedAndAnswered(_ kind: Kind) async throws {
        let limits = RegistrationLimits(
            devicesPerApp: 4,
            devicesPerUser: 2,
            liveTokensPerApp: 5,
            liveTokensPerUser: 2,
            liveTokensPerActivity: 2
        )
        try await withWorld(kind, limits: limits) { w in
            // A user keeps their newest two devices: the first goes.
            for i in 1...3 {
                let (status, _) = try await w.device(
                    ["platform": "ios", "token": .string(Self.hex(i))],
                    proof: try w.proof("bob")
                )
                #expect(status == 200)
            }
            #expect(try await w.stored(Self.hex(1)) == nil)
            #expect(try await w.stored(Self.hex(2))?.userID == "bob")
            #expect(try await w.stored(Self.hex(3))?.userID == "bob")
            // The app keeps four: two more anonymous, then a new one is refused; one registered again is taken.
            for i in 4...5 {
                let (status, _) = try await w.device(["platform": "ios", "token": .string(Self.hex(i))])
                #expect(status == 200)
            }
            var (status, answer) = try await w.device(["platform": "ios", "token": .string(Self.hex(6))])
            #expect(status == 429 && Self.code(answer) == "quota-exceeded", "\(answer)")
            #expect(Self.rules(answer) == ["token:devices-per-app"])
            (status, _) = try await w.device(["platform": "ios", "token": .string(Self.hex(4)), "tags": ["x"]])
            #expect(status == 200)
            // Removing one makes room (the count follows every delete).
            _ = try await w.call(.delete, "/v1/apps/\(w.app)/devices/\(Self.hex(5))", key: w.manage)
            (status, _) = try await w.device(["platform": "ios", "token": .string(Self.hex(6))])
            #expect(status == 200)

            // An activity keeps two live update tokens, whoever registers them.
            for (i, user) in ["u1", "u2", "u3"].enumerated() {
                (status, answer) = try await w.live(
                    [
                        "kind": "activity", "token": .string(Self.hex(0x100 + i)), "activity_type": "Match",
                        "activity_id": "match-1",
                    ],
                    proof: try w.proof(user, activities: ["match-1"])
                )
                #expect(status == (i < 2 ? 200 : 429), "\(answer)")
            }
            #expect(Self.rules(answer) == ["activity_id:live-tokens-per-activity"])
            // A user keeps two Live Activity tokens: the oldest goes.
            for i in 0..<3 {
                (status, _) = try await w.live(
                    ["kind": "push_to_start", "token": .string(Self.hex(0x200 + i)), "activity_type": "Match"],
                    proof: try w.proof("bob", pushToStart: ["Match"])
                )
                #expect(status == 200)
            }
            let bobs = try await w.backend.liveTokens.tokens(
                appID: w.app,
                audience: .pushToStart(type: "Match", userID: "bob"),
                limit: 10
            )
            #expect(bobs == [Self.hex(0x201), Self.hex(0x202)])
            // The app keeps five Live Activity tokens (two of the match, two of Bob's, one more): a new one is refused.
            for i in 0..<2 {
                (status, answer) = try await w.live([
                    "kind": "push_to_start", "token": .string(Self.hex(0x300 + i)), "activity_type": "Match",
                ])
                #expect(status == (i == 0 ? 200 : 429), "\(answer)")
            }
            #expect(Self.rules(answer) == ["token:live-tokens-per-app"], "\(answer)")
        }
    }

    /// Public registrations fill an activity to its bound and no further, so the app's own update to it is sent:
    /// before the bound, 10,000 registered tokens made it answer 422 `live-audience-too-large`.
    @Test(arguments: Kind.allCases)
    func theAppsOwnUpdateIsNotBlockedByPublicRegistrations(_ kind: Kind) async throws {
        var limits = RegistrationLimits()
        limits.liveTokensPerActivity = 5
        limits.liveTokensPerUser = 100
        try await withWorld(kind, limits: limits, maxTokensPerRequest: 5) { w in
            let proof = try w.proof("fan", activities: ["match-9"])
            var refused = 0
            for i in 0..<8 {
                let (status, _) = try await w.live(
                    [
                        "kind": "activity", "token": .string(Self.hex(0x400 + i)), "activity_type": "Match",
                        "activity_id": "match-9",
                    ],
                    proof: proof
                )
                if status == 429 { refused += 1 }
            }
            #expect(refused == 3)
            let (status, answer) = try await w.call(
                .post,
                "/v1/apps/\(w.app)/notifications",
                key: w.manage,
                [
                    "live_activity": ["event": "update", "content_state": ["home": 1]],
                    "audience": ["live_activity": "match-9"],
                ]
            )
            #expect(status == 202 && answer["deliveries"] == 5, "\(answer)")
        }
    }

    @Test(arguments: [Kind.memory, Kind.sqlite])
    func identityKeysAreMadeUploadedListedAndDeleted(_ kind: Kind) async throws {
        try await withWorld(kind) { w in
            let path = "/v1/apps/\(w.app)/identity/keys"
            // The register key may not see them.
            let (forbidden, _) = try await w.call(.get, path, key: w.register)
            #expect(forbidden == 403)
            // One key made by the world; upload a second as PEM; a third is refused; the same one twice too.
            let uploaded = P256.Signing.PrivateKey()
            let (added, answer) = try await w.call(
                .post,
                path,
                key: w.manage,
                ["public_key": .string(uploaded.publicKey.pemRepresentation)]
            )
            #expect(added == 201 && answer["private_key"] == nil, "\(answer)")
            #expect(answer["kid"]?.stringValue == IdentityKey.thumbprint(uploaded.publicKey))
            let (third, thirdAnswer) = try await w.call(.post, path, key: w.manage, [:])
            #expect(third == 422 && Self.rules(thirdAnswer) == [":identity-keys-per-app"], "\(thirdAnswer)")
            let jwk = try #require(IdentityKey(appID: w.app, publicKey: uploaded.publicKey).jwk.objectValue)
            let (again, againAnswer) = try await w.call(.post, path, key: w.manage, ["jwk": .object(jwk)])
            #expect(again == 409 && Self.code(againAnswer) == "key-exists", "\(againAnswer)")
            let (listed, list) = try await w.call(.get, path, key: w.manage)
            let keys = try #require(list["keys"]?.arrayValue)
            #expect(listed == 200 && keys.count == 2)
            #expect(
                keys.allSatisfy {
                    $0["private_key"] == nil
                        && $0["public_key"]?.stringValue?.hasPrefix("-----BEGIN PUBLIC KEY") == true
                }
            )
            // A private key is never taken.
            _ = try await w.call(.delete, "\(path)/\(w.kid)", key: w.manage)
            let (priv, privAnswer) = try await w.call(
                .post,
                path,
                key: w.manage,
                ["public_key": .string(P256.Signing.PrivateKey().pemRepresentation)]
            )
            #expect(priv == 422 && Self.rules(privAnswer) == ["public_key:private-key"], "\(privAnswer)")
            // The uploaded key proves users now.
            let (status, _) = try await w.device(
                ["platform": "ios", "token": .string(Self.hex(77))],
                proof: try w.proof("erin", key: uploaded)
            )
            #expect(status == 200)
            #expect(try await w.stored(Self.hex(77))?.userID == "erin")
        }
    }

    /// Push-to-start tokens live 30 days from their last registration and update tokens 12 hours: a send counts
    /// live ones only, and the sweep removes the rest (it never touched push-to-start tokens before).
    @Test(arguments: Kind.allCases)
    func pushToStartTokensExpireAndAreSwept(_ kind: Kind) async throws {
        let b = try await StorageBackendTests.make(kind)
        let app = "sweep-\(UUID().uuidString.prefix(8))"
        let store = b.liveTokens
        let now = Date()
        let stale = now.addingTimeInterval(-31 * 86_400)
        try await store.register(
            LiveToken(appID: app, token: Self.hex(1), kind: .pushToStart, activityType: "T", updatedAt: stale)
        )
        try await store.register(LiveToken(appID: app, token: Self.hex(2), kind: .pushToStart, activityType: "T"))
        try await store.register(
            LiveToken(
                appID: app,
                token: Self.hex(3),
                kind: .activity,
                activityType: "T",
                activityID: "a",
                updatedAt: now.addingTimeInterval(-13 * 3600)
            )
        )
        #expect(
            try await store.tokens(appID: app, audience: .pushToStart(type: "T", userID: nil), limit: 10) == [
                Self.hex(2)
            ]
        )
        #expect(try await store.tokens(appID: app, audience: .activity("a"), limit: 10).isEmpty)
        let cutoff = now.addingTimeInterval(-LiveTokenLimits.pushToStartTokenLifetime)
        #expect(try await store.sweep(.pushToStart, before: cutoff, limit: 10) == 1)
        #expect(try await store.sweep(.pushToStart, before: cutoff, limit: 10) == 0)
        // The app's count followed: with a bound of one, the survivor fills it.
        let one = RegistrationLimits(liveTokensPerApp: 2)
        try await store.register(
            LiveToken(appID: app, token: Self.hex(4), kind: .pushToStart, activityType: "T"),
            owner: .asGiven,
            limits: RegistrationLimits(liveTokensPerApp: 3)
        )
        await #expect(throws: QuotaReached.self) {
            try await store.register(
                LiveToken(appID: app, token: Self.hex(5), kind: .pushToStart, activityType: "T"),
                owner: .asGiven,
                limits: one
            )
        }
        await b.close()
    }

    /// The app's device count follows every way rows come and go: a bulk import, a removal, a prune.
    @Test(arguments: Kind.allCases)
    func theDeviceCountFollowsImportsRemovalsAndPrunes(_ kind: Kind) async throws {
        let b = try await StorageBackendTests.make(kind)
        let app = "count-\(UUID().uuidString.prefix(8))"
        try await b.registry.upsert(contentsOf: (1...5).map { Device(appID: app, token: Self.hex($0), platform: .ios) })
        try await b.registry.upsert(Device(appID: app, token: Self.hex(1), platform: .ios, tags: ["again"]))
        #expect(try await b.registry.remove(appID: app, token: Self.hex(2)))
        #expect(try await b.registry.prune(appID: app, token: Self.hex(3), invalidSince: nil))
        let three = RegistrationLimits(devicesPerApp: 3)
        await #expect(throws: QuotaReached.self) {
            try await b.registry.register(
                Device(appID: app, token: Self.hex(9), platform: .ios),
                owner: .asGiven,
                limits: three
            )
        }
        try await b.registry.register(
            Device(appID: app, token: Self.hex(9), platform: .ios),
            owner: .asGiven,
            limits: RegistrationLimits(devicesPerApp: 4)
        )
        // Another app's count is its own.
        try await b.registry.register(
            Device(appID: app + "-b", token: Self.hex(9), platform: .ios),
            owner: .asGiven,
            limits: three
        )
        await b.close()
    }
}
