import Crypto
import Foundation
import RichPushTestSupport
import RichPushTransport
import Testing

@testable import RichPushCore

/// Runs the built `richpush` binary as a user would.
@Suite struct CLITests {
    static var binary: URL {
        // The test bundle sits in the build folder next to the executables it depends on.
        let dir =
            Bundle.main.bundleURL.hasDirectoryPath && Bundle.main.bundleURL.lastPathComponent.hasSuffix(".xctest")
            ? Bundle.main.bundleURL.deletingLastPathComponent()
            : URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        return dir.appendingPathComponent("richpush")
    }

    static let examples = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent(
        "../../examples"
    ).standardized

    struct Run {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    func run(_ args: [String], stdin: String? = nil, environment: [String: String] = [:]) async throws -> Run {
        let run = try await ChildProcess.run(
            Self.binary,
            args,
            environment: environment.isEmpty
                ? nil : ProcessInfo.processInfo.environment.merging(environment) { _, new in new },
            stdin: Data((stdin ?? "").utf8)
        )
        return Run(status: run.status, stdout: run.output, stderr: run.errors)
    }

    func example(_ name: String) -> String { Self.examples.appendingPathComponent(name).path }

    @Test func payloadOnTheFCMExamplePrintsTheDocumentedBody() async throws {
        let r = try await run(["payload", "--provider", "fcm", "--json", example("fcm-documented-example.json")])
        #expect(r.status == 0, "\(r.stderr)")
        let out = try JSONValue.parse(r.stdout)
        #expect(out["method"] == "POST")
        #expect(out["path"] == "/v1/projects/richpush-sandbox/messages:send")
        let message = try #require(out["body"]?["message"])
        let image: JSONValue = "https://foo.bar.pizza-monster.png"
        #expect(message["topic"] == "industry-tech")
        #expect(message["notification"] == ["title": "Sparky says hello!", "image": image])
        #expect(message["android"] == ["notification": ["image": image]])
        #expect(message["apns"]?["payload"]?["aps"] == ["mutable-content": 1])
        #expect(message["apns"]?["fcm_options"] == ["image": image])
        #expect(message["webpush"] == ["headers": ["image": image]])
    }

    /// Whatever size and scale a chart asks for, drawing and encoding it stays within a few MB above the process's
    /// baseline (the extension's budget is about 24 MB in all). Measured in a process of its own.
    @Test(arguments: [(1024, 1024, 3), (1024, 1024, 1), (365, 365, 3), (547, 547, 2), (1024, 16, 3), (320, 180, 3)])
    func chartsStayWithinTheirMemoryBudget(_ width: Int, _ height: Int, _ scale: Int) async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("chart-mem-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let values = (0..<1000).map { (i: Int) -> String in
            let v: Double = Double(i % 37) * 1.5 + Double(i) / 10
            return String(v)
        }.joined(separator: ",")
        let spec =
            #"{"type":"area","title":"Revenue","value":"$1.2M","change":"+3%","labels":["a","b","c"],"size":[\#(width),\#(height)],"scale":\#(scale),"series":[{"values":[\#(values)],"name":"one"},{"values":[\#(values)],"name":"two"}]}"#
        let specFile = dir.appendingPathComponent("spec.json")
        try Data(spec.utf8).write(to: specFile)
        let r = try await run(["chart", specFile.path, "--out", dir.appendingPathComponent("c.png").path, "--memory"])
        #expect(r.status == 0, "\(r.stderr)")
        let line = try #require(r.stdout.split(separator: "\n").first { $0.hasPrefix("peak memory above baseline:") })
        let bytes = try #require(line.split(separator: " ").compactMap { Int($0) }.first)
        // The debug build measured 5.1 to 7.5 MB for the same chart from one run to the next on this machine (the
        // resident size moves with the machine's state); the 6 MB goal is held by the release benchmark
        // (`richpush-bench chart`: 4.4 MB at scale 3). This bound catches a renderer that grows with the chart.
        #expect(bytes < 8 * 1024 * 1024, "\(width)x\(height)@\(scale): \(bytes) bytes")
        print("chart \(width)x\(height)@\(scale): \(bytes) bytes above baseline")
    }

    /// `richpush identity mint` signs what an app's backend signs: an ES256 JWT for the user and app, named by the
    /// key's thumbprint, within the bounds; a bad key file or a lifetime past a day is refused.
    @Test func identityMintSignsAProofWithAKeyFile() async throws {
        let key = P256.Signing.PrivateKey()
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("idk-\(UUID().uuidString).pem")
        defer { try? FileManager.default.removeItem(at: file) }
        try key.pemRepresentation.write(to: file, atomically: true, encoding: .utf8)
        let r = try await run([
            "identity", "mint", "--key", file.path, "--app", "app_1", "--user", "u-42", "--lifetime", "600",
            "--activity", "order-42",
        ])
        #expect(r.status == 0, "\(r.stderr)")
        let proof = r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let parts = try #require(JWT.Parts(proof))
        #expect(parts.verifiesES256(with: key.publicKey) && parts.signature.count == 64)
        #expect(parts.header["alg"] as? String == "ES256" && (parts.header["kid"] as? String)?.count == 43)
        let claims = parts.claims
        #expect(claims["sub"] as? String == "u-42" && claims["aud"] as? String == "app_1")
        #expect(claims["activities"] as? [String] == ["order-42"])
        let exp = try #require(claims["exp"] as? Int)
        let iat = try #require(claims["iat"] as? Int)
        #expect(exp - iat == 600)
        #expect(try await run(["identity", "mint", "--key", "/nonexistent", "--app", "a", "--user", "u"]).status == 2)
        #expect(
            try await run(["identity", "mint", "--key", file.path, "--app", "a", "--user", "u", "--lifetime", "90000"])
                .status
                == 2
        )
    }

    /// What an operator checks first: the version, and help whose paragraphs read as paragraphs.
    @Test func versionAndHelpReadWell() async throws {
        let version = try await run(["--version"])
        #expect(version.status == 0 && version.stdout.hasPrefix("richpush 0."), "\(version.stdout)")
        for command in ["serve", "send", "sandbox", "migrate", "identity mint", "rotate-credentials-key"] {
            let help = try await run(["help"] + command.split(separator: " ").map(String.init))
            #expect(help.status == 0)
            // No line of the text before USAGE ends short while the next one carries on the same sentence (a line
            // broken in the source, then wrapped again at the terminal's width).
            let head = help.stdout.components(separatedBy: "USAGE:").first ?? ""
            let lines = head.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
            for (line, next) in zip(lines, lines.dropFirst()) where !line.hasPrefix(" ") && !next.hasPrefix(" ") {
                guard let first = next.first, first.isLowercase, line.count < 60, !line.isEmpty else { continue }
                Issue.record("help \(command): a line broken short: \"\(line)\" / \"\(next)\"")
            }
            #expect(lines.allSatisfy { $0.count <= 80 }, "help \(command) is wider than 80 columns")
            #expect(!head.contains("\\"), "help \(command) shows a line continuation")
        }
    }

    /// The rotation refuses a "new" key that is the key in use under another name, and a folder that does not
    /// exist, before it touches the database.
    @Test func rotationRefusesTheSameKeyAndAMissingFolder() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rotate-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let db = dir.appendingPathComponent("rp.sqlite").path
        let key = db + ".key"
        FileManager.default.createFile(atPath: db, contents: Data())
        try "\(Data(repeating: 7, count: 32).base64EncodedString())\n".write(
            toFile: key,
            atomically: true,
            encoding: .utf8
        )
        let link = dir.appendingPathComponent("alias.key").path
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: key)
        let same = try await run(["rotate-credentials-key", "--database", db, "--new-key-file", link])
        #expect(same.status == 2 && same.stderr.contains("is the key in use"), "\(same.stderr)")
        let missing = try await run([
            "rotate-credentials-key", "--database", db, "--new-key-file",
            dir.appendingPathComponent("nope/new.key").path,
        ])
        #expect(missing.status == 2 && missing.stderr.contains("does not exist"), "\(missing.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir.appendingPathComponent("nope").path))
    }

    /// A configuration problem found while running names the cause alone: no usage line, which would say nothing
    /// of it.
    @Test func aConfigurationErrorIsNamedWithoutTheUsageLine() async throws {
        let r = try await run(["serve", "--admin-key", "short", "--port", "0"])
        #expect(r.status == 2)
        #expect(r.stderr.contains("admin_key") && r.stderr.contains("16 characters"), "\(r.stderr)")
        #expect(!r.stderr.contains("Usage:") && !r.stderr.contains("USAGE:"), "\(r.stderr)")
    }

    @Test func validateListsAllFiveMistakes() async throws {
        let r = try await run(["validate", example("five-mistakes.json")])
        #expect(r.status == 1)
        let errors = r.stdout.split(separator: "\n").filter { $0.hasPrefix("error:") }
        #expect(errors.count == 5, "\(r.stdout)")
        for rule in ["https-required", "apple-unsupported-type", "range", "apns-token", "condition-topics"] {
            #expect(r.stdout.contains("[\(rule)]"))
        }
        let json = try await run(["validate", "--json", example("five-mistakes.json")])
        #expect(json.status == 1)
        let report = try JSONValue.parse(json.stdout)
        #expect(report["valid"] == false)
        #expect(report["issues"]?.arrayValue?.count == 5)
        #expect(report["issues"]?.arrayValue?.first?["path"] != nil)
    }

    @Test func validateAcceptsEveryExample() async throws {
        for name in [
            "rich-image.json", "stock-chart.json", "silent-refresh.json", "fcm-documented-example.json",
            "live-activity-start.json", "live-activity-update.json", "live-activity-end.json",
        ] {
            let r = try await run(["validate", example(name)])
            #expect(r.status == 0, "\(name): \(r.stdout)")
        }
    }

    @Test func apnsPayloadWithHeaders() async throws {
        let r = try await run([
            "payload", "--provider", "apns", "--now", "1700000000", "--bundle-id", "com.shop.app",
            example("rich-image.json"),
        ])
        #expect(r.status == 0)
        let lines = r.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        #expect(lines.first == "POST /3/device/5a4e1c0f9d8b7a6e5d4c3b2a19080706f5e4d3c2b1a09f8e7d6c5b4a39281706")
        #expect(lines.contains("apns-topic: com.shop.app"))
        #expect(lines.contains("apns-expiration: 1700086400"))
        let bodyStart = try #require(lines.firstIndex(of: ""))
        let body = try JSONValue.parse(lines[(bodyStart + 1)...].joined(separator: "\n"))
        #expect(body["aps"]?["mutable-content"] == 1)
    }

    @Test func aLiveActivityUpdatePrintsTheDocumentedHeadersAndAps() async throws {
        let r = try await run([
            "payload", "--provider", "apns", "--json", "--now", "1900000000", "--bundle-id", "com.shop.app",
            example("live-activity-update.json"),
        ])
        #expect(r.status == 0, "\(r.stderr)")
        let out = try JSONValue.parse(r.stdout)
        #expect(out["headers"]?["apns-push-type"] == "liveactivity")
        #expect(out["headers"]?["apns-topic"] == "com.shop.app.push-type.liveactivity")
        #expect(out["headers"]?["apns-priority"] == "5")
        #expect(out["headers"]?["apns-collapse-id"] == "order-A-17")
        let aps = out["body"]?["aps"]
        #expect(aps?["event"] == "update" && aps?["timestamp"] == 1_900_000_000)
        #expect(aps?["content-state"]?["status"] == "on-the-way")
        #expect(
            aps?["content-state"]?["chart"]?["values"] == [25, 22, 18, 15, 12]
                && aps?["content-state"]?["chart"]?["type"] == "sparkline"
        )
        #expect(aps?["stale-date"] == 1_900_001_800 && aps?["relevance-score"] == 50.0)
        #expect(aps?["alert"] == ["title": "On its way", "body": "Arriving in about 12 minutes"])
        #expect(out["body"]?["rp"] == nil && aps?["mutable-content"] == nil)

        let start = try await run(
            ["validate", "-"],
            stdin: #"{"live_activity":{"event":"start"},"targets":{"apns_tokens":["aa"]}}"#
        )
        #expect(start.status == 1)
        for rule in [
            "start-needs-attributes-type", "start-needs-attributes", "needs-content-state", "start-needs-alert",
        ] {
            #expect(start.stdout.contains("[\(rule)]"), "\(start.stdout)")
        }
    }

    @Test func readsStandardInputAndReportsBadJSON() async throws {
        let ok = try await run(
            ["payload", "--provider", "apns", "--token", "aabbccddeeff00112233", "-"],
            stdin: #"{"body":"hi"}"#
        )
        #expect(ok.status == 0 && ok.stdout.contains("\"alert\": \"hi\""))
        let bad = try await run(["validate", "-"], stdin: #"{"body": }"#)
        #expect(bad.status == 2 && bad.stderr.contains("invalid JSON at byte"))
        let missing = try await run(["validate", "/nonexistent.json"])
        #expect(missing.status == 2)
        let wrongFlags = try await run(["payload", "--provider", "apns", "--topic", "x", example("rich-image.json")])
        #expect(wrongFlags.status != 0 && wrongFlags.stderr.contains("APNs sends to device tokens only"))
    }

    @Test func payloadRefusesAnInvalidMessageUnlessForced() async throws {
        let r = try await run(["payload", "--provider", "fcm", example("five-mistakes.json")])
        #expect(r.status == 1 && r.stderr.contains("[https-required]"))
    }
}

/// `richpush sandbox` as a user runs it: starts, prints where everything is, serves, stops on SIGTERM.
@Suite struct SandboxCommandTests {
    @Test func startsPrintsEndpointsAndStopsOnSIGTERM() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("sandbox-cli-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        // The summary is a JSON object followed by a "serving" line.
        let sandbox = try await ExternalSandbox(dir: dir.path, threads: nil)
        let p = sandbox.process
        let json = sandbox.summary
        #expect(json["apns"]?["port"]?.intValue ?? 0 > 0)
        #expect(json["fcm"]?["token_uri"]?.stringValue?.hasPrefix("https://127.0.0.1:") == true)
        for key in ["ca.pem", "apns-key.p8", "service-account.json", "apns.json"] {
            #expect(FileManager.default.fileExists(atPath: dir.appendingPathComponent(key).path), "\(key)")
        }
        #expect(json["apns"]?["key_id"]?.stringValue?.count == 10 && json["apns"]?["team_id"]?.stringValue?.count == 10)
        p.terminate()
        await p.exited()
        #expect(p.terminationReason == .exit && p.terminationStatus == 0)
    }
}

@Suite struct DemoCommandTests {
    @Test func theDemoRunsEndToEnd() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("demo-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let r = try await CLITests().run(["demo", "--dir", dir.path])
        #expect(r.status == 0, "\(r.stdout)\(r.stderr)")
        #expect(r.stdout.contains("accepted (202)"))
        #expect(r.stdout.contains(#"4. outcome: {"delivered":2}"#))
        #expect(r.stdout.contains("fcm delivered projects/"))
        #expect(r.stdout.contains("attachment media-0: PNG image"))
        #expect(r.stdout.contains("attachment chart: PNG image"))
        #expect(r.stdout.contains(#"receipts: {"count":1,"deadline_hit":0,"skipped_reasons":{},"with_media":1}"#))
        #expect(!r.stdout.contains("[HummingbirdCore]"))
        #expect(r.stdout.contains("2,778 signups on Sunday"))
    }
}
