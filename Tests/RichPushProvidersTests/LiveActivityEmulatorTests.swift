import Foundation
import NIOCore
import RichPushCore
import RichPushTransport
import Testing

@testable import RichPushAPNs
@testable import RichPushSandbox

/// Live Activities end to end against the APNs emulator over TLS HTTP/2: push-to-start, updates, ends, the
/// device's ordering rules, refusals, and broadcast channels.
@Suite struct LiveActivityEmulatorTests {
    static let pushToStart = "aa11aa11aa11aa11aa11aa11aa11aa11aa11aa11aa11aa11aa11aa11aa11aa11"
    static let activityToken = "bb22bb22bb22bb22bb22bb22bb22bb22bb22bb22bb22bb22bb22bb22bb22bb22"
    let bundle = "com.example.app"
    let base = APNsClientTests()

    func render(_ json: String, token: String) throws -> APNsRequest {
        APNsRenderer(bundleID: bundle).render(try PushMessage.decode(JSONValue.parse(json)), deviceToken: token)
    }

    func start(_ extra: String = #","input_push_token":true"#, timestamp: Int64) -> String {
        #"{"title":"Order A-17","body":"Preparing","live_activity":{"event":"start","attributes_type":"DeliveryAttributes","attributes":{"order":"A-17"},"content_state":{"eta":20},"timestamp":\#(timestamp)\#(extra)}}"#
    }

    func update(_ eta: Int, timestamp: Int64, event: String = "update") -> String {
        #"{"live_activity":{"event":"\#(event)","content_state":{"eta":\#(eta)},"timestamp":\#(timestamp)}}"#
    }

    @Test func pushToStartThenUpdatesThenEnd() async throws {
        try await base.withSandbox(.init(autoRegisterTokens: false)) { emulator, client in
            emulator.registerDevice(Self.pushToStart, topic: bundle)
            emulator.registerPushToStartToken(Self.pushToStart, attributesType: "DeliveryAttributes")
            let t0 = Int64(Date().timeIntervalSince1970)
            _ = try await client.send(try render(start(timestamp: t0), token: Self.pushToStart))
            let started = try #require(emulator.activities().first)
            #expect(started.attributesType == "DeliveryAttributes")
            #expect(started.attributes == ["order": "A-17"])
            #expect(started.contentState == ["eta": 20])
            let updateToken = try #require(started.updateToken)
            #expect(emulator.recorded(token: Self.pushToStart).first?.topic == "com.example.app.push-type.liveactivity")

            // Updates come to the token the start asked for.
            _ = try await client.send(try render(update(12, timestamp: t0 + 1), token: updateToken))
            _ = try await client.send(try render(update(5, timestamp: t0 + 2), token: updateToken))
            #expect(emulator.activity(updateToken: updateToken)?.contentState == ["eta": 5])
            let end =
                #"{"live_activity":{"event":"end","content_state":{"eta":0},"dismissal_date":\#(t0 + 60),"timestamp":\#(t0 + 3)}}"#
            _ = try await client.send(try render(end, token: updateToken))
            let ended = try #require(emulator.activity(updateToken: updateToken))
            #expect(ended.ended && ended.dismissalDate == t0 + 60 && ended.contentState == ["eta": 0])
            #expect(ended.history == [t0, t0 + 1, t0 + 2, t0 + 3])

            // After the end, nothing more is applied (APNs still accepts the push).
            _ = try await client.send(try render(update(9, timestamp: t0 + 4), token: updateToken))
            #expect(emulator.activity(updateToken: updateToken)?.contentState == ["eta": 0])
            #expect(emulator.liveIgnoredCounts["ended"] == 1)
        }
    }

    @Test func anOlderStateArrivingLateIsIgnoredSoTheDeviceNeverGoesBack() async throws {
        try await base.withSandbox { emulator, client in
            let t0 = Int64(Date().timeIntervalSince1970)
            _ = try await client.send(try render(update(10, timestamp: t0 + 5), token: Self.activityToken))
            // A retry of an earlier state, delivered after a newer one.
            _ = try await client.send(try render(update(30, timestamp: t0 + 2), token: Self.activityToken))
            let a = try #require(emulator.activity(updateToken: Self.activityToken))
            #expect(a.contentState == ["eta": 10] && a.timestamp == t0 + 5)
            #expect(emulator.liveIgnoredCounts["older-timestamp"] == 1)
        }
    }

    @Test func whatTheDeviceIgnoresIsCountedByReason() async throws {
        try await base.withSandbox(.init(autoRegisterTokens: false)) { emulator, client in
            emulator.registerDevice(Self.pushToStart, topic: bundle)
            emulator.registerDevice(Self.activityToken, topic: bundle)
            emulator.registerPushToStartToken(Self.pushToStart, attributesType: "DeliveryAttributes")
            let t = Int64(Date().timeIntervalSince1970)
            // Raw payloads our renderer would never write, sent as another server might.
            func raw(_ aps: String, _ token: String) async throws {
                var r = try render(update(1, timestamp: t), token: token)
                r.body = Array(#"{"aps":\#(aps)}"#.utf8)
                _ = try await client.send(r)
            }
            try await raw(#"{"event":"update","content-state":{}}"#, Self.activityToken)
            try await raw(#"{"timestamp":1,"content-state":{}}"#, Self.activityToken)
            try await raw(#"{"event":"update","timestamp":1,"content-state":{}}"#, Self.activityToken)
            try await raw(
                #"{"event":"start","timestamp":1,"attributes-type":"OtherAttributes","attributes":{},"content-state":{},"alert":{"title":"t"}}"#,
                Self.pushToStart
            )
            try await raw(
                #"{"event":"start","timestamp":1,"attributes-type":"DeliveryAttributes","attributes":{},"content-state":{}}"#,
                Self.pushToStart
            )
            try await raw(
                #"{"event":"start","timestamp":1,"attributes-type":"DeliveryAttributes","content-state":{},"alert":{"title":"t"}}"#,
                Self.pushToStart
            )
            #expect(
                emulator.liveIgnoredCounts == [
                    "no-timestamp": 1, "no-event": 1, "no-activity": 1, "attributes-type-mismatch": 1,
                    "start-without-alert": 1, "start-without-attributes": 1,
                ]
            )
            #expect(emulator.activities().isEmpty)
            #expect(emulator.acceptedCount == 6)
        }
    }

    @Test(arguments: [
        ("topic", "TopicDisallowed"),
        ("priority", "BadPriority"),
        ("size", "PayloadTooLarge"),
    ])
    func apnsRefusesWhatItRefuses(_ what: String, _ reason: String) async throws {
        try await base.withSandbox { emulator, client in
            var r = try render(update(1, timestamp: 1_700_000_000), token: Self.activityToken)
            switch what {
            case "topic": r.headers = r.headers.map { $0.name == "apns-topic" ? ("apns-topic", bundle) : $0 }
            case "priority": r.headers.append(("apns-priority", "1"))
            default:
                r.body = Array(
                    #"{"aps":{"event":"update","timestamp":1,"content-state":{"s":"\#(String(repeating: "x", count: 4100))"}}}"#
                        .utf8
                )
            }
            await #expect(throws: APNsFailure.self) { _ = try await client.send(r) }
            #expect(emulator.rejectedCounts[reason] == 1)
            #expect(emulator.activities().isEmpty)
        }
    }

    /// The channels host is a client of its own (`Endpoint.channelManagement`); the emulator serves both.
    @Test func channelsAreCreatedReadListedBroadcastToAndDeleted() async throws {
        try await base.withSandbox(.init(autoRegisterTokens: false)) { emulator, client in
            let channel = try await client.createChannel(bundleID: bundle, storagePolicy: .mostRecentMessageStored)
            #expect(Data(base64Encoded: channel.id) != nil)
            #expect(
                try await client.channel(bundleID: bundle, id: channel.id).storagePolicy == .mostRecentMessageStored
            )
            let other = try await client.createChannel(bundleID: bundle, storagePolicy: .noMessageStored)
            #expect(Set(try await client.allChannels(bundleID: bundle)) == [channel.id, other.id])

            // Two devices start the activity on the channel by push-to-start; a third listens by its own choice.
            emulator.registerDevice(Self.pushToStart, topic: bundle)
            emulator.registerPushToStartToken(Self.pushToStart)
            let t0 = Int64(Date().timeIntervalSince1970)
            _ = try await client.send(
                try render(start(#","input_push_channel":"\#(channel.id)""#, timestamp: t0), token: Self.pushToStart)
            )
            _ = try await client.send(
                try render(start(#","input_push_channel":"\#(channel.id)""#, timestamp: t0), token: Self.pushToStart)
            )
            #expect(emulator.activities().count == 2)
            #expect(emulator.activities().allSatisfy { $0.channel == channel.id && $0.updateToken == nil })

            // One request updates every listener.
            let delivery = try await client.broadcast(
                try render(update(3, timestamp: t0 + 1), token: "unused"),
                bundleID: bundle,
                channelID: channel.id
            )
            #expect(delivery.apnsID != nil)
            #expect(emulator.activities().allSatisfy { $0.contentState == ["eta": 3] })
            #expect(emulator.recorded().last?.channelID == channel.id)

            // Refusals: an unknown channel, a push type other than liveactivity, no channel id.
            await #expect(throws: APNsFailure.self) {
                _ = try await client.broadcast(
                    try render(update(4, timestamp: t0 + 2), token: "unused"),
                    bundleID: bundle,
                    channelID: "bm90LWEtY2hhbm5lbA=="
                )
            }
            #expect(emulator.rejectedCounts["ChannelNotRegistered"] == 1)
            let alert = try render(#"{"body":"x"}"#, token: "unused")
            #expect(alert.header("apns-push-type") == "alert")
            await #expect(throws: APNsFailure.self) {
                _ = try await client.broadcast(alert, bundleID: bundle, channelID: channel.id)
            }
            #expect(emulator.rejectedCounts["InvalidPushType"] == 1)
            do {
                _ = try await client.channel(bundleID: "com.example.other", id: channel.id)
                Issue.record("another app read the channel")
            } catch let error as APNsFailure {
                #expect(error.status == 404 && error.reason == APNsReason(rawValue: "ChannelNotRegistered"))
            }

            try await client.deleteChannel(bundleID: bundle, id: channel.id)
            #expect(try await client.allChannels(bundleID: bundle) == [other.id])
            #expect(emulator.activities().allSatisfy { $0.channel == nil })
            do {
                try await client.deleteChannel(bundleID: bundle, id: channel.id)
                Issue.record("a deleted channel was deleted again")
            } catch let error as APNsFailure {
                #expect(error.status == 404)
            }
        }
    }

    @Test func aChannelRequestMustNameAValidPolicyAndType() async throws {
        try await base.withSandbox { emulator, client in
            let errors = [
                (#"{"message-storage-policy":2,"push-type":"LiveActivity"}"#, "InvalidPolicy"),
                (#"{"message-storage-policy":0,"push-type":"alert"}"#, "InvalidPushType"),
                ("not json", "BadRequest"),
            ]
            for (body, reason) in errors {
                do {
                    _ = try await client.perform(
                        method: "POST",
                        path: "/1/apps/\(bundle)/channels",
                        headers: [],
                        body: ByteBuffer(bytes: Array(body.utf8))
                    )
                    Issue.record("\(body) was accepted")
                } catch let error as APNsFailure {
                    #expect(error.reason == APNsReason(rawValue: reason), "\(body)")
                }
            }
            await #expect(throws: APNsFailure.self) {
                _ = try await client.perform(method: "GET", path: "/1/apps/\(bundle)/channels", headers: [], body: nil)
            }
            #expect(emulator.rejectedCounts["MissingChannelId"] == 1)
        }
    }
}

/// The emulator's device model against payloads no server of ours writes: any JSON where `aps` should be, every
/// key of the wrong type. Nothing traps, every activity keeps an ascending history, and a state is never applied
/// to an activity that ended.
@Suite struct LiveActivityModelHostileTests {
    static func randomValue(_ g: inout SystemRandomNumberGenerator, depth: Int = 0) -> JSONValue {
        switch Int.random(in: 0..<(depth > 2 ? 5 : 7), using: &g) {
        case 0: return .null
        case 1: return .bool(Bool.random(using: &g))
        case 2: return .int(Int64.random(in: -3...Int64.max, using: &g))
        case 3: return .double(Double.random(in: -1e300...1e300, using: &g))
        case 4: return .string(["start", "update", "end", "", "x"].randomElement(using: &g)!)
        case 5: return .array((0..<Int.random(in: 0..<3, using: &g)).map { _ in randomValue(&g, depth: depth + 1) })
        default:
            let keys = ["event", "timestamp", "content-state", "attributes", "attributes-type", "alert", "x"]
            return .object(
                Dictionary(
                    (0..<Int.random(in: 0..<4, using: &g)).map { _ in
                        (keys.randomElement(using: &g)!, randomValue(&g, depth: depth + 1))
                    },
                    uniquingKeysWith: { a, _ in a }
                )
            )
        }
    }

    @Test func anyPayloadLeavesTheModelConsistent() {
        var g = SystemRandomNumberGenerator()
        var model = LiveActivityModel()
        let tokens = (0..<8).map { String(format: "%064x", $0) }
        model.pushToStart[tokens[0]] = .some(nil)
        var issued = 0
        for round in 0..<5000 {
            var aps: [String: JSONValue] = [:]
            for key in [
                "event", "timestamp", "content-state", "attributes-type", "attributes", "alert", "stale-date",
                "dismissal-date", "relevance-score", "input-push-token", "input-push-channel",
            ]
            where Bool.random(using: &g) {
                aps[key] = Self.randomValue(&g)
            }
            // Often a well-formed part, so that activities exist to be disturbed.
            if round % 3 == 0 {
                aps["event"] = .string(["start", "update", "end"].randomElement(using: &g)!)
                aps["timestamp"] = .int(Int64.random(in: 1...50, using: &g))
                aps["content-state"] = ["n": .int(Int64(round))]
                aps["attributes-type"] = "T"
                aps["attributes"] = [:]
                aps["alert"] = "a"
            }
            let payload: JSONValue = Bool.random(using: &g) ? .object(["aps": .object(aps)]) : Self.randomValue(&g)
            model.apply(
                payload: payload,
                token: tokens.randomElement(using: &g)!,
                topic: "com.example.app",
                autoRegister: Bool.random(using: &g)
            ) {
                issued += 1
                return String(format: "%064x", 1000 + issued)
            }
            if round % 500 == 0 { _ = model.broadcast(payload: payload, channel: "none") }
        }
        for a in model.activities.values {
            #expect(zip(a.history, a.history.dropFirst()).allSatisfy { $0 <= $1 }, "\(a.history)")
            #expect(a.applied >= a.history.count)
        }
        #expect(model.activities.count <= LiveActivityModel.maxActivities)
    }
}

/// The channel calls against every hostile answer the emulator can give: each ends in an `APNsFailure` (or, for a
/// 2xx, a result read within its bounds), never a trap, and the client keeps working after each.
@Suite struct LiveChannelHostileAnswerTests {
    @Test func everyChannelCallClassifiesEveryHostileAnswer() async throws {
        try await APNsClientTests().withSandbox(.init(autoRegisterTokens: true)) { emulator, client in
            let bundle = "com.example.app"
            let update = APNsRenderer(bundleID: bundle).render(
                try PushMessage.decode(
                    JSONValue.parse(#"{"live_activity":{"event":"update","content_state":{"n":1},"timestamp":1}}"#)
                ),
                deviceToken: ""
            )
            let channel = try await client.createChannel(bundleID: bundle, storagePolicy: .noMessageStored)
            let calls: [(String, @Sendable () async throws -> Void)] = [
                ("create", { _ = try await client.createChannel(bundleID: bundle, storagePolicy: .noMessageStored) }),
                ("read", { _ = try await client.channel(bundleID: bundle, id: channel.id) }),
                ("list", { _ = try await client.allChannels(bundleID: bundle) }),
                ("delete", { try await client.deleteChannel(bundleID: "com.example.other", id: channel.id) }),
                ("broadcast", { _ = try await client.broadcast(update, bundleID: bundle, channelID: channel.id) }),
            ]
            for (name, answer) in HostileProviderTests.answers {
                for (call, run) in calls {
                    emulator.inject(.hostile(answer))
                    do {
                        try await run()
                        #expect(name.contains("2xx"), "\(call) took \(name) as a success")
                    } catch let error as APNsFailure {
                        if case .retryAfter(let s) = error.retry { #expect(s.isFinite && s >= 0, "\(call) \(name)") }
                    } catch {
                        Issue.record("\(call) \(name): \(error) is not an APNsFailure")
                    }
                }
                // Still working: the channel reads back.
                #expect(try await client.channel(bundleID: bundle, id: channel.id).id == channel.id, "after \(name)")
            }
        }
    }
}
