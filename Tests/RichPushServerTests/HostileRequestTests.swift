import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import RichPushCore
import RichPushServer
import Testing

/// Every class of hostile value, sent to a server listening on a real socket: each is answered 4xx, and the server
/// still answers afterwards (a trap would take the test process down with it).
@Suite struct HostileRequestTests {
    static let token = String(repeating: "ab", count: 32)

    /// One field of a send set to an extreme; everything else is a valid notification.
    static let hostileFields: [(String, JSONValue)] = {
        var out: [(String, JSONValue)] = []
        let numbers: [JSONValue] = [
            .double(1e19), .double(-1e19), .double(1e308), .double(-1e308), .int(Int64.max), .int(Int64.min),
            .double(1e-320),
            .string("soon"), .bool(true), .array([]), .object([:]),
        ]
        for field in [
            "send_at", "spread_seconds", "ttl", "expiration", "badge", "relevance_score", "priority", "dry_run",
            "receipts",
        ] {
            for n in numbers { out.append((field, n)) }
        }
        let charts: [JSONValue] = [
            ["values": [.double(1e308), 1]], ["values": [.double(-1e308), .double(1e308)]],
            ["values": [1, 2], "size": [.double(1e9), .double(1e9)]],
            ["values": [1, 2], "scale": .int(Int64.max)], ["values": [1, 2], "grid": .int(Int64.min)],
            ["values": [1, 2], "line_width": .double(1e308)],
            ["values": [1, 2], "y": [.double(1e308), .double(-1e308)]],
            ["values": .array(Array(repeating: 1, count: 100_000))],
            ["series": .array(Array(repeating: ["values": [1]], count: 10_000))], ["values": "many"],
            ["values": [1, 2], "size": [.int(Int64.max), .int(Int64.min)]],
        ]
        for c in charts { out.append(("chart", c)) }
        out.append(("media", .array(Array(repeating: "https://cdn.example.com/a.jpg", count: 10_000))))
        out.append(
            (
                "media",
                [
                    [
                        "url": "https://cdn.example.com/a.jpg",
                        "thumbnail": ["crop": [.double(1e308), .double(-1e308), 1, 1], "time": .double(1e308)],
                    ]
                ]
            )
        )
        out.append(("title", .string(String(repeating: "😀", count: 100_000))))
        out.append(("data", deep(200)))
        out.append(("audience", ["tokens": .array(Array(repeating: .string(token), count: 20_000))]))
        out.append(("audience", ["apns_tokens": [.int(5), .string("zz")]]))
        out.append(("audience", ["fcm_condition": .string(String(repeating: "(", count: 5_000))]))
        out.append(("interruption_level", .string("loud")))
        return out
    }()

    /// Values of the list above that are valid for their field (a tiny spread or score is about 0; the two flags).
    static let inRange: [(String, JSONValue)] = [
        ("spread_seconds", .double(1e-320)), ("relevance_score", .double(1e-320)), ("dry_run", .bool(true)),
        ("receipts", .bool(true)),
    ]

    static func deep(_ n: Int) -> JSONValue {
        var v: JSONValue = 1
        for _ in 0..<n { v = ["k": v] }
        return v
    }

    @Test func everyHostileValueIsA4xxAndTheServerStaysUp() async throws {
        let f = try APITests.fixture()
        try await Application(router: f.api.router()).test(.live) { client in
            let (app, key) = try await APITests.createApp(client)
            let path = "/v1/apps/\(app)/notifications"
            var answers: [String: Int] = [:]
            for (field, value) in Self.hostileFields {
                var body: [String: JSONValue] = ["title": "Sale", "audience": ["apns_tokens": [.string(Self.token)]]]
                body[field] = value
                let (status, answer) = try await APITests.call(client, .post, path, key: key, body: .object(body))
                // Refused, naming the field and the rule; only the few values inside a field's range go through.
                let inRange = Self.inRange.contains { $0.0 == field && $0.1 == value }
                #expect(
                    (400..<500).contains(status) != inRange,
                    "\(field)=\(value.jsonString.prefix(80)): \(status) \(answer.jsonString.prefix(300))"
                )
                if status == 422 {
                    let paths = (answer["error"]?["issues"]?.arrayValue ?? []).compactMap { $0["path"]?.stringValue }
                    #expect(
                        paths.contains { $0.hasPrefix(field) } || field == "audience" || field == "media",
                        "\(field): \(paths)"
                    )
                }
                answers["\(field) \(value.jsonString.prefix(40))"] = status
            }
            // The ones the issue found trapping are refused with the rule named.
            let sendAt = try await APITests.call(
                client,
                .post,
                path,
                key: key,
                body: [
                    "title": "x", "send_at": .double(1e19), "chart": ["values": [1, 2]],
                    "audience": ["apns_tokens": [.string(Self.token)]],
                ]
            )
            #expect(
                sendAt.0 == 422 && sendAt.1["error"]?["issues"]?.arrayValue?.first?["path"] == "send_at"
                    && sendAt.1["error"]?["issues"]?.arrayValue?.first?["rule"] == "range"
            )
            let chart = try await APITests.call(
                client,
                .post,
                path,
                key: key,
                body: [
                    "title": "x", "chart": ["values": [.double(1e308), 1]],
                    "audience": ["apns_tokens": [.string(Self.token)]],
                ]
            )
            #expect(chart.0 == 422 && chart.1["error"]?["issues"]?.arrayValue?.first?["rule"] == "range", "\(chart.1)")
            // Bodies that are not JSON, or not UTF-8, or nested past the limit.
            for raw in [
                [0xFF, 0xFE, 0x7B], Array("{\"title\":\"\u{0}".utf8),
                Array((String(repeating: "[", count: 10_000)).utf8), [0x22, 0xC3, 0x28, 0x22],
            ] as [[UInt8]] {
                let status = try await client.execute(
                    uri: path,
                    method: .post,
                    headers: [.authorization: "Bearer \(key)"],
                    body: ByteBuffer(bytes: raw)
                ) { Int($0.status.code) }
                #expect((400..<500).contains(status), "\(raw.prefix(8)): \(status)")
            }
            #expect(try await APITests.call(client, .get, "/health", key: nil).0 == 200)
            #expect(answers.count > 100)
        }
    }

    @Test func sendAtIsHeldToTwentyEightDaysAhead() async throws {
        let f = try APITests.fixture()
        try await Application(router: f.api.router()).test(.router) { client in
            let (app, key) = try await APITests.createApp(client)
            let now = Date().timeIntervalSince1970
            for (at, ok) in [
                (now + 27 * 86_400, true), (now + 29 * 86_400, false), (now - 3_600, true), (now - 2 * 86_400, false),
            ] {
                let (status, body) = try await APITests.call(
                    client,
                    .post,
                    "/v1/apps/\(app)/notifications",
                    key: key,
                    body: ["title": "x", "send_at": .double(at), "audience": ["apns_tokens": [.string(Self.token)]]]
                )
                #expect(ok ? status == 202 : status == 422, "\(at - now): \(body)")
            }
        }
    }
}
