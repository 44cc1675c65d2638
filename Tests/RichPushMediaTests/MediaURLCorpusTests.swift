import Foundation
import RichPushCore
import RichPushMedia
import RichPushSandbox
import RichPushTestSupport
import Testing

/// The shared table of media URL spellings through the device pipeline, against real media servers on 127.0.0.1
/// and ::1 (URLSession fetches; a `.invalid` name goes to the system resolver and does not resolve).
@Suite(.serialized) struct MediaURLCorpusTests {
    static func processor() -> RichNotificationProcessor {
        RichNotificationProcessor(configuration: .init(fetch: FetchPolicy(allowInsecureHTTP: true, idleTimeout: 5)))
    }

    static func payload(_ url: String) -> JSONValue {
        [
            "aps": ["alert": ["title": "T", "body": "B"], "mutable-content": 1],
            "rp": ["v": 1, "m": [["u": .string(url)]]],
        ]
    }

    @Test func everySpellingOfTheTable() async throws {
        let corpus = try MediaURLCorpus()
        let servers = try await MediaURLCorpus.Servers.start(corpus)
        let entries = corpus.entries(port: servers.port, port6: servers.port6)
        let results = await MediaURLCorpus.device(entries)
        await servers.shutdown()
        let differences = corpus.differences(results.map(\.0), in: entries, part: .device)
        #expect(differences.isEmpty, "\(differences.joined(separator: "\n"))")
        // The report names the URL as written, and what was fetched beside it when they differ.
        for (e, (_, n)) in zip(entries, results) where e.outcome != .refused {
            let item = n.report.json[n.attachments.isEmpty ? "skipped" : "attachments"]?.arrayValue?.first
            #expect(item?["url"]?.stringValue == e.url)
            #expect(item?["fetched"]?.stringValue == (e.fetched == e.url ? nil : e.fetched), "\(e.url)")
        }
        // Each attached URL reached its server with its path and query exactly as the table fetches them.
        let received = Set(servers.targets)
        for target in corpus.targets(in: entries) { #expect(received.contains(target), "\(target) never arrived") }
    }

    /// A redirect is read by the same rules: one to a URL with user information is not followed.
    @Test func aRedirectToUserInformationIsNotFollowed() async throws {
        let server = MediaTestServer(routes: [
            "/to-user-info": .redirect(to: "http://user:secret@127.0.0.1:9/photo.jpg"),
            "/to-capitals": .redirect(to: "/photo.jpg"),
            "/photo.jpg": .bytes(
                MediaSamples.jpeg(marker: 0xE0) + [UInt8](repeating: 7, count: 4000),
                contentType: "image/jpeg"
            ),
        ])
        let port = try await server.start()
        let refused = await Self.processor().process(payload: Self.payload("http://127.0.0.1:\(port)/to-user-info"))
        let followed = await Self.processor().process(payload: Self.payload("HTTP://127.0.0.1:\(port)/to-capitals"))
        try? await server.shutdown()
        #expect(refused.report.skipped.map(\.reason.code) == ["bad-url"], "\(refused.report.skipped)")
        #expect(followed.attachments.count == 1 && followed.attachments.first?.sourceURL.hasPrefix("HTTP://") == true)
    }
}
