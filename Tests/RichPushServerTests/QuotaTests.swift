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
        try quotas.chargeUpload(app: "a", bytes: 100, now: today)
        #expect(throws: APIError.self) { try quotas.chargeUpload(app: "a", bytes: 1, now: today) }
        try quotas.chargeUpload(app: "a", bytes: 100, now: today.addingTimeInterval(86_400))
        #expect(quotas.uploaded(app: "a", now: today.addingTimeInterval(86_400)) == 100)
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
