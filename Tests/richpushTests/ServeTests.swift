import Foundation
import RichPushCore
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// `richpush serve` as a process: the API over real sockets, a SIGKILL, and a restart on the same database.
@Suite struct ServeTests {
    final class Server {
        let process = Process()
        let base: String

        init(db: String, sandboxDir: String) throws {
            process.executableURL = CLITests.binary
            process.arguments = ["serve", "--port", "0", "--db", db, "--sandbox-dir", sandboxDir, "--admin-key", "test-admin"]
            let out = Pipe()
            process.standardOutput = out
            process.standardError = FileHandle.nullDevice
            try process.run()
            var line = ""
            while !line.hasSuffix("}\n") {
                guard let chunk = try out.fileHandleForReading.read(upToCount: 1), !chunk.isEmpty else { break }
                line += String(decoding: chunk, as: UTF8.self)
            }
            base = (try JSONValue.parse(line))["listening"]?.stringValue ?? ""
        }

        func call(_ method: String, _ path: String, key: String, body: JSONValue? = nil) async throws -> (Int, JSONValue) {
            var request = URLRequest(url: URL(string: base + path)!)
            request.httpMethod = method
            request.setValue("Bearer \(key)", forHTTPHeaderField: "Authorization")
            if let body { request.httpBody = Data(body.serialized()) }
            let (data, response) = try await URLSession.shared.data(for: request)
            return ((response as? HTTPURLResponse)?.statusCode ?? 0, (try? JSONValue.parse(data)) ?? .null)
        }
    }

    @Test func aScheduledSendSurvivesAKillAndARestart() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("serve-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let db = dir.appendingPathComponent("rp.sqlite").path, sbx = dir.appendingPathComponent("sandbox").path
        let first = try Server(db: db, sandboxDir: sbx)
        #expect(first.base.hasPrefix("http://127.0.0.1:"))
        let (s1, created) = try await first.call("POST", "/v1/apps", key: "test-admin", body: ["name": "Shop", "bundle_id": "com.example.app"])
        #expect(s1 == 201)
        let app = try #require(created["app"]?["id"]?.stringValue), key = try #require(created["api_key"]?.stringValue)
        let token = String(repeating: "be", count: 32)
        #expect(try await first.call("POST", "/v1/apps/\(app)/devices", key: key, body: ["token": .string(token), "platform": "ios"]).0 == 200)
        let sendAt = Date().addingTimeInterval(2).timeIntervalSince1970
        let (s2, accepted) = try await first.call("POST", "/v1/apps/\(app)/notifications", key: key, body: ["title": "Survives", "audience": ["all": true], "send_at": .double(sendAt)])
        #expect(s2 == 202)
        let id = try #require(accepted["id"]?.stringValue)
        kill(first.process.processIdentifier, SIGKILL)
        first.process.waitUntilExit()

        let second = try Server(db: db, sandboxDir: sbx)
        var counts: JSONValue = .null
        for _ in 0..<100 {
            counts = try await second.call("GET", "/v1/apps/\(app)/notifications/\(id)", key: key).1["counts"] ?? .null
            if counts["delivered"] == 1 { break }
            try await Task.sleep(nanoseconds: 100_000_000)
        }
        #expect(counts == ["delivered": 1])
        second.process.terminate()
        second.process.waitUntilExit()
        #expect(second.process.terminationReason == .exit && second.process.terminationStatus == 0)
    }
}
