import Foundation
import RichPushCore
import RichPushSandbox
import RichPushTestSupport
import Testing

/// Real third-party clients, unmodified except for their endpoint, against the emulators.
@Suite(.serialized) struct ThirdPartyClientTests {
    static let peers = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent(
        "../../Benchmarks/peers"
    ).standardized

    static func python(_ script: String, _ args: [String]) async throws -> (Int32, String) {
        let run = try await ChildProcess.run(
            URL(fileURLWithPath: "/usr/bin/env"),
            ["python3", peers.appendingPathComponent(script).path] + args
        )
        return (run.status, run.output + (run.status == 0 ? "" : run.errors))
    }

    @Test func aioapnsDeliversAndGetsAPNsReasons() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("sandbox-\(UUID().uuidString)")
        let sandbox = try await Sandbox.start(directory: dir, threads: 1)
        defer { try? FileManager.default.removeItem(at: dir) }
        let token = "7f" + String(repeating: "ab", count: 31)
        let (status, out) = try await Self.python(
            "aioapns_peer.py",
            ["check", dir.path, String(sandbox.apns.port), token]
        )
        await sandbox.stop()
        #expect(status == 0, "aioapns failed (python3 -m pip install aioapns): \(out)")
        let r = try JSONValue.parse(out)
        #expect(r["delivered"] == true && r["status"] == "200")
        #expect(r["bad_token"] == "BadDeviceToken")
        #expect(r["too_large"] == "PayloadTooLarge")
        #expect(r["bad_priority"] == "BadPriority")
        #expect(r["bad_collapse_id"] == "BadCollapseId")
        let recorded = sandbox.apns.recorded(token: token)
        #expect(recorded.first?.payloadJSON?["aps"]?["alert"]?["title"] == "from aioapns")
    }

    @Test func firebaseAdminDeliversAndGetsFCMErrors() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("sandbox-\(UUID().uuidString)")
        let sandbox = try await Sandbox.start(directory: dir, threads: 1)
        defer { try? FileManager.default.removeItem(at: dir) }
        sandbox.fcm.unregister(token: "unregistered-token-0001")
        let (status, out) = try await Self.python(
            "firebase_admin_peer.py",
            ["check", dir.path, String(sandbox.fcm.port), "sandbox-device-token-0001"]
        )
        await sandbox.stop()
        #expect(status == 0, "firebase-admin failed (python3 -m pip install firebase-admin): \(out)")
        let r = try JSONValue.parse(out)
        #expect(r["send"]?.stringValue?.hasPrefix("projects/\(sandbox.credentials.fcmProjectID)/messages/") == true)
        #expect(r["send_each_async_ok"] == 3)
        #expect(r["dry_run"]?.stringValue?.hasSuffix("/messages/fake_message_id") == true)
        #expect(r["unregistered"] == "UnregisteredError:NOT_FOUND")
        #expect(r["too_big"] == "InvalidArgumentError:INVALID_ARGUMENT")
        #expect(sandbox.fcm.acceptedCount == 4)
        let first = sandbox.fcm.recorded().first?.message
        #expect(first?["notification"]?["image"] == "https://x.test/a.png")
        #expect(first?["apns"]?["payload"]?["aps"]?["mutable-content"] == 1)
    }
}
