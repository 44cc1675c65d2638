import Foundation
import Testing

@testable import RichPushCore

@Suite struct APNsRendererTests {
    let renderer = APNsRenderer(bundleID: "com.example.app", now: Fixtures.fixedNow)

    @Test func mediaSetsMutableContentAndOurKey() throws {
        let m = try Fixtures.message(
            #"{"title":"Hi","body":"There","media":[{"url":"https://x.test/a.jpg","kind":"image","thumbnail":{"crop":{"x":0.1,"y":0.2,"width":0.5,"height":0.5},"time":2,"hidden":true}}]}"#
        )
        let r = renderer.render(m, deviceToken: Fixtures.token)
        #expect(r.path == "/3/device/\(Fixtures.token)")
        #expect(r.payload["aps"]?["mutable-content"] == 1)
        #expect(r.payload["aps"]?["alert"] == ["title": "Hi", "body": "There"])
        let expected: JSONValue = [
            "v": 1, "m": [["u": "https://x.test/a.jpg", "k": "image", "c": [0.1, 0.2, 0.5, 0.5], "f": 2, "h": 1]],
        ]
        #expect(r.payload["rp"] == expected)
        #expect(try JSONValue.parse(r.body) == r.payload)
    }

    @Test func plainAlertHasNoMutableContentAndNoOurKey() throws {
        let r = renderer.render(try Fixtures.message(#"{"body":"Just text"}"#), deviceToken: Fixtures.token)
        #expect(r.payload == ["aps": ["alert": "Just text"]])
        #expect(r.headers.map(\.name) == ["apns-push-type", "apns-topic"])
    }

    @Test func chartOrOverrideAloneAlsoNeedTheExtension() throws {
        let chart = try Fixtures.message(#"{"title":"T","chart":{"values":[1,2,3]}}"#)
        #expect(renderer.render(chart, deviceToken: Fixtures.token).payload["aps"]?["mutable-content"] == 1)
        #expect(renderer.render(chart, deviceToken: Fixtures.token).payload["rp"]?["c"] == ["values": [1, 2, 3]])
        let override = try Fixtures.message(#"{"title":"T","content_override":{"body":"secret"}}"#)
        #expect(renderer.render(override, deviceToken: Fixtures.token).payload["rp"]?["o"] == ["b": "secret"])
    }

    @Test(arguments: PushType.allCases)
    func topicCarriesThePushTypeSuffix(_ type: PushType) {
        var m = PushMessage(alert: .init(body: "x"))
        m.pushType = type
        let headers = renderer.headers(for: m)
        #expect(headers.first { $0.name == "apns-push-type" }?.value == type.rawValue)
        let expected: [PushType: String] = [
            .alert: "", .background: "", .mdm: "", .location: ".location-query", .voip: ".voip",
            .complication: ".complication",
            .fileprovider: ".pushkit.fileprovider", .liveactivity: ".push-type.liveactivity", .pushtotalk: ".voip-ptt",
            .widgets: ".push-type.widgets", .controls: ".push-type.controls",
        ]
        #expect(headers.first { $0.name == "apns-topic" }?.value == "com.example.app" + expected[type]!)
    }

    @Test func priorityExpirationCollapseAndID() throws {
        let m = try Fixtures.message(
            #"{"id":"6F1C3B1E-2A4D-4C7E-9F00-3D2B1A0C9E8F","body":"x","priority":"normal","ttl":60,"collapse_id":"c1"}"#
        )
        let r = renderer.render(m, deviceToken: Fixtures.token)
        #expect(r.header("apns-priority") == "5")
        #expect(r.header("apns-expiration") == "1700000060")
        #expect(r.header("apns-collapse-id") == "c1")
        #expect(r.header("apns-id") == "6f1c3b1e-2a4d-4c7e-9f00-3d2b1a0c9e8f")
        #expect(
            renderer.render(try Fixtures.message(#"{"body":"x","ttl":0}"#), deviceToken: "aa").header("apns-expiration")
                == "0"
        )
        #expect(
            renderer.render(try Fixtures.message(#"{"body":"x","expiration":1800000000}"#), deviceToken: "aa").header(
                "apns-expiration"
            ) == "1800000000"
        )
        #expect(
            renderer.render(try Fixtures.message(#"{"body":"x","id":"order-1"}"#), deviceToken: "aa").header("apns-id")
                == nil
        )
        #expect(
            renderer.render(try Fixtures.message(#"{"body":"x","priority":10}"#), deviceToken: "aa").header(
                "apns-priority"
            ) == "10"
        )
        #expect(
            renderer.render(try Fixtures.message(#"{"body":"x","priority":"low"}"#), deviceToken: "aa").header(
                "apns-priority"
            ) == "1"
        )
    }

    @Test func backgroundPushDefaultsToPriorityFiveAndContentAvailable() throws {
        let m = try Fixtures.message(#"{"push_type":"background","content_available":true,"data":{"k":"v"}}"#)
        let r = renderer.render(m, deviceToken: Fixtures.token)
        #expect(r.header("apns-priority") == "5")
        #expect(r.payload == ["aps": ["content-available": 1], "k": "v"])
    }

    @Test func everyAPSField() throws {
        let m = try Fixtures.message(
            #"""
            {"alert":{"title":"T","subtitle":"S","body":"B","title_loc_key":"TK","title_loc_args":["a"],"subtitle_loc_key":"SK",
             "subtitle_loc_args":["b"],"loc_key":"K","loc_args":["c","d"],"launch_image":"L.png"},
             "badge":3,"sound":{"name":"alarm.caf","critical":true,"volume":0.5},"thread_id":"th","category":"CAT",
             "interruption_level":"time-sensitive","relevance_score":0.25,"content_available":true,"data":{"n":{"deep":[1]}}}
            """#
        )
        let p = APNsRenderer.payload(for: m)
        let expected: JSONValue = [
            "aps": [
                "alert": [
                    "title": "T", "subtitle": "S", "body": "B", "title-loc-key": "TK", "title-loc-args": ["a"],
                    "subtitle-loc-key": "SK",
                    "subtitle-loc-args": ["b"], "loc-key": "K", "loc-args": ["c", "d"], "launch-image": "L.png",
                ],
                "badge": 3, "sound": ["name": "alarm.caf", "critical": 1, "volume": 0.5], "thread-id": "th",
                "category": "CAT",
                "interruption-level": "time-sensitive", "relevance-score": 0.25, "content-available": 1,
            ],
            "n": ["deep": [1]],
        ]
        #expect(p == expected)
    }

    @Test func messageJSONRoundTrips() throws {
        let dir = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../examples")
        for name in ["rich-image.json", "stock-chart.json", "silent-refresh.json"] {
            let data = try Data(contentsOf: dir.appendingPathComponent(name))
            let m = try PushMessage.decode(JSONValue.parse(data))
            #expect(try PushMessage.decode(m.json) == m, "\(name)")
        }
    }
}
