import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import RichPushCore
import RichPushSandbox
import Testing

@testable import RichPushServer

/// What one app may make the server spend on media: uploads a day, fetches at once (its own and the node's), and
/// a failing URL fetched once however often it is asked about.
@Suite struct QuotaTests {
    typealias M = MediaPreflightTests
    typealias H = MediaHostingTests

    /// Two apps with a send key each.
    static func apps(_ client: any TestClientProtocol) async throws -> [(id: String, key: String)] {
        var out: [(String, String)] = []
        for name in ["One", "Two"] {
            let (_, created, body) = try await H.call(
                client,
                .post,
                "/v1/apps",
                body: ByteBuffer(string: #"{"name":"\#(name)","bundle_id":"com.example.\#(name.lowercased())"}"#)
            )
            _ = created
            let answer = try JSONValue.parse(body)
            out.append((try #require(answer["app"]?["id"]?.stringValue), try #require(answer["api_key"]?.stringValue)))
        }
        return out
    }

    @Test func uploadsPastTheDaysBytesAre429UntilTheNextUTCDay() async throws {
        var (api, _, server, _, _) = try await H.api(routes: [:])
        api.quotas = Quotas(.init(uploadBytesPerDay: 2 * M.jpeg.count + 10))
        try await Application(router: api.router()).test(.router) { client in
            let apps = try await Self.apps(client)
            let one = apps[0]
            for _ in 0..<2 {
                let (status, _, body) = try await H.call(
                    client,
                    .post,
                    "/v1/media",
                    key: one.key,
                    body: .init(bytes: M.jpeg)
                )
                #expect(status == 201, "\(String(decoding: body, as: UTF8.self))")
            }
            let (refused, headers, body) = try await H.call(
                client,
                .post,
                "/v1/media",
                key: one.key,
                body: .init(bytes: M.jpeg)
            )
            let wait = Int(headers[.retryAfter] ?? "") ?? 0
            #expect(refused == 429 && (1...86_400).contains(wait), "\(refused) \(headers)")
            #expect(try JSONValue.parse(body)["error"]?["code"] == "quota-exceeded")
            // Another app, and the admin key, are not held back by it.
            #expect(try await H.call(client, .post, "/v1/media", key: apps[1].key, body: .init(bytes: M.jpeg)).0 == 201)
            #expect(try await H.call(client, .post, "/v1/media", body: .init(bytes: M.jpeg)).0 == 201)
        }
        // A new UTC day starts from nothing.
        let quotas = Quotas(.init(uploadBytesPerDay: 100))
        let today = Date(timeIntervalSince1970: 1_800_000_000)
        try await quotas.chargeUpload(app: "a", bytes: 100, now: today)
        await #expect(throws: APIError.self) { try await quotas.chargeUpload(app: "a", bytes: 1, now: today) }
        try await quotas.chargeUpload(app: "a", bytes: 100, now: today.addingTimeInterval(86_400))
        #expect(try await quotas.uploaded(app: "a", now: today.addingTimeInterval(86_400)) == 100)
        try? await server.shutdown()
    }

    typealias Kind = StorageBackendTests.Kind

    /// The day's upload bytes are counted in the database, alike on every backend: taken up to the limit and no
    /// further, what was taken and not used given back, another app and another day apart, days before yesterday
    /// dropped.
    @Test(arguments: Kind.allCases)
    func theUploadLedgerCountsAlike(_ kind: Kind) async throws {
        let ledger = try await StorageBackendTests.make(kind).uploads
        let day = 20_000
        #expect(try await ledger.reserve(app: "a", day: day, bytes: 60, limit: 100) == 60)
        #expect(try await ledger.reserve(app: "a", day: day, bytes: 60, limit: 100) == 40)
        #expect(try await ledger.reserve(app: "a", day: day, bytes: 1, limit: 100) == 0)
        try await ledger.release(app: "a", day: day, bytes: 30)
        #expect(try await ledger.used(app: "a", day: day) == 70)
        try await ledger.release(app: "a", day: day, bytes: 1_000)
        #expect(try await ledger.used(app: "a", day: day) == 0)
        #expect(try await ledger.reserve(app: "b", day: day, bytes: 100, limit: 100) == 100)
        #expect(try await ledger.reserve(app: "a", day: day + 1, bytes: 100, limit: 100) == 100)
        _ = try await ledger.reserve(app: "a", day: day + 3, bytes: 1, limit: 100)
        #expect(try await ledger.used(app: "b", day: day) == 0)
        #expect(try await ledger.used(app: "a", day: day + 3) == 1)
    }

    /// Two nodes of one PostgreSQL database allow an app's day of uploads once between them, not once each: what
    /// one node took, the other cannot; an upload charged a step at a time gives back what it did not use.
    @Test func twoNodesShareOneDayOfUploads() async throws {
        let url = try await PostgresFixture.url()
        let one = try await PostgresBackend.open(url: url, sealer: nil, nodeID: "one", timeout: .seconds(60))
        let two = try await PostgresBackend.open(url: url, sealer: nil, nodeID: "two", timeout: .seconds(60))
        let limit = 3 << 20
        let a = Quotas(.init(uploadBytesPerDay: limit), ledger: one.uploads)
        let b = Quotas(.init(uploadBytesPerDay: limit), ledger: two.uploads)
        // Node one takes 2 MiB in parts of 64 KiB; node two then has 1 MiB left.
        let upload = a.upload(app: "app")
        for _ in 0..<32 { try await upload.add(64 << 10) }
        await upload.close()
        #expect(try await a.uploaded(app: "app") == 2 << 20)
        #expect(try await b.uploaded(app: "app") == 2 << 20)
        let second = b.upload(app: "app")
        for _ in 0..<16 { try await second.add(64 << 10) }
        await #expect(throws: APIError.self) { try await second.add(1) }
        await second.close()
        #expect(try await a.uploaded(app: "app") == limit)
        // Another app is not held back; the admin key is not counted.
        try await b.chargeUpload(app: "other", bytes: 1 << 20)
        try await b.chargeUpload(app: nil, bytes: 100 << 20)
        await one.close()
        await two.close()
    }

    /// Fetch places are the cluster's: each of N live nodes allows 1 / N of them (at least one), and the refusal
    /// names the setting.
    @Test func fetchPlacesAreSharedAmongLiveNodes() async throws {
        let quotas = Quotas(.init(fetchesPerApp: 8, fetches: 64))
        #expect(quotas.nodeFetchLimits == (8, 64))
        quotas.share(among: 4)
        #expect(quotas.nodeFetchLimits == (2, 16))
        quotas.share(among: 100)
        #expect(quotas.nodeFetchLimits == (1, 1))
        quotas.share(among: 4)
        try await quotas.fetching(app: "a", count: 2) {
            do {
                try await quotas.fetching(app: "a", count: 1) {}
                Issue.record("a third fetch of app a was let through")
            } catch let e as APIError {
                #expect(e.code == .quotaExceeded && e.message.contains("quotas.fetches_per_app"), "\(e.message)")
            }
        }
        quotas.share(among: 1)
        try await quotas.fetching(app: "a", count: 8) {}
    }

    /// What takes a fetch place: a URL of another server the first time, and again when its bytes are wanted to
    /// re-host it; not this server's own hosted media, nor a URL whose kept verdict answers (a failure, or a
    /// success that needs no re-hosting).
    @Test func onlyWhatMustBeFetchedTakesAPlace() async throws {
        let (media, base, server) = try await M.service(
            routes: [
                "/a.jpg": .bytes(M.jpeg, contentType: "image/jpeg"),
                "/noext": .bytes(M.jpeg, contentType: "image/jpeg"),
            ],
            recordRequests: true
        )
        let item = try media.store.put(M.jpeg, type: .jpeg)
        try await media.store.publish(item, keepUntil: Date())
        let hosted = media.url(for: item)
        #expect(!media.needsFetch(hosted, rehost: .always))
        let a = base + "/a.jpg"
        #expect(media.needsFetch(a, rehost: .auto))
        var message = PushMessage(alert: .init(title: "Hi"))
        message.media = [PushMedia(url: hosted), PushMedia(url: a), PushMedia(url: base + "/noext")]
        #expect(media.fetchesNeeded(message, onFailure: .reject, rehost: .auto) == 2)
        #expect(media.fetchesNeeded(message, onFailure: .off, rehost: .auto) == 0)
        var prepared = message
        let (errors, _) = await media.prepare(&prepared, onFailure: .reject, rehost: .auto)
        #expect(errors.isEmpty)
        // Kept: the picture with a truthful name needs no second fetch unless it is to be re-hosted; the one
        // without an extension was re-hosted (its URL is now this server's).
        #expect(!media.needsFetch(a, rehost: .auto) && !media.needsFetch(a, rehost: .never))
        #expect(media.needsFetch(a, rehost: .always))
        #expect(media.fetchesNeeded(message, onFailure: .reject, rehost: .auto) == 1)
        #expect(media.fetchesNeeded(prepared, onFailure: .reject, rehost: .auto) == 0)
        var again = message
        again.media = [PushMedia(url: a)]
        _ = await media.prepare(&again, onFailure: .reject, rehost: .auto)
        #expect(server.requests.filter { $0.path == "/a.jpg" }.count == 1)
        try? await server.shutdown()
    }

    /// Honest traffic at the benchmarks' rates never meets a quota: 32 connections sending notifications whose
    /// picture this server hosts, 1,280 sends in all, every one accepted (hosted media is read from the store and
    /// takes no fetch place; before, 409 of 1,280 were answered 429 "8 media fetches running"). The key's rate is
    /// raised as the benchmarks raise it (`--rate-limit 1000000`): the rate is not what is measured.
    @Test func sendsOfHostedMediaNeverMeetAQuota() async throws {
        var (api, _, server, _, _) = try await H.api(routes: [:])
        api.limiter = RateLimiter(rate: 1_000_000, burst: 1_000_000)
        let quotas = api.quotas
        try await Application(router: api.router()).test(.live) { client in
            let port = try #require(client.port)
            let app = try #require(try await Self.apps(client).first)
            let (uploaded, _, body) = try await H.call(
                client,
                .post,
                "/v1/media",
                key: app.key,
                body: .init(bytes: M.jpeg)
            )
            #expect(uploaded == 201)
            let hosted = try #require(try JSONValue.parse(body)["url"]?.stringValue)
            #expect(hosted.hasPrefix("https://push.example.com/media/"))
            let send = ByteBuffer(
                bytes: JSONValue.object([
                    "title": "Flash sale", "body": "40% off", "media": .string(hosted),
                    "audience": ["apns_tokens": [.string(String(repeating: "ab", count: 32))]],
                ]).serialized()
            )
            let answers = try await withThrowingTaskGroup(of: [String: Int].self) { group in
                for _ in 0..<32 {
                    group.addTask {
                        try await TestClient.withClient(host: "127.0.0.1", port: port) { c in
                            var seen: [String: Int] = [:]
                            for _ in 0..<40 {
                                let r = try await c.execute(
                                    .init(
                                        "/v1/apps/\(app.id)/notifications",
                                        method: .post,
                                        headers: [
                                            .authorization: "Bearer \(app.key)", .contentType: "application/json",
                                        ],
                                        body: send
                                    )
                                )
                                let code = (try? JSONValue.parse(Array(buffer: r.body ?? ByteBuffer())))?["error"]?[
                                    "code"
                                ]
                                seen["\(r.status.code) \(code?.stringValue ?? "")", default: 0] += 1
                            }
                            return seen
                        }
                    }
                }
                var all: [String: Int] = [:]
                for try await part in group { all.merge(part, uniquingKeysWith: +) }
                return all
            }
            #expect(answers == ["202 ": 1_280], "\(answers)")
            #expect(quotas.fetchesRunning() == 0)
        }
        try? await server.shutdown()
    }

    @Test func fetchesAtOnceAreBoundedPerAppAndForTheNode() async throws {
        // A drip that never ends before the fetcher's 15 s deadline: checks of it stay running while the others
        // ask, however slow the machine (a 2 s drip ended first on a loaded run, freeing the places it held).
        let made = try await H.api(routes: [
            "/slow.jpg": .drip(total: 1_000_000, chunk: 100, interval: 0.5, contentType: "image/jpeg"),
            "/a.jpg": .bytes(M.jpeg, contentType: "image/jpeg"),
        ])
        var api = made.0
        let (base, server) = (made.1, made.2)
        api.quotas = Quotas(.init(fetchesPerApp: 2, fetches: 3))
        let quotas = api.quotas
        let baseURL = base
        try await Application(router: api.router()).test(.router) { client in
            let apps = try await Self.apps(client)
            func check(_ key: String, _ urls: [String]) async throws -> (Int, HTTPFields) {
                let body = JSONValue.object(["media": .array(urls.map { .object(["url": .string($0)]) })])
                let (status, headers, _) = try await H.call(
                    client,
                    .post,
                    "/v1/media/check",
                    key: key,
                    body: ByteBuffer(bytes: body.serialized())
                )
                return (status, headers)
            }
            // More URLs in one request than the app may fetch at once.
            let (tooMany, headers) = try await check(
                apps[0].key,
                [baseURL + "/a.jpg", baseURL + "/b.jpg", baseURL + "/c.jpg"]
            )
            #expect(tooMany == 429 && headers[.retryAfter] == "1")
            // Two slow fetches of app one hold its two places; a third of its own waits its turn, another app's goes.
            let slow = Task { try await check(apps[0].key, [baseURL + "/slow.jpg?1", baseURL + "/slow.jpg?2"]) }
            let started = Date()
            while quotas.fetchesRunning(app: apps[0].id) < 2, Date().timeIntervalSince(started) < 10 {
                try await Task.sleep(nanoseconds: 10_000_000)
            }
            #expect(try await check(apps[0].key, [baseURL + "/a.jpg"]).0 == 429)
            #expect(try await check(apps[1].key, [baseURL + "/a.jpg"]).0 == 200)
            // The node's three places: two held, so two more from app two are refused.
            #expect(try await check(apps[1].key, [baseURL + "/a.jpg?x", baseURL + "/a.jpg?y"]).0 == 429)
            #expect(try await slow.value.0 == 200)
            #expect(quotas.fetchesRunning() == 0 && quotas.fetchesRunning(app: apps[0].id) == 0)
            #expect(try await check(apps[0].key, [baseURL + "/a.jpg?z"]).0 == 200)
        }
        try? await server.shutdown()
    }

    @Test func aFailingURLIsFetchedOnceWhileItsVerdictIsKept() async throws {
        let (media, base, server) = try await M.service(
            routes: ["/broken.jpg": .bytes(Array("no".utf8), contentType: "text/plain", status: 500)],
            recordRequests: true
        )
        for _ in 0..<5 {
            let r = await media.check(base + "/broken.jpg")
            #expect(!r.isOK && r.failure?.rule == "http-status")
        }
        #expect(server.requests.filter { $0.path == "/broken.jpg" }.count == 1)
        // Kept briefly: a service that keeps failures for no time asks again.
        let (brief, base2, server2) = try await M.service(
            routes: ["/broken.jpg": .bytes(Array("no".utf8), contentType: "text/plain", status: 500)],
            recordRequests: true
        )
        let again = MediaService(
            store: brief.store,
            fetcher: brief.fetcher,
            publicBase: "https://x",
            failureLifetime: 0
        )
        _ = await again.check(base2 + "/broken.jpg")
        _ = await again.check(base2 + "/broken.jpg")
        #expect(server2.requests.count == 2)
        try? await server.shutdown()
        try? await server2.shutdown()
    }
}
