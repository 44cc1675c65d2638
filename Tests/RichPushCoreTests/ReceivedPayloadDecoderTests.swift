import Foundation
import RichPushTestSupport
import Testing

@testable import RichPushCore

@Suite struct ReceivedPayloadDecoderTests {
    func decode(_ json: String) throws -> ReceivedRichContent {
        ReceivedPayloadDecoder.decode(try JSONValue.parse(json))
    }

    @Test func ours() throws {
        let c = try decode(
            #"""
            {"aps":{"alert":"x","mutable-content":1},"rp":{"v":1,"id":"n-1","l":"app://o/1","o":{"t":"T","s":"S","b":"B"},
              "m":[{"u":"https://x.test/a.jpg","k":"image","t":"image/jpeg","c":[0,0,1,0.5],"f":1,"h":1},{"u":"https://x.test/b.mp3","k":"audio"}],
              "c":{"type":"bar","values":[1,2,3]}}}
            """#
        )
        #expect(c.sources == [.richpush])
        #expect(c.media.map(\.url) == ["https://x.test/a.jpg", "https://x.test/b.mp3"])
        #expect(c.media[0].kindHint == .image && c.media[0].hintedType == .jpeg)
        #expect(
            c.media[0].thumbnail
                == PushMedia.Thumbnail(crop: UnitRect(x: 0, y: 0, width: 1, height: 0.5), time: 1, hidden: true)
        )
        #expect(c.media[1].kindHint == .audio)
        #expect(c.chart?.kind == .bar && c.chart?.series.first?.values == [1, 2, 3])
        #expect(c.contentOverride == .init(title: "T", subtitle: "S", body: "B"))
        #expect(c.deepLink == "app://o/1")
        #expect(c.notificationID == "n-1")
        #expect(c.problems.isEmpty)
    }

    @Test func whatTheAPNsRendererWritesIsReadBack() throws {
        let m = try Fixtures.message(
            #"""
            {"title":"t","id":"n","media":[{"url":"https://x.test/a.gif","kind":"image","thumbnail":{"time":3}}],"chart":{"values":[4,5]},
             "content_override":{"body":"b2"},"deep_link":"app://x"}
            """#
        )
        let c = ReceivedPayloadDecoder.decode(APNsRenderer.payload(for: m))
        #expect(
            c.media == [
                ReceivedMedia(
                    url: "https://x.test/a.gif",
                    kindHint: .image,
                    thumbnail: .init(time: 3),
                    source: .richpush
                )
            ]
        )
        #expect(c.chart == m.chart)
        #expect(c.contentOverride?.body == "b2")
        #expect(c.deepLink == "app://x" && c.notificationID == "n")
        // Through FCM, our key sits in apns.payload and arrives at the top level of userInfo, beside fcm_options.
        let fcm = FCMRenderer(projectID: "p").render(m, to: .token("t")).body
        guard case .object(var userInfo) = fcm["message"]?["apns"]?["payload"] else {
            Issue.record("no payload")
            return
        }
        userInfo["fcm_options"] = fcm["message"]?["apns"]?["fcm_options"]
        let viaFCM = ReceivedPayloadDecoder.decode(.object(userInfo))
        #expect(viaFCM.sources == [.richpush, .fcm])
        #expect(viaFCM.media.count == 1)  // the same URL from both keys is fetched once
    }

    @Test func theReceiptAddressIsCarriedWithRichContentOnly() throws {
        var m = try Fixtures.message(
            #"{"title":"t","id":"n","media":"https://x.test/a.jpg","receipt_url":"https://push.example.com/v1/receipts/n.sig"}"#
        )
        #expect(m.receiptURL == "https://push.example.com/v1/receipts/n.sig")
        #expect(try PushMessage.decode(m.json).receiptURL == m.receiptURL)  // kept when the server stores the message
        let payload = APNsRenderer.payload(for: m)
        #expect(payload["rp"]?["r"] == "https://push.example.com/v1/receipts/n.sig")
        #expect(ReceivedPayloadDecoder.decode(payload).receiptURL == m.receiptURL)
        // Through FCM too (in the APNs part, which is what an iPhone receives).
        let fcm = FCMRenderer(projectID: "p").render(m, to: .token("t")).body
        #expect(fcm["message"]?["apns"]?["payload"]?["rp"]?["r"] == "https://push.example.com/v1/receipts/n.sig")
        // Nothing for the extension to do, no `rp`, no receipt.
        m.media = []
        #expect(APNsRenderer.payload(for: m)["rp"] == nil)
        // A receipt address that is not http(s) is a problem, not an address.
        let bad = ReceivedPayloadDecoder.decode([
            "aps": ["alert": "x"], "rp": ["v": 1, "m": ["https://x.test/a.jpg"], "r": "javascript:alert(1)"],
        ])
        #expect(bad.receiptURL == nil && bad.problems.contains { $0.path == "rp.r" && $0.code == "url" })
    }

    @Test func fcm() throws {
        let c = try decode(
            #"{"aps":{"alert":{"title":"t"},"mutable-content":1},"fcm_options":{"image":"https://x.test/p.png"},"gcm.message_id":"1"}"#
        )
        #expect(c.media == [ReceivedMedia(url: "https://x.test/p.png", kindHint: .image, source: .fcm)])
    }

    @Test func braze() throws {
        let c = try decode(#"{"ab":{"att":{"url":"https://x.test/v","type":"mp4"}},"ab_uri":"app://deal"}"#)
        #expect(c.media == [ReceivedMedia(url: "https://x.test/v", kindHint: .video, typeHint: "mp4", source: .braze)])
        #expect(c.media[0].hintedType == .mp4)
        #expect(c.deepLink == "app://deal")
    }

    @Test func oneSignalInEveryForm() throws {
        let top = try decode(
            #"{"att":{"id2":"https://x.test/2.jpg","id1":"https://x.test/1.jpg"},"custom":{"i":"abc","u":"https://o.test"}}"#
        )
        #expect(top.media.map(\.url) == ["https://x.test/1.jpg", "https://x.test/2.jpg"])
        #expect(top.deepLink == "https://o.test")
        let nested = try decode(#"{"os_data":{"att":{"id":"https://x.test/n.gif"},"custom":{"u":"app://n"}}}"#)
        #expect(nested.media.map(\.url) == ["https://x.test/n.gif"] && nested.deepLink == "app://n")
        let short = try decode(#"{"at":{"i":"https://x.test/s.png"}}"#)
        #expect(short.media.map(\.url) == ["https://x.test/s.png"] && short.sources == [.onesignal])
    }

    @Test func airshipWithThumbnailOptionsAndContent() throws {
        let c = try decode(
            #"""
            {"com.urbanairship.media_attachment":{"urls":[{"url":"https://x.test/a.jpg","url_id":"a"},{"url":"https://x.test/b.jpg","url_id":"b"}],
              "thumbnail_id":"b","options":{"crop":{"x":0.25,"y":0.25,"width":0.5,"height":0.5},"time":2,"hidden":false},
              "content":{"title":"AT","subtitle":"AS","body":"AB"}},"^d":"app://air"}
            """#
        )
        #expect(c.media.map(\.url) == ["https://x.test/b.jpg", "https://x.test/a.jpg"])
        #expect(
            c.media[0].thumbnail
                == .init(crop: UnitRect(x: 0.25, y: 0.25, width: 0.5, height: 0.5), time: 2, hidden: false)
        )
        #expect(c.media[1].thumbnail == nil)
        #expect(c.contentOverride == .init(title: "AT", subtitle: "AS", body: "AB"))
        #expect(c.deepLink == "app://air")
        let single = try decode(#"{"com.urbanairship.media_attachment":{"url":"https://x.test/one.mp4"}}"#)
        #expect(single.media.map(\.url) == ["https://x.test/one.mp4"])
        let list = try decode(
            #"{"com.urbanairship.media_attachment":{"url":["https://x.test/1.png","https://x.test/2.png"]}}"#
        )
        #expect(list.media.count == 2)
    }

    @Test func cleverTapIterableCustomerIOKlaviyoPushwoosh() throws {
        let ct = try decode(#"{"ct_mediaUrl":"https://x.test/c.gif","ct_mediaType":"gif","wzrk_dl":"app://ct"}"#)
        #expect(
            ct.media == [
                ReceivedMedia(url: "https://x.test/c.gif", kindHint: .image, typeHint: "gif", source: .clevertap)
            ] && ct.deepLink == "app://ct"
        )
        let it = try decode(#"{"itbl":{"attachment-url":"https://x.test/i.jpg","defaultAction":{"type":"openUrl"}}}"#)
        #expect(it.media.map(\.url) == ["https://x.test/i.jpg"] && it.sources == [.iterable])
        let cio = try decode(#"{"CIO":{"push":{"image":"https://x.test/cio.png","link":"app://cio"}}}"#)
        #expect(cio.media.map(\.url) == ["https://x.test/cio.png"] && cio.deepLink == "app://cio")
        let kl = try decode(#"{"rich-media":"https://x.test/k","rich-media-type":"png","body":{}}"#)
        #expect(
            kl.media == [ReceivedMedia(url: "https://x.test/k", kindHint: .image, typeHint: "png", source: .klaviyo)]
        )
        let pw = try decode(#"{"attachment":"https://x.test/pw.jpg"}"#)
        #expect(pw.sources == [.pushwoosh])
    }

    @Test(arguments: [
        (#"{"rp":null}"#, 0, ""),
        (#"{"rp":5}"#, 0, "rp|type"),
        (#"{"rp":{"m":"https://x.test/a.jpg"}}"#, 0, "rp.m|type"),
        (#"{"rp":{"m":[null,7,{"u":null},{"u":""},{"u":"  "},{"u":42}]}}"#, 0, "rp.m[1]|type"),
        (#"{"rp":{"m":[{"u":"https://x.test/a.jpg","c":[0,0,2,2]}]}}"#, 1, "rp.m[0].c|bad-crop"),
        (#"{"rp":{"m":[{"u":"https://x.test/a.jpg","c":"wide"}]}}"#, 1, "rp.m[0].c|bad-crop"),
        (#"{"rp":{"c":{"values":"nope"}}}"#, 0, "rp.c|bad-chart"),
        (#"{"rp":{"v":99,"m":[{"u":"https://x.test/a.jpg"}]}}"#, 1, "rp.v|newer-version"),
        (#"{"fcm_options":{"image":null}}"#, 0, ""),
        (#"{"fcm_options":{"image":""}}"#, 0, "fcm_options.image|empty"),
        (#"{"fcm_options":{"image":["https://x.test/a.jpg"]}}"#, 0, "fcm_options.image|type"),
        (#"{"fcm_options":"junk"}"#, 0, "fcm_options|type"),
        (#"{"fcm_options":{"image":"javascript:alert(1)"}}"#, 0, "fcm_options.image|url-scheme"),
        (#"{"fcm_options":{"image":"file:///etc/passwd"}}"#, 0, "fcm_options.image|url-scheme"),
        (#"{"fcm_options":{"image":"ftp://x.test/a.jpg"}}"#, 0, "fcm_options.image|url-scheme"),
        (#"{"fcm_options":{"image":"/relative/a.jpg"}}"#, 0, "fcm_options.image|url"),
        (#"{"ab":{"att":{"url":17,"type":"jpg"}}}"#, 0, "ab.att.url|type"),
        (#"{"ab":{"att":null}}"#, 0, ""),
        (#"{"ab":[]}"#, 0, "ab|type"),
        (#"{"att":[1,2]}"#, 0, "att|type"),
        (#"{"att":{"id":null,"id2":5,"id3":"https://x.test/ok.jpg"}}"#, 1, "att.id2|type"),
        (
            #"{"com.urbanairship.media_attachment":{"url":{"nested":1}}}"#, 0,
            "com.urbanairship.media_attachment.url|type"
        ),
        (
            #"{"com.urbanairship.media_attachment":{"urls":[{"url":3},"x"]}}"#, 0,
            "com.urbanairship.media_attachment.urls[0].url|type"
        ),
        (
            #"{"com.urbanairship.media_attachment":{"url":"https://x.test/a.jpg","options":{"time":"soon"}}}"#, 1,
            "com.urbanairship.media_attachment.options.time|type"
        ),
        (#"{"ct_mediaUrl":true}"#, 0, "ct_mediaUrl|type"),
        (#"{"itbl":{"attachment-url":{}}}"#, 0, "itbl.attachment-url|type"),
        (#"{"CIO":{"push":"x"}}"#, 0, "CIO.push|type"),
        (#"{"rich-media":null,"rich-media-type":7}"#, 0, ""),
    ])
    func hostileValuesBecomeProblemsNotCrashes(_ json: String, _ mediaCount: Int, _ problem: String) throws {
        let c = try decode(json)
        #expect(c.media.count == mediaCount)
        if !problem.isEmpty {
            #expect(c.problems.map { "\($0.path)|\($0.code)" }.contains(problem), "got \(c.problems)")
        }
    }

    @Test func aStringHoldingJSONIsReadAsTheObject() throws {
        // FCM data values are strings, so some senders serialize their objects.
        let c = try decode(#"{"rp":"{\"v\":1,\"m\":[{\"u\":\"https://x.test/a.jpg\"}]}"}"#)
        #expect(c.media.map(\.url) == ["https://x.test/a.jpg"])
    }

    @Test func theSameURLFromTwoProvidersIsFetchedOnce() throws {
        let c = try decode(
            #"{"fcm_options":{"image":"https://x.test/a.jpg"},"ab":{"att":{"url":"https://x.test/a.jpg"}},"att":{"x":"https://x.test/b.jpg"}}"#
        )
        #expect(c.media.map(\.url) == ["https://x.test/a.jpg", "https://x.test/b.jpg"])
        #expect(c.sources == [.fcm, .braze, .onesignal])
    }

    @Test func notAnObject() {
        #expect(ReceivedPayloadDecoder.decode(.array([])).problems.first?.code == "type")
    }

    @Test func readsFoundationUserInfo() {
        let userInfo: [AnyHashable: Any] = [
            "aps": ["alert": "x", "mutable-content": NSNumber(value: 1)],
            "ab": ["att": ["url": "https://x.test/a.png", "type": "png"]],
            "when": Date(), 7: "non-string key",
        ]
        let c = ReceivedPayloadDecoder.decode(userInfo: userInfo)
        #expect(c.media.map(\.url) == ["https://x.test/a.png"])
        #expect(c.problems.map(\.path) == ["when"])
    }

    @Test func randomGarbageAtEveryProviderKeyNeverCrashes() {
        var rng = SeededRandom(seed: 42)
        let keys = [
            "rp", "m", "u", "c", "o", "fcm_options", "image", "ab", "att", "url", "at", "os_data",
            "com.urbanairship.media_attachment",
            "urls", "url_id", "thumbnail_id", "options", "crop", "content", "ct_mediaUrl", "itbl", "attachment-url",
            "CIO", "push", "rich-media",
        ]
        for _ in 0..<5000 {
            _ = ReceivedPayloadDecoder.decode(rng.jsonValue(depth: 4, keys: keys))
        }
    }
}
