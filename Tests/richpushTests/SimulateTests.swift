import Foundation
import RichPushCore
import RichPushSandbox
import RichPushTestSupport
import Testing

/// `richpush simulate` on payloads in each provider's documented format, against media on loopback.
@Suite struct SimulateTests {
    typealias S = MediaSamples

    static let routes: [String: MediaRoute] = [
        "/hero.jpg": .bytes(S.file(S.jpeg(marker: 0xE1), size: 30_000), contentType: "image/jpeg"),
        "/anim": .bytes(S.file(S.gif89, size: 8_000), contentType: "image/gif"),
        "/clip.mp4": .bytes(S.file(S.ftyp("mp42", ["isom"]), size: 50_000), contentType: "video/mp4"),
        "/tune.m4a": .bytes(S.file(S.ftyp("M4A ", ["M4A ", "isom"]), size: 40_000), contentType: "audio/mp4"),
        "/still.png": .bytes(S.file(S.png, size: 10_000), contentType: "image/png"),
    ]

    /// (provider, payload builder, expected UTIs in order, expected body)
    static func cases(_ b: String) -> [(String, JSONValue, [String], String)] {
        let aps: JSONValue = ["alert": ["title": "Hello", "body": "World"], "mutable-content": 1]
        return [
            (
                "richpush",
                [
                    "aps": aps,
                    "rp": [
                        "v": 1, "m": [["u": .string(b + "/hero.jpg")], ["u": .string(b + "/tune.m4a"), "k": "audio"]],
                        "o": ["b": "Rich"],
                    ],
                ],
                ["public.jpeg", "public.mpeg-4-audio"], "Rich"
            ),
            (
                "fcm", ["aps": aps, "fcm_options": ["image": .string(b + "/still.png")], "gcm.message_id": "123"],
                ["public.png"], "World"
            ),
            (
                "braze",
                ["aps": aps, "ab": ["att": ["url": .string(b + "/anim"), "type": "gif"]], "ab_uri": "app://x"],
                ["com.compuserve.gif"], "World"
            ),
            (
                "onesignal", ["aps": aps, "att": ["id": .string(b + "/clip.mp4")], "custom": ["i": "f8a3"]],
                ["public.mpeg-4"], "World"
            ),
            (
                "airship",
                [
                    "aps": aps,
                    "com.urbanairship.media_attachment": [
                        "url": [.string(b + "/hero.jpg")],
                        "options": ["crop": ["x": 0, "y": 0, "width": 1, "height": 0.5]],
                        "content": ["body": "From Airship"],
                    ],
                ],
                ["public.jpeg"], "From Airship"
            ),
            (
                "clevertap", ["aps": aps, "ct_mediaUrl": .string(b + "/anim"), "ct_mediaType": "gif"],
                ["com.compuserve.gif"], "World"
            ),
            (
                "iterable",
                [
                    "aps": aps,
                    "itbl": ["attachment-url": .string(b + "/hero.jpg"), "defaultAction": ["type": "openApp"]],
                ], ["public.jpeg"], "World"
            ),
            (
                "customerio", ["aps": aps, "CIO": ["push": ["image": .string(b + "/still.png"), "link": "app://c"]]],
                ["public.png"], "World"
            ),
            (
                "klaviyo", ["aps": aps, "rich-media": .string(b + "/clip.mp4"), "rich-media-type": "mp4"],
                ["public.mpeg-4"], "World"
            ),
        ]
    }

    @Test func everyProvidersPayloadGetsItsAttachments() async throws {
        let server = MediaTestServer(routes: Self.routes)
        let port = try await server.start()
        defer { Task { try? await server.shutdown() } }
        let base = "http://127.0.0.1:\(port)"
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("simulate-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        for (provider, payload, utis, body) in Self.cases(base) {
            let out = dir.appendingPathComponent(provider)
            let r = try await CLITests().run(
                ["simulate", "--allow-http", "--deadline", "10", "--out", out.path, "-"],
                stdin: payload.jsonString
            )
            #expect(r.status == 0, "\(provider): \(r.stderr)")
            let report = try JSONValue.parse(r.stdout)
            let attachments = report["attachments"]?.arrayValue ?? []
            #expect(attachments.compactMap { $0["uti"]?.stringValue } == utis, "\(provider): \(r.stdout)")
            #expect(report["body"]?.stringValue == body, "\(provider)")
            #expect(report["title"] == "Hello")
            #expect(report["skipped"]?.arrayValue?.isEmpty == true, "\(provider): \(r.stdout)")
            #expect(report["deadline_hit"] == false)
            #expect(report["sources"]?.arrayValue?.first?.stringValue == provider)
            for a in attachments {
                let file = try #require(a["file"]?.stringValue)
                #expect(file.hasPrefix(out.path))
                #expect(FileManager.default.fileExists(atPath: file))
            }
        }
    }

    @Test func simulateReportsDeadlineAndSkips() async throws {
        let server = MediaTestServer(
            routes: Self.routes.merging([
                "/slow.jpg": .drip(total: 100_000, chunk: 10, interval: 0.2, contentType: "image/jpeg")
            ]) { a, _ in a }
        )
        let port = try await server.start()
        defer { Task { try? await server.shutdown() } }
        let b = "http://127.0.0.1:\(port)"
        let payload: JSONValue = [
            "aps": ["alert": "x", "mutable-content": 1],
            "rp": [
                "v": 1,
                "m": [
                    ["u": .string(b + "/hero.jpg")], ["u": .string(b + "/slow.jpg")], ["u": .string(b + "/gone.jpg")],
                ],
            ],
        ]
        let out = FileManager.default.temporaryDirectory.appendingPathComponent("simulate-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: out) }
        let r = try await CLITests().run(
            ["simulate", "--allow-http", "--deadline", "1.5", "--out", out.path, "-"],
            stdin: payload.jsonString
        )
        let report = try JSONValue.parse(r.stdout)
        #expect(report["deadline_hit"] == true)
        #expect(report["attachments"]?.arrayValue?.count == 1)
        let reasons = (report["skipped"]?.arrayValue ?? []).compactMap { $0["reason"]?.stringValue }
        #expect(Set(reasons) == ["deadline", "http-status"], "\(r.stdout)")
        #expect((report["elapsed_ms"]?.intValue ?? 0) < 3000)
    }
}
