import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import RichPushCore
import RichPushSandbox
import RichPushTestSupport
import Testing

@testable import RichPushServer

/// The shared table of media URL spellings through the server's preflight, as `richpush send --sandbox` runs it:
/// the system resolver, every address allowed, http allowed.
extension MediaPreflightTests {
    static func corpusService() throws -> MediaService { try MediaURLCorpus.preflightService() }

    @Test func everySpellingOfTheTable() async throws {
        let corpus = try MediaURLCorpus()
        let servers = try await MediaURLCorpus.Servers.start(corpus)
        let entries = corpus.entries(port: servers.port, port6: servers.port6)
        let media = try Self.corpusService()
        let results = await MediaURLCorpus.preflight(entries, with: media).map(\.1)
        let differences = corpus.differences(results.map { .init(preflight: $0) }, in: entries, part: .preflight)
        #expect(differences.isEmpty, "\(differences.joined(separator: "\n"))")
        // The answer names the URL as written, and what was fetched beside it when they differ.
        for (e, r) in zip(entries, results) {
            #expect(r.json["url"]?.stringValue == e.url)
            let fetched = e.outcome == .refused || e.fetched == e.url ? nil : e.fetched
            #expect(r.json["fetched"]?.stringValue == fetched, "\(e.url)")
        }
        let received = Set(servers.targets)
        for target in corpus.targets(in: entries) { #expect(received.contains(target), "\(target) never arrived") }

        // A send sends each URL in the form that was fetched, and says so with both.
        let attached = entries.filter { $0.outcome == .attached }
        var message = PushMessage()
        message.alert = .init(title: "t")
        message.media = attached.map { PushMedia(url: $0.url) }
        let (errors, warnings) = await media.checkMedia(&message, onFailure: .reject, rehost: .never)
        await servers.shutdown()
        #expect(errors.isEmpty, "\(errors)")
        #expect(message.media.map(\.url) == attached.map { $0.fetched ?? "" })
        let notes = warnings.filter { $0.rule == "url-normalized" }
        #expect(notes.map(\.url) == attached.filter { $0.fetched != $0.url }.map(\.url))
        #expect(notes.map(\.fetched) == attached.filter { $0.fetched != $0.url }.map(\.fetched))
        #expect(notes.allSatisfy { $0.json["url"] != nil && $0.json["fetched"] != nil })
    }

    /// Two spellings of one URL are one verdict, fetched once; a refused URL is never fetched.
    @Test func twoSpellingsOfOneURLAreFetchedOnce() async throws {
        let server = MediaTestServer(
            routes: ["/a.jpg": .bytes(Self.jpeg, contentType: "image/jpeg")],
            recordRequests: true
        )
        let port = try await server.start()
        let media = try Self.corpusService()
        let first = await media.check("HTTP://LOCALHOST:\(port)/a.jpg")
        let second = await media.check("http://localhost:\(port)/a.jpg")
        let third = await media.check("http://user:pw@localhost:\(port)/a.jpg")
        try? await server.shutdown()
        #expect(first.isOK && second.isOK && server.targets == ["/a.jpg"])
        #expect(first.fetched == "http://localhost:\(port)/a.jpg" && first.url == "HTTP://LOCALHOST:\(port)/a.jpg")
        #expect(second.fetched == nil && second.url == "http://localhost:\(port)/a.jpg")
        #expect(third.failure?.rule == "url-user-info")
    }

    /// A redirect is read by the same rules: user information in a Location is refused with its reason; a Location
    /// in capitals is followed in its normalized form.
    @Test func redirectsAreNormalizedToo() async throws {
        let server = MediaTestServer(
            routes: [
                "/to-user-info": .redirect(to: "http://user:secret@127.0.0.1:9/a.jpg"),
                "/to-relative": .redirect(to: "/a.jpg"),
                "/a.jpg": .bytes(Self.jpeg, contentType: "image/jpeg"),
            ],
            recordRequests: true
        )
        let port = try await server.start()
        let media = try Self.corpusService()
        let refused = await media.check("http://127.0.0.1:\(port)/to-user-info")
        let followed = await media.check("HTTP://127.0.0.1:\(port)/to-relative")
        try? await server.shutdown()
        #expect(refused.failure?.rule == "redirect-invalid")
        #expect(refused.failure?.message.contains("user information") == true, "\(refused.json)")
        #expect(followed.isOK, "\(followed.json)")
        // The Host header is the normalized authority.
        #expect(server.requests.last?.headers.first { $0.0.lowercased() == "host" }?.1 == "127.0.0.1:\(port)")
    }

    /// Sent without a check (media_check off), a URL still goes in its normalized form.
    @Test func anUncheckedURLIsStillSentNormalized() async throws {
        let media = try Self.corpusService()
        var message = PushMessage()
        message.alert = .init(title: "t")
        message.media = [PushMedia(url: "HTTPS://CDN.Example.com:443/a%2Fb.jpg?sig=x%2B")]
        let (errors, warnings) = await media.checkMedia(&message, onFailure: .off, rehost: .never)
        #expect(errors.isEmpty)
        #expect(message.media.map(\.url) == ["https://cdn.example.com/a%2Fb.jpg?sig=x%2B"])
        #expect(warnings.map(\.rule) == ["url-normalized"] && warnings.first?.message.contains("is sent as") == true)
    }
}

extension MediaHostingTests {
    /// Through the API: a URL in capitals is accepted and sent in the form fetched, the answer naming both; one with
    /// user information is refused naming its rule; the media check answers with what it fetched.
    @Test func theAnswersNameTheURLAsWrittenAndAsFetched() async throws {
        let (api, base, server, _, store) = try await Self.api(routes: [
            "/a.jpg": .bytes(MediaPreflightTests.jpeg, contentType: "image/jpeg")
        ])
        let fetched = base + "/a.jpg"
        let written = "HTTP://" + base.dropFirst("http://".count) + "/a.jpg"
        try await Application(router: api.router()).test(.router) { client in
            let (_, _, createdBody) = try await Self.call(
                client,
                .post,
                "/v1/apps",
                body: ByteBuffer(bytes: (["name": "Shop", "bundle_id": "com.example.app"] as JSONValue).serialized())
            )
            let created = try JSONValue.parse(createdBody)
            let app = try #require(created["app"]?["id"]?.stringValue)
            let key = try #require(created["api_key"]?.stringValue)
            func post(_ path: String, _ body: JSONValue) async throws -> (Int, JSONValue) {
                let (s, _, b) = try await Self.call(
                    client,
                    .post,
                    path,
                    key: key,
                    body: ByteBuffer(bytes: body.serialized())
                )
                return (s, try JSONValue.parse(b))
            }
            let target: JSONValue = ["fcm_tokens": ["fcm-1"]]
            let (sent, answer) = try await post(
                "/v1/apps/\(app)/notifications",
                ["title": "x", "media": .string(written), "audience": target]
            )
            #expect(sent == 202, "\(answer)")
            let note = answer["warnings"]?.arrayValue?.first { $0["rule"] == "url-normalized" }
            #expect(note?["path"] == "media[0].url")
            #expect(note?["url"]?.stringValue == written && note?["fetched"]?.stringValue == fetched)
            let stored = try #require(try await store.message(id: answer["id"]!.stringValue!))
            #expect(stored.media.map(\.url) == [fetched])

            let (refused, why) = try await post(
                "/v1/apps/\(app)/notifications",
                [
                    "title": "x", "media": .string("http://user:secret@" + base.dropFirst("http://".count) + "/a.jpg"),
                    "audience": target,
                ]
            )
            let issue = why["error"]?["issues"]?.arrayValue?.first
            #expect(refused == 422 && issue?["path"] == "media[0].url" && issue?["rule"] == "url-user-info", "\(why)")

            let (checked, result) = try await post("/v1/media/check", ["url": .string(written)])
            let first = result["results"]?.arrayValue?.first
            #expect(checked == 200 && first?["ok"] == true)
            #expect(first?["url"]?.stringValue == written && first?["fetched"]?.stringValue == fetched)
        }
        try? await server.shutdown()
    }
}
