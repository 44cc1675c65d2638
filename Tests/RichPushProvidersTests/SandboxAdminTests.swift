import Foundation
import NIOCore
import RichPushAPNs
import RichPushCore
import RichPushSandbox
import RichPushTestSupport
import RichPushTransport
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The sandbox's admin HTTP API and fault rates, over real sockets.
@Suite struct SandboxAdminTests {
    func call(_ port: Int, _ method: String, _ path: String, _ body: JSONValue? = nil) async throws -> (Int, JSONValue)
    {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)\(path)")!)
        request.httpMethod = method
        if let body { request.httpBody = Data(body.serialized()) }
        let (data, response) = try await URLSession.shared.data(for: request)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, try JSONValue.parse(data))
    }

    @Test func theDeviceSimulatorShowsLiveActivitiesAndChannels() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("sandbox-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let sandbox = try await Sandbox.start(directory: dir, threads: 1)
        let client = try sandbox.apnsClient(requestTimeout: 2)
        let token = String(repeating: "d5", count: 32)
        let registered = try await call(
            sandbox.adminPort,
            "POST",
            "/apns/push-to-start-tokens",
            ["token": .string(token), "attributes_type": "ScoreAttributes"]
        )
        #expect(registered.0 == 201)
        let channel = try await client.createChannel(bundleID: "com.example.app", storagePolicy: .noMessageStored)
        var start = PushMessage(alert: .init(title: "Kick-off", body: "0 – 0"))
        start.liveActivity = LiveActivity(
            event: .start,
            contentState: ["home": 0, "away": 0],
            attributesType: "ScoreAttributes",
            attributes: ["match": "7"],
            timestamp: Int64(Date().timeIntervalSince1970),
            inputPushChannel: channel.id
        )
        start.pushType = .liveactivity
        _ = try await client.send(APNsRenderer(bundleID: "com.example.app").render(start, deviceToken: token))

        let (status, shown) = try await call(sandbox.adminPort, "GET", "/apns/activities")
        #expect(status == 200 && shown["count"] == 1)
        let activity = shown["activities"]?.arrayValue?.first
        #expect(activity?["content_state"] == ["home": 0, "away": 0])
        #expect(activity?["channel"] == .string(channel.id) && activity?["attributes_type"] == "ScoreAttributes")
        let (_, channels) = try await call(sandbox.adminPort, "GET", "/apns/channels")
        #expect(channels["channels"]?.arrayValue?.first?["subscribers"] == 1)
        #expect(try await call(sandbox.adminPort, "POST", "/apns/push-to-start-tokens", [:]).0 == 400)
        await client.shutdown()
        await sandbox.stop()
    }

    @Test func recordsStatsDevicesAndFaultsOverHTTP() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("sandbox-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let sandbox = try await Sandbox.start(directory: dir, threads: 1)
        let client = try sandbox.apnsClient(requestTimeout: 2)
        let token = String(repeating: "c4", count: 32)
        let request = APNsRenderer(bundleID: "com.example.app").render(
            PushMessage(alert: .init(title: "admin")),
            deviceToken: token
        )
        _ = try await client.send(request)

        let (status, list) = try await call(sandbox.adminPort, "GET", "/apns/notifications?token=\(token)")
        #expect(status == 200 && list["count"] == 1)
        #expect(list["notifications"]?.arrayValue?.first?["payload"]?["aps"]?["alert"] == ["title": "admin"])

        // Every request fails while a fault is injected at rate 1, and none after it is cleared.
        #expect(
            try await call(
                sandbox.adminPort,
                "POST",
                "/apns/faults",
                ["kind": "status", "status": 500, "reason": "InternalServerError", "rate": 1]
            ).0 == 201
        )
        for _ in 0..<3 {
            do throws(APNsFailure) {
                _ = try await client.send(request)
                Issue.record("should fail")
            } catch { #expect(error.reason == .internalServerError) }
        }
        #expect(try await call(sandbox.adminPort, "DELETE", "/apns/faults").0 == 200)
        _ = try await client.send(request)

        #expect(
            try await call(
                sandbox.adminPort,
                "POST",
                "/apns/devices/unregister",
                ["token": .string(token), "timestamp_ms": 1_700_000_000_000]
            ).0 == 200
        )
        do throws(APNsFailure) {
            _ = try await client.send(request)
            Issue.record("should fail")
        } catch {
            #expect(error.reason == .unregistered && error.timestamp == Date(timeIntervalSince1970: 1_700_000_000))
        }
        let (_, stats) = try await call(sandbox.adminPort, "GET", "/apns/stats")
        #expect(
            stats["accepted"] == 2 && stats["rejected"]?["InternalServerError"] == 3
                && stats["rejected"]?["Unregistered"] == 1
        )
        #expect(try await call(sandbox.adminPort, "POST", "/apns/faults", ["kind": "nonsense"]).0 == 400)
        #expect(try await call(sandbox.adminPort, "GET", "/nowhere").0 == 404)
        // A fault rate below one fails about that share of requests.
        sandbox.apns.inject(.status(503, reason: "ServiceUnavailable"), rate: 0.3)
        let other = APNsRenderer(bundleID: "com.example.app").render(
            PushMessage(alert: .init(title: "x")),
            deviceToken: String(repeating: "d5", count: 32)
        )
        var failed = 0
        for _ in 0..<200 { do throws(APNsFailure) { _ = try await client.send(other) } catch { failed += 1 } }
        #expect(failed > 30 && failed < 100, "\(failed) of 200")
        await client.shutdown()
        await sandbox.stop()
    }

    /// Numbers from the admin API are range-checked before use: a negative limit reads as none (a suffix of it
    /// trapped the process that runs the sandbox), and a fault's count, status, stream limit, retry or rate out of
    /// range is refused with 400 naming it.
    @Test func numbersOutOfRangeAreRefusedOrBounded() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("sandbox-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let sandbox = try await Sandbox.start(directory: dir, threads: 1)
        for path in ["/fcm/messages?limit=-1", "/apns/notifications?limit=-5", "/apns/activities?limit=-1"] {
            let (status, _) = try await call(sandbox.adminPort, "GET", path)
            #expect(status == 200, "\(path)")
        }
        let refused: [(String, JSONValue)] = [
            ("/apns/faults", ["kind": "status", "status": 70000]),
            ("/apns/faults", ["kind": "status", "count": 9_223_372_036_854_775_807]),
            ("/apns/faults", ["kind": "lower_streams", "streams": -1]),
            ("/apns/faults", ["kind": "status", "rate": 2]),
            ("/fcm/faults", ["kind": "quota", "retry_after": -3]),
            ("/fcm/faults", ["kind": "internal", "count": -1]),
        ]
        for (path, body) in refused {
            let (status, answer) = try await call(sandbox.adminPort, "POST", path, body)
            #expect(status == 400, "\(body): \(answer)")
        }
        #expect(sandbox.apns.pendingFaults == 0 && sandbox.fcm.pendingFaults == 0)
        #expect(try await call(sandbox.adminPort, "GET", "/health").0 == 200)
    }

    @Test func idleConnectionsAnswerPings() async throws {
        let creds = SandboxFixture.credentials
        let emulator = try APNsEmulator(credentials: creds)
        let port = try await emulator.start()
        let connection = try await HTTP2ClientConnection.connect(
            to: .init(host: "127.0.0.1", port: port, trust: .certificateAuthority(pem: creds.caCertificatePEM)),
            group: NIOSingletons.posixEventLoopGroup
        )
        // 30 s: beside the suite's load tests on the same two event loops a ping's answer waited past the 5 s
        // default (1 run of 3).
        try await connection.ping(timeout: .seconds(30)).get()
        try await connection.ping(timeout: .seconds(30)).get()
        connection.close()
        await emulator.stop()
    }
}
