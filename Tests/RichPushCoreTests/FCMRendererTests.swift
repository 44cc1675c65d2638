import Foundation
import Testing

@testable import RichPushCore

@Suite struct FCMRendererTests {
    let renderer = FCMRenderer(projectID: "myproject-b5ae1", now: Fixtures.fixedNow)

    /// The example from FCM's documentation on sending an image in a notification, as published.
    static let documented: JSONValue = [
        "message": [
            "topic": "industry-tech",
            "notification": ["title": "Sparky says hello!"],
            "android": ["notification": ["image": "https://foo.bar.pizza-monster.png"]],
            "apns": [
                "payload": ["aps": ["mutable-content": 1]],
                "fcm_options": ["image": "https://foo.bar.pizza-monster.png"],
            ],
            "webpush": ["headers": ["image": "https://foo.bar.pizza-monster.png"]],
        ]
    ]

    @Test func rebuildsTheDocumentedExample() throws {
        let m = try Fixtures.message(
            #"{"title":"Sparky says hello!","media":"https://foo.bar.pizza-monster.png","targets":{"topic":"industry-tech"}}"#
        )
        let request = renderer.render(m, to: .topic(try #require(m.targets.topic)))
        #expect(request.path == "/v1/projects/myproject-b5ae1/messages:send")
        // Ours adds exactly two things to the documented body: notification.image (read by every platform)
        // and our own key inside apns.payload. Without them the two are the same structure.
        guard case .object(var message) = request.body["message"],
            case .object(var notification) = message["notification"],
            case .object(var apns) = message["apns"], case .object(var payload) = apns["payload"]
        else {
            Issue.record("unexpected shape")
            return
        }
        #expect(notification.removeValue(forKey: "image") == "https://foo.bar.pizza-monster.png")
        #expect(payload.removeValue(forKey: "rp") == ["v": 1, "m": [["u": "https://foo.bar.pizza-monster.png"]]])
        message["notification"] = .object(notification)
        apns["payload"] = .object(payload)
        message["apns"] = .object(apns)
        #expect(JSONValue.object(["message": .object(message)]) == Self.documented)
    }

    @Test func androidGetsAnAndroidImageWhileAppleGetsTheFirstMedia() throws {
        let m = try Fixtures.message(#"{"title":"t","media":["https://x.test/anim.gif","https://x.test/still.png"]}"#)
        let body = renderer.render(m, to: .token(Fixtures.fcmToken)).body["message"]
        #expect(body?["android"]?["notification"]?["image"] == "https://x.test/still.png")
        #expect(body?["apns"]?["fcm_options"]?["image"] == "https://x.test/anim.gif")
        #expect(body?["webpush"]?["headers"]?["image"] == "https://x.test/still.png")
        #expect(body?["token"] == .string(Fixtures.fcmToken))
    }

    @Test func aVideoOnlyMessageUsesTheChartImageForAndroid() throws {
        let m = try Fixtures.message(
            #"{"title":"t","media":[{"url":"https://x.test/clip.mp4"}],"chart":{"values":[1,2]}}"#
        )
        var r = renderer
        r.chartImageURL = "https://push.example.com/media/abc.png"
        let body = r.render(m, to: .token(Fixtures.fcmToken)).body["message"]
        #expect(body?["android"]?["notification"]?["image"] == "https://push.example.com/media/abc.png")
        #expect(body?["apns"]?["fcm_options"]?["image"] == "https://x.test/clip.mp4")
        #expect(body?["apns"]?["payload"]?["rp"]?["c"] == ["values": [1, 2]])
    }

    @Test func dataBecomesStringsAndDeliveryOptionsMapPerPlatform() throws {
        let m = try Fixtures.message(
            #"""
            {"title":"t","body":"b","data":{"s":"x","n":42,"o":{"a":[1,true]}},"priority":"high","ttl":3600,"collapse_id":"c",
             "badge":2,"sound":"ping","deep_link":"https://shop.test/o/1","analytics_label":"camp_1",
             "android_channel_id":"orders"}
            """#
        )
        let body = try #require(renderer.render(m, to: .token(Fixtures.fcmToken)).body["message"])
        #expect(body["data"] == ["s": "x", "n": "42", "o": #"{"a":[1,true]}"#])
        #expect(body["android"]?["priority"] == "HIGH")
        #expect(body["android"]?["ttl"] == "3600s")
        #expect(body["android"]?["collapse_key"] == "c")
        #expect(
            body["android"]?["notification"] == [
                "sound": "ping", "notification_count": 2, "tag": "c", "channel_id": "orders",
            ]
        )
        #expect(m.json["android_channel_id"] == "orders")
        #expect(
            body["apns"]?["headers"] == [
                "apns-priority": "10", "apns-expiration": "1700003600", "apns-collapse-id": "c",
            ]
        )
        #expect(body["apns"]?["payload"]?["aps"] == ["badge": 2, "sound": "ping"])
        #expect(body["webpush"]?["headers"] == ["TTL": "3600", "Urgency": "high"])
        #expect(body["webpush"]?["fcm_options"] == ["link": "https://shop.test/o/1"])
        #expect(body["fcm_options"] == ["analytics_label": "camp_1"])
        #expect(body["apns"]?["fcm_options"]?["analytics_label"] == "camp_1")
        #expect(body["apns"]?["payload"]?["rp"]?["l"] == "https://shop.test/o/1")
    }

    @Test func appleAlertIsOnlySentWhenItCarriesMoreThanTitleAndBody() throws {
        let plain = renderer.render(try Fixtures.message(#"{"title":"t","body":"b","badge":1}"#), to: .topic("x")).body
        #expect(plain["message"]?["apns"]?["payload"]?["aps"]?["alert"] == nil)
        let sub = renderer.render(try Fixtures.message(#"{"title":"t","subtitle":"s","body":"b"}"#), to: .topic("x"))
            .body
        #expect(sub["message"]?["apns"]?["payload"]?["aps"]?["alert"] == ["title": "t", "subtitle": "s", "body": "b"])
    }

    @Test func topicPrefixIsStrippedAndValidateOnlyIsCarried() throws {
        let m = try Fixtures.message(#"{"body":"b"}"#)
        let r = renderer.render(m, to: .topic("/topics/news"), validateOnly: true)
        #expect(r.body["message"]?["topic"] == "news")
        #expect(r.body["validate_only"] == true)
        #expect(r.payloadSize == JSONValue.object(["notification": ["body": "b"]]).serializedSize)
        #expect(try JSONValue.parse(r.bodyBytes) == r.body)
    }

    @Test func noPushTypeHeaderForAlertsButOneForOthers() throws {
        var m = try Fixtures.message(#"{"content_available":true,"push_type":"background"}"#)
        #expect(
            renderer.render(m, to: .token("t")).body["message"]?["apns"]?["headers"] == [
                "apns-push-type": "background", "apns-priority": "5",
            ]
        )
        m.pushType = .alert
        m.alert.body = "x"
        #expect(renderer.render(m, to: .token("t")).body["message"]?["apns"]?["headers"] == nil)
    }
}
