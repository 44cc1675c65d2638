import Foundation
import Testing

@testable import RichPushCore

/// A Live Activity message: read, checked rule by rule, rendered for APNs and FCM, its chart decoded on device.
@Suite struct LiveActivityTests {
    let validator = MessageValidator(options: .init(now: Fixtures.fixedNow))
    let renderer = APNsRenderer(bundleID: "com.example.app", now: Fixtures.fixedNow)
    let target = #""targets":{"apns_tokens":["\#(Fixtures.token)"]}"#
    let now: Int64 = 1_700_000_000

    func rules(_ json: String) throws -> Set<String> {
        Fixtures.rules(validator.validate(json: try JSONValue.parse(json)))
    }

    @Test func anUpdateRendersTheDocumentedHeadersAndAps() throws {
        let m = try Fixtures.message(
            #"{"title":"Goal","body":"2 – 1","collapse_id":"match-7","live_activity":{"event":"update","content_state":{"home":2,"away":1},"stale_date":1700000600,"relevance_score":50,"timestamp":1699999990},\#(target)}"#
        )
        #expect(m.pushType == .liveactivity)
        #expect(validator.validate(m).isValid)
        let r = renderer.render(m, deviceToken: Fixtures.token)
        #expect(r.header("apns-push-type") == "liveactivity")
        #expect(r.header("apns-topic") == "com.example.app.push-type.liveactivity")
        #expect(r.header("apns-collapse-id") == "match-7")
        let expected: JSONValue = [
            "aps": [
                "event": "update", "timestamp": 1_699_999_990, "content-state": ["home": 2, "away": 1],
                "stale-date": 1_700_000_600, "relevance-score": 50.0, "alert": ["title": "Goal", "body": "2 – 1"],
            ]
        ]
        #expect(r.payload == expected)
        #expect(r.payload["rp"] == nil)
    }

    @Test func aTimestampLeftOutIsTheRenderTime() throws {
        let m = try Fixtures.message(#"{"live_activity":{"event":"end","content_state":{}},\#(target)}"#)
        #expect(renderer.render(m, deviceToken: Fixtures.token).payload["aps"]?["timestamp"] == .int(now))
    }

    @Test func aPushToStartCarriesItsAttributesAndAsksForAToken() throws {
        let m = try Fixtures.message(
            #"{"title":"Delivery","body":"On its way","sound":"chime.aiff","live_activity":{"event":"start","attributes_type":"DeliveryAttributes","attributes":{"order":"A-17"},"content_state":{"eta":12},"input_push_token":true},\#(target)}"#
        )
        #expect(validator.validate(m).isValid)
        let aps = renderer.render(m, deviceToken: Fixtures.token).payload["aps"]
        #expect(aps?["attributes-type"] == "DeliveryAttributes")
        #expect(aps?["attributes"] == ["order": "A-17"])
        #expect(aps?["input-push-token"] == 1)
        #expect(aps?["sound"] == "chime.aiff")
        #expect(aps?["event"] == "start")
    }

    @Test func anEndMayCarryItsDismissalDate() throws {
        let m = try Fixtures.message(
            #"{"live_activity":{"event":"end","content_state":{"final":true},"dismissal_date":1700003600},\#(target)}"#
        )
        #expect(validator.validate(m).isValid)
        #expect(renderer.render(m, deviceToken: Fixtures.token).payload["aps"]?["dismissal-date"] == 1_700_003_600)
    }

    @Test func aChartTravelsInTheContentStateAndNeedsNoExtension() throws {
        let m = try Fixtures.message(
            #"{"live_activity":{"event":"update","content_state":{"price":"$12"}},"chart":{"values":[3,1,4,1,5]},\#(target)}"#
        )
        #expect(!m.needsServiceExtension)
        #expect(validator.validate(m).isValid)
        let aps = renderer.render(m, deviceToken: Fixtures.token).payload["aps"]
        #expect(aps?["content-state"]?["chart"] == ["values": [3, 1, 4, 1, 5]])
        #expect(aps?["content-state"]?["price"] == "$12")
        #expect(aps?["mutable-content"] == nil)
    }

    @Test func everyRuleIsNamed() throws {
        let bad: [(String, String)] = [
            (#"{"live_activity":{"content_state":{}}}"#, "live_activity.event|required"),
            (#"{"live_activity":{"event":"pause","content_state":{}}}"#, "live_activity.event|enum"),
            (#"{"live_activity":{"event":"update"}}"#, "live_activity.content_state|needs-content-state"),
            (
                #"{"title":"t","live_activity":{"event":"start","content_state":{},"attributes":{}}}"#,
                "live_activity.attributes_type|start-needs-attributes-type"
            ),
            (
                #"{"title":"t","live_activity":{"event":"start","content_state":{},"attributes_type":"A"}}"#,
                "live_activity.attributes|start-needs-attributes"
            ),
            (
                #"{"live_activity":{"event":"start","content_state":{},"attributes_type":"A","attributes":{}}}"#,
                "alert|start-needs-alert"
            ),
            (
                #"{"title":"t","live_activity":{"event":"start","content_state":{},"attributes_type":"A","attributes":{},"input_push_token":true,"input_push_channel":"c"}}"#,
                "live_activity.input_push_channel|token-or-channel"
            ),
            (
                #"{"live_activity":{"event":"update","content_state":{},"attributes_type":"A"}}"#,
                "live_activity.attributes|start-only"
            ),
            (
                #"{"live_activity":{"event":"update","content_state":{},"input_push_channel":"c"}}"#,
                "live_activity.input_push_token|start-only"
            ),
            (
                #"{"live_activity":{"event":"update","content_state":{},"dismissal_date":1700000000}}"#,
                "live_activity.dismissal_date|end-only"
            ),
            (#"{"live_activity":{"event":"end","timestamp":0}}"#, "live_activity.timestamp|range"),
            (#"{"live_activity":{"event":"end","timestamp":1700030000}}"#, "live_activity.timestamp|future"),
            (#"{"live_activity":{"event":"end","stale_date":-5}}"#, "live_activity.stale_date|range"),
            (#"{"live_activity":{"event":"end","relevance_score":-1}}"#, "live_activity.relevance_score|range"),
            (#"{"live_activity":{"event":"end"},"push_type":"alert","body":"x"}"#, "push_type|live-activity-push-type"),
            (#"{"live_activity":{"event":"end"},"priority":"low"}"#, "priority|live-activity-priority"),
            (
                #"{"title":"t","live_activity":{"event":"end"},"media":"https://x.test/a.png"}"#,
                "media|live-activity-media"
            ),
            (#"{"live_activity":{"event":"end"},"relevance_score":0.5}"#, "relevance_score|live-activity-relevance"),
            (
                #"{"live_activity":{"event":"end"},"content_available":true}"#,
                "content_available|live-activity-content-available"
            ),
            (#"{"push_type":"liveactivity","body":"x"}"#, "live_activity|required"),
            (#"{"live_activity":{"event":"end","colour":"red"}}"#, "live_activity.colour|unknown-field"),
        ]
        for (json, rule) in bad {
            let found = try rules(String(json.dropLast()) + ",\(target)}")
            #expect(found.contains(rule), "\(json): \(found.sorted())")
        }
    }

    @Test func aContentStateOverFourKilobytesIsRefused() throws {
        let big = String(repeating: "x", count: 4100)
        let found = try rules(#"{"live_activity":{"event":"update","content_state":{"s":"\#(big)"}},\#(target)}"#)
        #expect(found.contains("live_activity.content_state|max-bytes"))
    }

    @Test func theJSONFormReadsBackTheSame() throws {
        let m = try Fixtures.message(
            #"{"title":"t","body":"b","live_activity":{"event":"start","attributes_type":"A","attributes":{"k":1},"content_state":{"s":2},"stale_date":5,"relevance_score":1.5,"timestamp":7,"input_push_channel":"ch"}}"#
        )
        #expect(try PushMessage.decode(m.json) == m)
        #expect(m.json["push_type"] == nil)
    }

    @Test func androidShowsOneNotificationReplacedByTag() throws {
        let fcm = FCMRenderer(projectID: "p", now: Fixtures.fixedNow)
        let tagged = try Fixtures.message(
            #"{"title":"Goal","collapse_id":"match-7","live_activity":{"event":"update","content_state":{}}}"#
        )
        let body = fcm.render(tagged, to: .token(Fixtures.fcmToken)).body
        #expect(body["message"]?["android"]?["notification"]?["tag"] == "match-7")
        let untagged = try Fixtures.message(#"{"title":"Goal","live_activity":{"event":"update","content_state":{}}}"#)
        let plain = fcm.render(untagged, to: .token(Fixtures.fcmToken)).body
        #expect(plain["message"]?["android"]?["notification"]?["tag"] == .string(LiveActivity.defaultAndroidTag))
    }

    @Test func theDeviceDecodesTheChartIntoPointsAWidgetDraws() throws {
        struct ContentState: Codable {
            var price: String
            var chart: LiveActivityChart?
        }
        let m = try Fixtures.message(
            #"{"live_activity":{"event":"update","content_state":{"price":"$12"}},"chart":{"values":[0,5,10]}}"#
        )
        let aps = renderer.render(m, deviceToken: Fixtures.token).payload["aps"]
        let state = try JSONDecoder().decode(
            ContentState.self,
            from: Data(aps!["content-state"]!.serialized())
        )
        #expect(state.price == "$12")
        let chart = try #require(state.chart)
        #expect(chart.yRange == 0...10)
        #expect(chart.points == [[.init(x: 0, y: 0), .init(x: 0.5, y: 0.5), .init(x: 1, y: 1)]])
        #expect(chart.spec.kind == .line)
        // It writes back what it read.
        let again = try JSONDecoder().decode(LiveActivityChart.self, from: JSONEncoder().encode(chart))
        #expect(again == chart)
    }

    @Test func aBrokenChartIsAnErrorTheAppCanSkip() throws {
        struct ContentState: Codable {
            var chart: LiveActivityChart?
        }
        let data = Data(#"{"chart":{"values":[1,2],"kind":"pie"}}"#.utf8)
        #expect(throws: DecodingError.self) { try JSONDecoder().decode(ContentState.self, from: data) }
        let flat = LiveActivityChart(ChartSpec(kind: .line, series: [.init(values: [3, 3])]))
        #expect(flat.yRange == 2...4)
        #expect(flat.points[0].map(\.y) == [0.5, 0.5])
        // Values at the edge of Double: no NaN, nothing outside the unit square.
        for values in [
            [1e308, 1e308], [-1.7e308, 1.7e308], [1.79e308, 1.79e308], [0, Double.leastNonzeroMagnitude],
        ] {
            let edge = LiveActivityChart(ChartSpec(kind: .line, series: [.init(values: values)]))
            #expect(edge.yRange.lowerBound <= edge.yRange.upperBound)
            #expect(edge.points[0].allSatisfy { (0...1).contains($0.x) && (0...1).contains($0.y) }, "\(values)")
        }
    }
}
