import Foundation
import RichPushTestSupport
import Testing

@testable import RichPushCore

@Suite struct ValidationTests {
    let validator = MessageValidator(options: .init(now: Fixtures.fixedNow))

    func check(_ json: String, _ options: MessageValidator.Options? = nil) throws -> Set<String> {
        let v = options.map { MessageValidator(options: $0) } ?? validator
        return Fixtures.rules(v.validate(json: try JSONValue.parse(json)))
    }

    let target = #""targets":{"apns_tokens":["5a4e1c0f9d8b7a6e5d4c3b2a19080706f5e4d3c2b1a09f8e7d6c5b4a39281706"]}"#

    @Test func aGoodMessageHasNoIssues() throws {
        #expect(try check(#"{"title":"t","media":"https://x.test/a.jpg",\#(target)}"#).isEmpty)
    }

    @Test func aReceiptAddressMustBeHTTPS() throws {
        #expect(
            try check(
                #"{"title":"t","media":"https://x.test/a.jpg","receipt_url":"https://push.example.com/v1/receipts/n.s",\#(target)}"#
            ).isEmpty
        )
        #expect(
            try check(#"{"title":"t","receipt_url":"http://push.example.com/v1/receipts/n.s",\#(target)}"#) == [
                "receipt_url|https-required"
            ]
        )
        #expect(
            try check(#"{"title":"t","receipt_url":"/v1/receipts/n.s",\#(target)}"#) == ["receipt_url|https-required"]
        )
        #expect(
            try check(
                #"{"title":"t","receipt_url":"http://127.0.0.1:8080/v1/receipts/n.s",\#(target)}"#,
                .init(allowInsecureMedia: true, now: Fixtures.fixedNow)
            ).isEmpty
        )
    }

    @Test func fiveMistakesAreAllReportedAtOnce() throws {
        let rules = try check(
            #"""
            {"title":"Sale","media":[{"url":"http://x.test/a.jpg"},{"url":"https://x.test/b.webp"}],"ttl":3000000,
             "targets":{"apns_tokens":["not-hex"],"condition":"'a' in topics || 'b' in topics || 'c' in topics || 'd' in topics || 'e' in topics || 'f' in topics"}}
            """#
        )
        #expect(
            rules == [
                "media[0].url|https-required", "media[1].url|apple-unsupported-type", "ttl|range",
                "targets.apns_tokens[0]|apns-token", "targets.condition|condition-topics",
            ]
        )
    }

    @Test(arguments: [
        (#"{"tittle":"t"}"#, "tittle|unknown-field"),
        (#"{"title":5}"#, "title|type"),
        (#"{"title":""}"#, "title|empty"),
        (#"{"body":"b","badge":"1"}"#, "badge|type"),
        (#"{"body":"b","badge":1.5}"#, "badge|type"),
        (#"{"body":"b","media":42}"#, "media|type"),
        (#"{"body":"b","media":[{"kind":"image"}]}"#, "media[0].url|required"),
        (#"{"body":"b","media":[{"url":"https://x.test/a.jpg","kind":"hologram"}]}"#, "media[0].kind|enum"),
        (#"{"body":"b","push_type":"banner"}"#, "push_type|enum"),
        (#"{"body":"b","priority":"urgent"}"#, "priority|enum"),
        (#"{"body":"b","priority":7}"#, "priority|enum"),
        (#"{"body":"b","interruption_level":"loud"}"#, "interruption_level|enum"),
        (#"{"body":"b","targets":{"apns_tokens":[7]}}"#, "targets.apns_tokens[0]|type"),
        (#"{"body":"b","data":[1]}"#, "data|type"),
        (#"{"body":"b","chart":{"values":[1,"x"]}}"#, "chart.values[1]|type"),
    ])
    func shapeProblemsNameTheField(_ json: String, _ expected: String) throws {
        #expect(try check(json).contains(expected))
    }

    @Test(arguments: [
        (#"{"media":"https://x.test/a.jpg"}"#, "alert|media-needs-alert"),
        (#"{"title":"t","push_type":"voip","media":"https://x.test/a.jpg"}"#, "push_type|media-needs-alert-push"),
        (#"{"push_type":"background","content_available":true,"priority":"high"}"#, "priority|background-priority"),
        (#"{"push_type":"background","title":"t"}"#, "push_type|background-content"),
        (#"{"content_available":true,"priority":"high"}"#, "priority|high-priority-needs-alert"),
        (#"{"data":{"a":"b"}}"#, "alert|empty-notification"),
        (#"{"alert":{"title_loc_args":["x"]},"body":"b"}"#, "alert.title_loc_args|loc-args-need-key"),
        (#"{"alert":{"loc_args":["x"]},"body":"b"}"#, "alert.loc_args|loc-args-need-key"),
        (#"{"alert":{"subtitle_loc_args":["x"]},"body":"b"}"#, "alert.subtitle_loc_args|loc-args-need-key"),
        (#"{"body":"b","badge":-1}"#, "badge|range"),
        (#"{"body":"b","sound":{"name":"x","critical":true,"volume":2}}"#, "sound.volume|range"),
        (#"{"body":"b","relevance_score":3}"#, "relevance_score|range"),
        (#"{"body":"b","id":"order-1"}"#, "id|not-a-uuid"),
        (#"{"body":"b","deep_link":"no scheme"}"#, "deep_link|url"),
        (#"{"body":"b","analytics_label":"has space"}"#, "analytics_label|analytics-label"),
        (#"{"body":"b","ttl":-1}"#, "ttl|range"),
        (#"{"body":"b","ttl":2419201}"#, "ttl|range"),
        (#"{"body":"b","ttl":5,"expiration":1800000000}"#, "ttl|exclusive"),
        (#"{"body":"b","expiration":1600000000}"#, "expiration|in-past"),
        (#"{"body":"b","collapse_id":"ééééééééééééééééééééééééééééééééé"}"#, "collapse_id|max-bytes"),
        (#"{"body":"b"}"#, "targets|required"),
        (#"{"body":"b","targets":{"topic":"a","condition":"'b' in topics"}}"#, "targets|exclusive"),
        (#"{"body":"b","targets":{"apns_tokens":["abc"]}}"#, "targets.apns_tokens[0]|apns-token"),
        (#"{"body":"b","targets":{"apns_tokens":["zz"]}}"#, "targets.apns_tokens[0]|apns-token"),
        (#"{"body":"b","targets":{"fcm_tokens":["has space"]}}"#, "targets.fcm_tokens[0]|fcm-token"),
        (#"{"body":"b","targets":{"fcm_tokens":["dup_token_1","dup_token_1"]}}"#, "targets.fcm_tokens[1]|duplicate"),
        (#"{"body":"b","targets":{"topic":"bad topic!"}}"#, "targets.topic|topic-name"),
        (#"{"body":"b","targets":{"condition":"'a' in topics &&"}}"#, "targets.condition|condition-syntax"),
        (#"{"body":"b","targets":{"condition":"'a' in topic"}}"#, "targets.condition|condition-syntax"),
        (#"{"body":"b","targets":{"condition":"('a' in topics"}}"#, "targets.condition|condition-syntax"),
        (#"{"body":"b","data":{"from":"x"}}"#, "data.from|reserved-key"),
        (#"{"body":"b","data":{"google.x":"x"}}"#, "data.google.x|reserved-key"),
        (#"{"body":"b","data":{"gcm.notification.x":"x"}}"#, "data.gcm.notification.x|reserved-key"),
        (#"{"body":"b","data":{"aps":"x"}}"#, "data.aps|reserved-key"),
        (#"{"body":"b","data":{"rp":"x"}}"#, "data.rp|reserved-key"),
        (#"{"body":"b","data":{"":"x"}}"#, "data|empty-key"),
        (#"{"body":"b","media":"http://x.test/a.jpg"}"#, "media[0].url|https-required"),
        (#"{"body":"b","media":"ftp://x.test/a.jpg"}"#, "media[0].url|url-scheme"),
        (#"{"body":"b","media":"/relative/a.jpg"}"#, "media[0].url|url"),
        (#"{"body":"b","media":"https://x.test/a.heic"}"#, "media[0].url|apple-unsupported-type"),
        (#"{"body":"b","media":"https://x.test/page.html"}"#, "media[0].url|apple-unsupported-type"),
        (#"{"body":"b","media":"https://x.test/image?id=4"}"#, "media[0].url|no-file-type"),
        (#"{"body":"b","media":[{"url":"https://x.test/a.mp3","kind":"image"}]}"#, "media[0].kind|kind-mismatch"),
        (#"{"body":"b","media":[{"url":"https://x.test/a","type":"image/x-unknown"}]}"#, "media[0].type|unknown-type"),
        (
            #"{"body":"b","media":[{"url":"https://x.test/a.jpg","thumbnail":{"crop":{"x":0.5,"y":0,"width":0.6,"height":1}}}]}"#,
            "media[0].thumbnail.crop|unit-rect"
        ),
        (
            #"{"body":"b","media":[{"url":"https://x.test/a.jpg","thumbnail":{"crop":{"x":-0.1,"y":0,"width":0.5,"height":1}}}]}"#,
            "media[0].thumbnail.crop|unit-rect"
        ),
        (
            #"{"body":"b","media":[{"url":"https://x.test/a.gif","thumbnail":{"time":-1}}]}"#,
            "media[0].thumbnail.time|range"
        ),
        (
            #"{"body":"b","media":["https://a.test/1.jpg","https://a.test/2.jpg","https://a.test/3.jpg","https://a.test/4.jpg","https://a.test/5.jpg","https://a.test/6.jpg","https://a.test/7.jpg","https://a.test/8.jpg","https://a.test/9.jpg"]}"#,
            "media|max-media"
        ),
        (#"{"body":"b","chart":{"values":[]}}"#, "chart.series[0].values|empty"),
        (#"{"body":"b","chart":{"values":[1],"scale":4}}"#, "chart.scale|enum"),
        (#"{"body":"b","chart":{"values":[1],"y":[5,1]}}"#, "chart.y|range"),
        (#"{"body":"b","chart":{"values":[1],"color":"red"}}"#, "chart.color|color"),
        (#"{"body":"b","chart":{"values":[1],"size":[4000,10]}}"#, "chart.size|range"),
    ])
    func ruleProblemsNameTheFieldAndRule(_ json: String, _ expected: String) throws {
        let rules = try check(json)
        #expect(rules.contains(expected), "got \(rules.sorted())")
    }

    @Test func warningsDoNotMakeAMessageInvalid() throws {
        let report = validator.validate(
            json: try JSONValue.parse(#"{"body":"b","id":"x","media":"https://x.test/img?id=1",\#(target)}"#)
        )
        #expect(report.isValid)
        #expect(report.warnings.count == 2)
    }

    @Test func httpMediaIsAcceptedWhenAllowed() throws {
        #expect(
            try check(#"{"title":"t","media":"http://x.test/a.jpg",\#(target)}"#, .init(allowInsecureMedia: true))
                .isEmpty
        )
    }

    @Test func strictTokenLengthIsOptional() throws {
        let short = #"{"body":"b","targets":{"apns_tokens":["00112233445566778899aabbccddeeff"]}}"#
        #expect(try check(short).isEmpty)
        #expect(try check(short, .init(strictAPNsTokenLength: true)).contains("targets.apns_tokens[0]|apns-token"))
    }

    @Test func conditionsWithFiveTopicsAndNestingAreAccepted() throws {
        let c = try FCMCondition.parse(
            "'a' in topics && ('b' in topics || !(\"c\" in topics)) || 'd~%.-_' in topics && !'e' in topics"
        )
        #expect(c.topics == ["a", "b", "c", "d~%.-_", "e"])
        #expect(throws: FCMCondition.ParseError.self) { try FCMCondition.parse("") }
        #expect(throws: FCMCondition.ParseError.self) { try FCMCondition.parse("'a' in topics 'b' in topics") }
        #expect(throws: FCMCondition.ParseError.self) { try FCMCondition.parse("'a b' in topics") }
    }

    // MARK: - Payload size, on the exact bytes

    /// A message whose APNs payload is exactly `bytes` long, by padding the body.
    func apnsMessage(bytes: Int, type: PushType) -> PushMessage {
        var m = PushMessage(alert: .init(body: ""), pushType: type, targets: .init(apnsTokens: [Fixtures.token]))
        let base = APNsRenderer.payload(for: m).serializedSize
        m.alert.body = String(repeating: "a", count: bytes - base)
        #expect(APNsRenderer.payload(for: m).serializedSize == bytes)
        return m
    }

    @Test(arguments: [(PushType.alert, 4096), (.voip, 5120)])
    func apnsLimitIsExactPerPushType(_ type: PushType, _ limit: Int) {
        let ok = validator.validate(apnsMessage(bytes: limit, type: type))
        #expect(!Fixtures.rules(ok).contains("|payload-too-large"))
        let over = validator.validate(apnsMessage(bytes: limit + 1, type: type))
        #expect(Fixtures.rules(over).contains("|payload-too-large"))
    }

    @Test func multibyteTextCountsInBytes() {
        var m = apnsMessage(bytes: 4096, type: .alert)
        m.alert.body = String(m.alert.body!.dropLast(1)) + "é"  // one character more byte
        #expect(Fixtures.rules(validator.validate(m)).contains("|payload-too-large"))
    }

    @Test func fcmAllowsLessForTopicsThanForTokens() throws {
        func message(size: Int, target: PushMessage.Targets) -> PushMessage {
            var m = PushMessage(alert: .init(body: ""), targets: target)
            let fcm = FCMRenderer(projectID: "p")
            let t: FCMTarget = target.topic.map { .topic($0) } ?? .token("t")
            let base = fcm.render(m, to: t).payloadSize
            m.alert.body = String(repeating: "b", count: size - base)
            #expect(fcm.render(m, to: t).payloadSize == size)
            return m
        }
        let topic = PushMessage.Targets(topic: "news")
        let tokens = PushMessage.Targets(fcmTokens: [Fixtures.fcmToken])
        #expect(!Fixtures.rules(validator.validate(message(size: 2048, target: topic))).contains("|payload-too-large"))
        #expect(Fixtures.rules(validator.validate(message(size: 2049, target: topic))).contains("|payload-too-large"))
        #expect(!Fixtures.rules(validator.validate(message(size: 2049, target: tokens))).contains("|payload-too-large"))
        #expect(Fixtures.rules(validator.validate(message(size: 4097, target: tokens))).contains("|payload-too-large"))
    }

    @Test func aHostileDocumentNeverCrashesTheValidator() throws {
        var rng = SeededRandom(seed: 7)
        for _ in 0..<2000 {
            let value = rng.jsonValue(depth: 3, keys: Array(PushMessage.knownKeys) + ["url", "values", "crop", "x"])
            _ = validator.validate(json: value)
        }
    }
}

/// Random documents, the same on every run.
extension SeededRandom {
    mutating func jsonValue(depth: Int, keys: [String]) -> JSONValue {
        let pick = Int.random(in: 0..<(depth > 0 ? 9 : 6), using: &self)
        switch pick {
        case 0: return .null
        case 1: return .bool(Bool.random(using: &self))
        case 2: return .int(Int64.random(in: -5...5, using: &self))
        case 3: return .double(Double.random(in: -2...2, using: &self))
        case 4:
            return .string(
                ["", " ", "https://x.test/a.jpg", "http://[::1]/x", "javascript:alert(1)", "é", "#FFF", "line"]
                    .randomElement(using: &self)!
            )
        case 5: return .string(String(repeating: "x", count: Int.random(in: 0...40, using: &self)))
        case 6, 7:
            var o: [String: JSONValue] = [:]
            for _ in 0..<Int.random(in: 0...5, using: &self) {
                o[keys.randomElement(using: &self)!] = jsonValue(depth: depth - 1, keys: keys)
            }
            return .object(o)
        default:
            return .array(
                (0..<Int.random(in: 0...4, using: &self)).map { _ in jsonValue(depth: depth - 1, keys: keys) }
            )
        }
    }
}
