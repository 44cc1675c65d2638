import Foundation
import Hummingbird
import HummingbirdTesting
import RichPushCore
import RichPushServer
import Testing

/// The routes a console reads (who a key is, keys, past notifications a page at a time, a registry search), the
/// same on every backend.
@Suite struct ConsoleRoutesTests {
    typealias Kind = StorageBackendTests.Kind

    @Test(arguments: Kind.allCases)
    func whoKeysNotificationsAndDevices(_ kind: Kind) async throws {
        let backend = try await StorageBackendTests.make(kind)
        let api = RichPushAPI(
            backend: backend,
            adminKey: "admin-secret",
            validation: .init(allowInsecureMedia: true, requireTargets: false)
        )
        try await Application(router: api.router()).test(.router) { client in
            let call = { (method: HTTPRequest.Method, path: String, key: String?, body: JSONValue?) in
                try await APITests.call(client, method, path, key: key, body: body)
            }
            #expect(try await call(.get, "/v1/me", "admin-secret", nil).1 == ["admin": true, "sandbox": false])
            let (app, key) = try await APITests.createApp(client)
            let (meStatus, me) = try await call(.get, "/v1/me", key, nil)
            #expect(
                meStatus == 200 && me["admin"] == false && me["app"]?["id"] == .string(app)
                    && me["scopes"] == ["send", "manage", "read", "register"]
            )
            #expect(try await call(.get, "/v1/me", nil, nil).0 == 401)
            // Keys: listed without the keys themselves.
            let (_, made) = try await call(.post, "/v1/apps/\(app)/keys", key, ["scopes": ["send"]])
            let (_, keys) = try await call(.get, "/v1/apps/\(app)/keys", key, nil)
            // By key id.
            let listed: [String] = (keys["keys"]?.arrayValue ?? []).compactMap { $0["id"]?.stringValue }
            let madeID = try #require(made["id"]?.stringValue)
            let expected: [String] = [APIKeys.id(ofHash: APIKeys.hash(key)), madeID].sorted()
            #expect(listed == expected)
            let madeEntry = (keys["keys"]?.arrayValue ?? []).first { $0["id"]?.stringValue == madeID }
            #expect(madeEntry?["scopes"] == ["send"] && !keys.jsonString.contains("rp_"))
            #expect(keys["next_after"] == nil)
            // Found by the API fuzzer on PostgreSQL: a cursor with a NUL was a 500 (the database refuses NUL in text).
            for bad in ["k%00x", "k%C2%89%C3%A9", String(repeating: "a", count: 65)] {
                #expect(try await call(.get, "/v1/apps/\(app)/keys?after=\(bad)", key, nil).0 == 422, "\(bad)")
            }
            let (_, firstPage) = try await call(.get, "/v1/apps/\(app)/keys?limit=1", key, nil)
            #expect(firstPage["keys"]?.arrayValue?.count == 1 && firstPage["next_after"] != nil)
            let sendOnly = try #require(made["api_key"]?.stringValue)
            #expect(try await call(.get, "/v1/apps/\(app)/keys", sendOnly, nil).0 == 403)
            // Devices: a prefix of the token, a user id, a tag.
            for i in 0..<5 {
                #expect(
                    try await call(
                        .post,
                        "/v1/apps/\(app)/devices",
                        key,
                        [
                            "token": .string(String(format: "%064x", 0xabc0 + i)), "platform": "ios",
                            "user_id": .string("user-\(i % 2)"), "tags": i == 4 ? ["vip"] : [],
                        ]
                    ).0 == 200
                )
            }
            let (_, everyone) = try await call(.get, "/v1/apps/\(app)/devices?limit=3", key, nil)
            #expect(
                everyone["devices"]?.arrayValue?.count == 3 && everyone["total"] == 5 && everyone["next_after"] != nil
            )
            let after = try #require(everyone["next_after"]?.intValue)
            #expect(
                try await call(.get, "/v1/apps/\(app)/devices?limit=3&after=\(after)", key, nil).1["devices"]?
                    .arrayValue?.count == 2
            )
            let prefix = String(String(format: "%064x", 0xabc3).prefix(63))
            #expect(
                try await call(.get, "/v1/apps/\(app)/devices?q=\(prefix)", key, nil).1["devices"]?.arrayValue?.count
                    == 5
            )
            #expect(
                try await call(.get, "/v1/apps/\(app)/devices?q=user-1", key, nil).1["devices"]?.arrayValue?.map {
                    $0["user_id"]
                } == ["user-1", "user-1"]
            )
            #expect(
                try await call(.get, "/v1/apps/\(app)/devices?q=vip", key, nil).1["devices"]?.arrayValue?.first?["tags"]
                    == ["vip"]
            )
            #expect(try await call(.get, "/v1/apps/\(app)/devices?q=nobody", key, nil).1["devices"] == [])
            #expect(try await call(.get, "/v1/apps/\(app)/devices?q=a%00b", key, nil).0 == 422)
            #expect(try await call(.get, "/v1/apps/\(app)/devices?limit=0", key, nil).0 == 422)
            // Notifications: newest first, a page at a time, with their counts.
            var ids: [String] = []
            for i in 0..<5 {
                let (s, n) = try await call(
                    .post,
                    "/v1/apps/\(app)/notifications",
                    key,
                    ["title": .string("n\(i)"), "audience": ["user": "user-0"]]
                )
                #expect(s == 202)
                ids.append(try #require(n["id"]?.stringValue))
                try await Task.sleep(nanoseconds: 5_000_000)
            }
            await api.fanOuts.idle()
            let (_, first) = try await call(.get, "/v1/apps/\(app)/notifications?limit=3", key, nil)
            #expect(
                first["notifications"]?.arrayValue?.map { $0["id"] } == ids.reversed().prefix(3).map { .string($0) }
            )
            #expect(
                first["notifications"]?.arrayValue?.first?["title"] == "n4"
                    && first["notifications"]?.arrayValue?.first?["total"] == 3
            )
            let before = try #require(first["next_before"]?.doubleValue)
            let (_, rest) = try await call(.get, "/v1/apps/\(app)/notifications?limit=3&before=\(before)", key, nil)
            #expect(
                rest["notifications"]?.arrayValue?.map { $0["id"] } == [.string(ids[1]), .string(ids[0])]
                    && rest["next_before"] == nil
            )
            #expect(try await call(.get, "/v1/apps/\(app)/notifications?before=-1", key, nil).0 == 422)
            // Outside sandbox mode there is no simulated iPhone.
            #expect(try await call(.get, "/v1/apps/\(app)/notifications/\(ids[0])/simulation", key, nil).0 == 404)
        }
        await backend.close()
    }
}
