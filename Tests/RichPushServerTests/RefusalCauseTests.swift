import Foundation
import Hummingbird
import HummingbirdTesting
import NIOCore
import RichPushCore
import RichPushTestSupport
import Testing

@testable import RichPushServer

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Refusals that used to say too little, or let through what two readers could read apart: each names its cause.
@Suite struct RefusalCauseTests {
    /// A request the HTTP codec cannot read (a bad `Content-Length`, a head past 80 KB, a stray character in a header)
    /// is answered with the API's error body naming the cause, and the node answers the next connection.
    @Test func theCodecsRefusalsNameTheirCause() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("refusal-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try await TestServer.start(ApplicationTests.configuration(in: folder), adminKey: Self.admin)
        let cases: [(String, [UInt8], String)] = [
            (
                "a Content-Length that is not a number",
                Array("POST /v1/apps HTTP/1.1\r\nHost: x\r\nContent-Length: 12a\r\n\r\n{}".utf8),
                "Content-Length"
            ),
            (
                "a 100 KB path",
                Array("GET /\(String(repeating: "a", count: 100_000)) HTTP/1.1\r\nHost: x\r\n\r\n".utf8),
                "80 KB"
            ),
            (
                "a header name with a space",
                Array("GET /health HTTP/1.1\r\nHost: x\r\nBad Name: 1\r\n\r\n".utf8),
                "character"
            ),
        ]
        for (what, bytes, cause) in cases {
            let raw = try await RawHTTP.exchanged(port: server.port, bytes)
            let text = String(decoding: raw, as: UTF8.self)
            let parts = text.components(separatedBy: "\r\n\r\n")
            #expect(text.hasPrefix("HTTP/1.1 400"), "\(what): \(text.prefix(200))")
            let head = parts.first?.lowercased() ?? ""
            #expect(head.contains("content-type: application/json"), "\(what): \(head)")
            let body = parts.dropFirst().joined(separator: "\r\n\r\n")
            #expect(head.contains("content-length: \(body.utf8.count)"), "\(what): \(head) / \(body.utf8.count)")
            let json = try? JSONValue.parse(Array(body.utf8))
            #expect(json?["error"]?["code"] == "malformed-request", "\(what): \(body)")
            #expect(json?["error"]?["message"]?.stringValue?.contains(cause) == true, "\(what): \(body)")
        }
        // Valid requests pipelined ahead of a malformed one, in one write: each is answered, then the refusal (the
        // refusal overtook the requests waiting their turn, which were dropped unanswered).
        let pipelined =
            String(repeating: "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", count: 3) + "BAD\u{01} / HTTP/1.1\r\n\r\n"
        let answers = String(
            decoding: try await RawHTTP.exchanged(port: server.port, Array(pipelined.utf8)),
            as: UTF8.self
        )
        let statuses = answers.components(separatedBy: "HTTP/1.1 ").dropFirst().map { $0.prefix(3) }
        #expect(statuses == ["200", "200", "200", "400"], "\(answers.prefix(1000))")
        // HEAD wherever GET is: the same status and length, no body.
        let get = String(
            decoding: try await RawHTTP.exchanged(
                port: server.port,
                Array("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".utf8)
            ),
            as: UTF8.self
        )
        let head = String(
            decoding: try await RawHTTP.exchanged(
                port: server.port,
                Array("HEAD /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".utf8)
            ),
            as: UTF8.self
        )
        let getParts = get.components(separatedBy: "\r\n\r\n")
        let headParts = head.components(separatedBy: "\r\n\r\n")
        #expect(head.hasPrefix("HTTP/1.1 200"), "\(head)")
        #expect(headParts.count == 2 && headParts[1].isEmpty, "\(head)")
        #expect(
            headParts[0].lowercased().contains(
                "content-length: \(getParts.dropFirst().joined(separator: "\r\n\r\n").utf8.count)"
            ),
            "\(head) / \(get)"
        )
        // A body whose chunked framing breaks, on a route that reads it: the same refusal, not a 500.
        let app = try await Self.adminCall(
            server.port,
            "POST",
            "/v1/apps",
            body: ["name": "Shop", "bundle_id": "com.example.app"]
        )
        if let id = app["app"]?["id"]?.stringValue {
            let broken =
                "POST /v1/apps/\(id)/devices HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(Self.admin)\r\n"
                + "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\nzz\r\n"
            let text = String(
                decoding: try await RawHTTP.exchanged(port: server.port, Array(broken.utf8)),
                as: UTF8.self
            )
            #expect(text.hasPrefix("HTTP/1.1 400") && text.contains("malformed-request"), "\(text.prefix(400))")
        } else {
            Issue.record("no app: \(app)")
        }
        let health = try await RawHTTP.exchanged(
            port: server.port,
            Array("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".utf8)
        )
        #expect(String(decoding: health, as: UTF8.self).hasPrefix("HTTP/1.1 200"))
        try await server.stop()
    }

    /// `Expect: 100-continue` (RFC 9110, 10.1.1) gets `100 Continue` before the body is sent, then the final answer;
    /// a request without a body gets its answer alone. (Without it, curl waited a second before each upload.)
    @Test func aClientThatExpects100ContinueGetsIt() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("expect-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let server = try await TestServer.start(ApplicationTests.configuration(in: folder), adminKey: Self.admin)
        let body = #"{"name":"Expect","bundle_id":"com.example.expect"}"#
        let fd = try RawHTTP.connected(server.port)
        defer { close(fd) }
        let head =
            "POST /v1/apps HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(Self.admin)\r\n"
            + "Content-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\nExpect: 100-Continue\r\n\r\n"
        #expect(RawHTTP.write(fd, Array(head.utf8)))
        let interim = String(
            decoding: await RawHTTP.receive(fd, within: 5) {
                $0.count >= 4 && Array($0.suffix(4)) == Array("\r\n\r\n".utf8)
            },
            as: UTF8.self
        )
        #expect(interim == "HTTP/1.1 100 Continue\r\n\r\n", "\(interim)")
        #expect(RawHTTP.write(fd, Array(body.utf8)))
        let final = String(
            decoding: await RawHTTP.receive(fd, within: 10) {
                String(decoding: $0, as: UTF8.self).contains("\"api_key\"")
            },
            as: UTF8.self
        )
        #expect(final.hasPrefix("HTTP/1.1 201"), "\(final.prefix(300))")
        // No body, no interim answer.
        let get = String(
            decoding: try await RawHTTP.exchanged(
                port: server.port,
                Array("GET /health HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n".utf8)
            ),
            as: UTF8.self
        )
        #expect(get.hasPrefix("HTTP/1.1 200"), "\(get.prefix(200))")
    }

    static let admin = "refusal-admin-key-0001"

    static func adminCall(_ port: Int, _ method: String, _ path: String, body: JSONValue) async throws -> JSONValue {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)\(path)")!)
        request.httpMethod = method
        request.setValue("Bearer \(admin)", forHTTPHeaderField: "Authorization")
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data(body.serialized())
        let (data, _) = try await URLSession.shared.data(for: request)
        return (try? JSONValue.parse(Array(data))) ?? .null
    }

    /// A body naming one key twice is refused (which value counts would depend on the reader); a label with a
    /// control character is refused naming the rule; lower-case `t` and `z` in a replay's times are read (RFC 3339
    /// allows them); and a register-only key, the one pages ship, is not told where the sandbox's receiver is.
    @Test func bodiesThatReadTwoWaysAreRefusedAndLabelsHoldNoControls() async throws {
        var api = try APITests.fixture().api
        api.sandboxWebhooks = "https://127.0.0.1:1/hooks/"
        try await Application(router: api.router()).test(.router) { client in
            let (app, key) = try await APITests.createApp(client)
            let twice = try await client.execute(
                uri: "/v1/apps/\(app)",
                method: .patch,
                headers: [.authorization: "Bearer \(key)"],
                body: ByteBuffer(string: #"{"name":"Shop","name":"Other"}"#)
            ) { (Int($0.status.code), (try? JSONValue.parse(Array($0.body.readableBytesView))) ?? .null) }
            #expect(twice.0 == 400 && twice.1["error"]?["code"] == "invalid-json", "\(twice)")
            #expect(twice.1["error"]?["message"]?.stringValue?.contains("'name' appears twice") == true, "\(twice)")
            // Nested objects too.
            let nested = try await client.execute(
                uri: "/v1/apps/\(app)/notifications",
                method: .post,
                headers: [.authorization: "Bearer \(key)"],
                body: ByteBuffer(string: #"{"title":"x","audience":{"apns_tokens":["a"],"apns_tokens":["b"]}}"#)
            ) { Int($0.status.code) }
            #expect(nested == 400)

            // Control characters; a line separator; a right-to-left override that shows "Shop" + "txt.exe" as
            // "Shopexe.txt"; an isolate.
            for name in [
                "Shop\nAdmin", "Shop\u{1B}[31m", "Shop\u{85}", "Shop\u{2028}Admin", "Shop\u{202E}txt.exe", "a\u{2066}b",
            ] {
                let (status, body) = try await APITests.call(
                    client,
                    .patch,
                    "/v1/apps/\(app)",
                    key: key,
                    body: ["name": .string(name)]
                )
                let rule = body["error"]?["issues"]?.arrayValue?.first?["rule"]
                #expect(status == 422 && rule == "control-character", "\(name.debugDescription): \(status) \(body)")
            }
            #expect(
                try await APITests.call(client, .patch, "/v1/apps/\(app)", key: key, body: ["name": "Shop 2 ✓"]).0
                    == 200
            )
            // A right-to-left mark, as a Hebrew or Arabic name may hold, stays.
            #expect(
                try await APITests.call(client, .patch, "/v1/apps/\(app)", key: key, body: ["name": "חנות\u{200F} 2"]).0
                    == 200
            )
            // A device's labels too: its user id, tags, topics, locale, time zone and version.
            let token = String(repeating: "ab", count: 32)
            let labels: [(String, JSONValue)] = [
                ("user_id", "u\u{1B}[31m"), ("tags", ["t\u{07}ag"]), ("topics", ["to\u{85}p"]),
                ("locale", "en\u{07}US"), ("time_zone", "Europe/\nParis"), ("app_version", "1\u{07}"),
            ]
            for (field, value) in labels {
                var device: [String: JSONValue] = ["token": .string(token), "platform": "ios"]
                device[field] = value
                let (status, body) = try await APITests.call(
                    client,
                    .post,
                    "/v1/apps/\(app)/devices",
                    key: key,
                    body: .object(device)
                )
                let issue = body["error"]?["issues"]?.arrayValue?.first
                #expect(
                    status == 422 && issue?["rule"] == "control-character"
                        && issue?["path"]?.stringValue?.hasPrefix(field) == true,
                    "\(field): \(status) \(body)"
                )
            }
            // A made-up key is named at most 100 characters long, in the path as in the message.
            let long = String(repeating: "k", count: 200_000)
            let unknown = try await APITests.call(client, .patch, "/v1/apps/\(app)", key: key, body: .object([long: 1]))
            #expect(unknown.0 == 422 && unknown.1.serialized().count < 2_000, "\(unknown.1.serialized().count) bytes")
            let hook = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/webhooks",
                key: key,
                body: ["url": "https://hooks.example.com/rp", "description": "orders\tbackend"]
            )
            #expect(hook.0 == 422 && hook.1["error"]?["issues"]?.arrayValue?.first?["path"] == "description", "\(hook)")

            let (created, endpoint) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/webhooks",
                key: key,
                body: ["url": "https://hooks.example.com/rp", "description": "orders backend"]
            )
            #expect(created == 201, "\(endpoint)")
            if let id = endpoint["id"]?.stringValue {
                let now = WebhookTime.rfc3339(Date().addingTimeInterval(-60))
                let lower = now.replacingOccurrences(of: "T", with: "t").replacingOccurrences(of: "Z", with: "z")
                let replay = try await APITests.call(
                    client,
                    .post,
                    "/v1/apps/\(app)/webhooks/\(id)/replay",
                    key: key,
                    body: ["from": .string(lower)]
                )
                #expect(replay.0 == 202, "\(lower): \(replay)")
            }

            let (_, made) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/keys",
                key: key,
                body: ["scopes": ["register"]]
            )
            let publicKey = try #require(made["api_key"]?.stringValue, "\(made)")
            let seen = try await APITests.call(client, .get, "/v1/me", key: publicKey)
            #expect(seen.0 == 200 && seen.1["sandbox"] != nil && seen.1["sandbox_webhooks"] == nil, "\(seen)")
            let manager = try await APITests.call(client, .get, "/v1/me", key: key)
            #expect(manager.1["sandbox_webhooks"] == "https://127.0.0.1:1/hooks/", "\(manager)")
        }
    }
}
