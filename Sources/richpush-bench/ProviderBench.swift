import ArgumentParser
import Foundation
import NIOCore
import NIOPosix
import RichPushAPNs
import RichPushCore
import RichPushFCM
import RichPushSandbox
import RichPushTransport

/// The emulators in a child process, so that the client measured runs alone in this one.
final class SandboxProcess {
    let helper: HelperProcess?
    let directory: URL
    let apnsPort: Int
    let fcmPort: Int
    var webPushPort = 0
    var adminPort = 0

    /// A sandbox someone else runs.
    init(running directory: URL, apnsPort: Int) {
        helper = nil
        self.directory = directory
        self.apnsPort = apnsPort
        fcmPort = 0
    }

    init(threads: Int, latencyMs: Double = 0) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("richpush-bench-sandbox-\(getpid())")
        let helper = try HelperProcess(["sandbox-server", directory.path, String(threads), String(latencyMs)])
        self.helper = helper
        let ports = helper.readyLine.split(separator: " ").compactMap { Int($0) }
        guard ports.count == 4 else { throw ExitCode(1) }
        (apnsPort, fcmPort, webPushPort, adminPort) = (ports[0], ports[1], ports[2], ports[3])
    }

    func stop() {
        guard let helper else { return }
        helper.stop()
        try? FileManager.default.removeItem(at: directory)
    }
}

/// Hidden: runs the sandbox until standard input closes; prints "APNS_PORT FCM_PORT WEBPUSH_PORT ADMIN_PORT" first.
struct SandboxServer: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "sandbox-server", shouldDisplay: false)
    @Argument var directory: String
    @Argument var threads: Int = 1
    @Argument var latencyMs: Double = 0

    func run() async throws {
        let delay = ResponseDelay(milliseconds: latencyMs)
        let sandbox = try await Sandbox.start(
            directory: URL(fileURLWithPath: directory),
            apnsConfiguration: .init(recordLimit: 1000, responseDelay: delay),
            fcmConfiguration: .init(
                projectMessagesPerMinute: 100_000_000,
                deviceMessagesPerMinute: 100_000_000,
                recordLimit: 1000,
                responseDelay: delay
            ),
            threads: threads
        )
        FileHandle.standardOutput.write(
            Data("\(sandbox.apns.port) \(sandbox.fcm.port) \(sandbox.webPush.port) \(sandbox.adminPort)\n".utf8)
        )
        _ = FileHandle.standardInput.readDataToEndOfFile()
        await sandbox.stop()
    }
}

enum Peers {
    static let dir = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent(
        "../../Benchmarks/peers"
    ).standardized

    static func python(_ script: String, _ args: [String]) -> JSONValue? {
        guard let (status, out) = try? Measure.runProcess("python3", [dir.appendingPathComponent(script).path] + args),
            status == 0
        else { return nil }
        return out.split(separator: "\n").last.flatMap { try? JSONValue.parse(String($0)) }
    }
}

struct APNsBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apns",
        abstract:
            "Send notifications through RichPushAPNs to the APNs emulator; aioapns and h2load against the same emulator; ratios.",
        discussion: """
            Each --latency-ms and --concurrency given is one run (every pair of them): the emulator answers after that
            delay, as the real service a round trip away does, and every client keeps that many requests in flight.
            With a delay, no client can pass concurrency / delay per second, so the counts are cut to about 8 s of
            sending at that bound.
            """
    )

    @Option(help: "Notifications RichPushAPNs sends (and h2load).") var count = 200_000
    @Option(help: "Notifications aioapns sends (it is slower).") var peerCount = 20_000
    @Option(help: "Requests in flight (the same for every client measured); repeat for several runs.") var concurrency:
        [Int] = [200]
    @Option(name: .customLong("latency-ms"), help: "The emulator's delay before each answer; repeat for several runs.")
    var latencyMs: [Double] = [0]
    @Option(help: "The most connections RichPushAPNs opens (h2load opens as many as RichPushAPNs had open).")
    var connections = HTTP2PoolDefaults.connections
    @Option(help: "Requests in flight on one RichPushAPNs connection before it opens the next.")
    var streamsPerConnection = HTTP2PoolDefaults.streamsPerConnection
    @Option(help: "Emulator event-loop threads.") var serverThreads = 1
    @Option(help: "Client event-loop threads.") var clientThreads = 1
    @Option(
        name: .customLong("sandbox-dir"),
        help: "Send to a running `richpush sandbox` (its --dir) instead of starting one: RichPushAPNs alone, no peers."
    ) var sandboxDir: String?
    @Option(name: .customLong("apns-port"), help: "That sandbox's APNs port.") var apnsPort: Int?

    func validate() throws {
        guard (sandboxDir == nil) == (apnsPort == nil) else {
            throw ValidationError("--sandbox-dir and --apns-port go together.")
        }
        guard concurrency.allSatisfy({ (1...100_000).contains($0) }) else {
            throw ValidationError("--concurrency must be from 1 to 100000.")
        }
        guard latencyMs.allSatisfy({ $0.isFinite && (0...10_000).contains($0) }) else {
            throw ValidationError("--latency-ms must be from 0 to 10000.")
        }
        guard (1...64).contains(connections) else { throw ValidationError("--connections must be from 1 to 64.") }
    }

    func run() async throws {
        if let sandboxDir, let apnsPort {
            let sandbox = SandboxProcess(running: URL(fileURLWithPath: sandboxDir), apnsPort: apnsPort)
            for inFlight in concurrency {
                let r = try await Self.measureClient(
                    sandbox: sandbox,
                    count: count,
                    concurrency: inFlight,
                    connections: connections,
                    streamsPerConnection: streamsPerConnection,
                    clientThreads: clientThreads
                )
                print(
                    String(
                        format:
                            "apns: RichPushAPNs alone to the running sandbox: %.0f notifications/s (%d sent, %d in flight, %.2f s, %@ failed, %d connections)",
                        r.rate,
                        count,
                        inFlight,
                        r.seconds,
                        r.failures.description,
                        r.connections
                    )
                )
            }
            return
        }
        var rows: [String] = []
        for latency in latencyMs {
            for inFlight in concurrency {
                rows.append(try await runOnce(latencyMs: latency, concurrency: inFlight))
            }
        }
        if rows.count > 1 {
            print("summary (one line per run):")
            for r in rows { print("  " + r) }
        }
    }

    /// The count a run sends: at most about 8 s at the bound the delay sets.
    static func bounded(_ count: Int, latencyMs: Double, concurrency: Int) -> Int {
        guard latencyMs > 0 else { return count }
        return max(1000, min(count, Int(Double(concurrency) * 1000 / latencyMs * 8)))
    }

    func runOnce(latencyMs: Double, concurrency: Int) async throws -> String {
        let sandbox = try SandboxProcess(threads: serverThreads, latencyMs: latencyMs)
        defer { sandbox.stop() }
        let count = Self.bounded(self.count, latencyMs: latencyMs, concurrency: concurrency)
        let peerCount = Self.bounded(self.peerCount, latencyMs: latencyMs, concurrency: concurrency)
        let creds = try SandboxCredentials.read(from: sandbox.directory)
        let key = try APNsSigningKey(p8: creds.apnsKeyPEM, keyID: creds.apnsKeyID, teamID: creds.apnsTeamID)
        let sample = APNsRenderer(bundleID: "com.example.app").render(try Self.benchMessage(), deviceToken: "00")
        let headers = sample.headers.map { ($0.name, $0.value) }
        let tokens = Self.tokens
        let rssBefore = Measure.residentBytes()
        let (ours, seconds, failures, opened) = try await Self.measureClient(
            sandbox: sandbox,
            count: count,
            concurrency: concurrency,
            connections: connections,
            streamsPerConnection: streamsPerConnection,
            clientThreads: clientThreads
        )
        let peak = Measure.peakResidentBytes()
        let bound = latencyMs > 0 ? String(format: ", bound %.0f/s", Double(concurrency) * 1000 / latencyMs) : ""
        print(
            "apns: \(count) notifications, \(concurrency) in flight, at most \(connections) connections, emulator answering after \(Self.ms(latencyMs)) on \(serverThreads) thread(s) in another process\(bound)"
        )
        print(
            String(
                format:
                    "  RichPushAPNs: %.0f notifications/s (%.2f s), %@ failed, %d connections open (at most %d streams each before the next)",
                ours,
                seconds,
                failures.description,
                opened,
                streamsPerConnection
            )
        )
        print(
            "  peak memory of the sending process: \(Measure.mb(peak)) (resident before the run: \(Measure.mb(rssBefore)))"
        )
        var row = String(format: "%@ %5d in flight: RichPushAPNs %6.0f/s", Self.ms(latencyMs), concurrency, ours)

        if peerCount > 0,
            let r = Peers.python(
                "aioapns_peer.py",
                [
                    "bench", sandbox.directory.path, String(sandbox.apnsPort), tokens[0], String(peerCount),
                    String(concurrency),
                ]
            ), let rate = r["rate"]?.doubleValue
        {
            print(
                String(
                    format: "  aioapns: %.0f notifications/s (%d sent, %d ok)",
                    rate,
                    Int(r["sent"]?.intValue ?? 0),
                    Int(r["ok"]?.intValue ?? 0)
                )
            )
            print(String(format: "  ratio RichPushAPNs / aioapns: %.1fx", ours / rate))
            row += String(format: ", aioapns %6.0f/s (%.1fx)", rate, ours / rate)
        } else if peerCount > 0 {
            print("  aioapns: not run (python3 -m pip install aioapns)")
        }
        let jwt = try JWT.es256(
            header: #"{"alg":"ES256","kid":"\#(key.keyID)"}"#,
            claims: #"{"iss":"\#(key.teamID)","iat":\#(Int(Date().timeIntervalSince1970))}"#,
            key: key.privateKey
        )
        let payloadFile = sandbox.directory.appendingPathComponent("payload.json")
        try Data(sample.body).write(to: payloadFile)
        // h2load's -m is streams per connection: the same total in flight over as many connections as ours opened.
        let h2Connections = max(1, opened)
        var h2args = [
            "-n", String(count), "-c", String(h2Connections), "-m", String(max(1, concurrency / h2Connections)), "-t",
            "1", "-d", payloadFile.path,
        ]
        for (n, v) in headers { h2args += ["-H", "\(n): \(v)"] }
        h2args += ["-H", "authorization: bearer \(jwt)", "https://127.0.0.1:\(sandbox.apnsPort)/3/device/\(tokens[0])"]
        if let (status, out) = try? Measure.runProcess("h2load", h2args), status == 0, let rate = Self.h2loadRate(out) {
            let ok = out.split(separator: "\n").first { $0.contains("status codes:") }.map(String.init) ?? ""
            print(String(format: "  h2load: %.0f requests/s (%@)", rate, ok.trimmingCharacters(in: .whitespaces)))
            print(String(format: "  ratio RichPushAPNs / h2load: %.2f", ours / rate))
            row += String(format: ", h2load %6.0f/s (%.2f)", rate, ours / rate)
        } else {
            print("  h2load: not run (apt-get install nghttp2-client)")
        }
        return row
    }

    static func ms(_ v: Double) -> String { v == v.rounded() ? "\(Int(v)) ms" : String(format: "%.1f ms", v) }

    static let tokens = (0..<1000).map { String(format: "%064x", $0 + 1) }

    static func benchMessage() throws -> PushMessage {
        try PushMessage.decode(
            JSONValue.parse(
                #"{"title":"Flash sale","body":"40% off until midnight","media":"https://cdn.example.com/sale.jpg"}"#
            )
        )
    }

    /// RichPushAPNs alone against the emulator: `count` sends of one rendered body over 1,000 tokens, after one
    /// send to warm the connections. Returns sends per second, the seconds taken and the failures.
    static func measureClient(
        sandbox: SandboxProcess,
        count: Int,
        concurrency: Int,
        connections: Int,
        streamsPerConnection: Int = HTTP2PoolDefaults.streamsPerConnection,
        clientThreads: Int
    ) async throws -> (rate: Double, seconds: Double, failures: Failures, connections: Int) {
        let creds = try SandboxCredentials.read(from: sandbox.directory)
        let key = try APNsSigningKey(p8: creds.apnsKeyPEM, keyID: creds.apnsKeyID, teamID: creds.apnsTeamID)
        let group = MultiThreadedEventLoopGroup(numberOfThreads: clientThreads)
        let client = APNsClient(
            configuration: .init(
                endpoint: .custom(host: "127.0.0.1", port: sandbox.apnsPort),
                authentication: .token(key),
                trust: .certificateAuthority(pem: creds.caCertificatePEM),
                connections: connections,
                streamsPerConnection: streamsPerConnection,
                requestTimeout: 30
            ),
            eventLoopGroup: group
        )
        let prepared = APNsPreparedRequest(
            APNsRenderer(bundleID: "com.example.app").render(try benchMessage(), deviceToken: "")
        )
        let tokens = Self.tokens
        _ = try await client.send(prepared, to: tokens[0])
        let start = Measure.now()
        let failures = try await drive(count: count, concurrency: concurrency) { i in
            do {
                _ = try await client.send(prepared, to: tokens[i % tokens.count])
                return nil
            } catch { return "\(error)" }
        }
        let seconds = Double(Measure.now() - start) / 1e9
        let opened = client.connectionStates.count
        await client.shutdown()
        try await group.shutdownGracefully()
        return (Double(count) / seconds, seconds, failures, opened)
    }

    static func h2loadRate(_ out: String) -> Double? {
        // "finished in 2.01s, 99502.35 req/s, 4.41MB/s"
        guard let line = out.split(separator: "\n").first(where: { $0.hasPrefix("finished in") }) else { return nil }
        let parts = line.split(separator: ",")
        guard parts.count > 1 else { return nil }
        return Double(parts[1].trimmingCharacters(in: .whitespaces).split(separator: " ").first ?? "")
    }

    /// Runs `count` operations with at most `concurrency` at once, each answering nil or why it failed; the
    /// failures by reason.
    static func drive(
        count: Int,
        concurrency: Int,
        _ op: @escaping @Sendable (Int) async -> String?
    ) async throws -> Failures {
        await withTaskGroup(of: String?.self) { group in
            var next = 0
            var failed = Failures()
            while next < min(concurrency, count) {
                let i = next
                group.addTask { await op(i) }
                next += 1
            }
            while let outcome = await group.next() {
                if let reason = outcome { failed.byReason[reason, default: 0] += 1 }
                if next < count {
                    let i = next
                    group.addTask { await op(i) }
                    next += 1
                }
            }
            return failed
        }
    }

    /// Failed operations, by reason.
    struct Failures: CustomStringConvertible {
        var byReason: [String: Int] = [:]
        var count: Int { byReason.values.reduce(0, +) }
        /// "0", or the count with each reason: "187 (90 × no response before the request timeout, …)".
        var description: String {
            guard count > 0 else { return "0" }
            let reasons = byReason.sorted { $0.value > $1.value }.prefix(3).map { "\($0.value) × \($0.key)" }
            return "\(count) (\(reasons.joined(separator: ", ")))"
        }
    }
}

struct FCMBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fcm",
        abstract:
            "Send messages through RichPushFCM to the FCM emulator; firebase-admin's send_each_async against the same emulator; ratio."
    )

    @Option(help: "Messages RichPushFCM sends.") var count = 100_000
    @Option(help: "Messages firebase-admin sends.") var peerCount = 10_000
    @Option(help: "Requests in flight.") var concurrency = 200
    @Option(help: "Emulator event-loop threads.") var serverThreads = 1
    @Option(name: .customLong("latency-ms"), help: "The emulator's delay before each answer.") var latencyMs = 0.0

    func validate() throws {
        guard (1...100_000).contains(concurrency) else {
            throw ValidationError("--concurrency must be from 1 to 100000.")
        }
        guard latencyMs.isFinite && (0...10_000).contains(latencyMs) else {
            throw ValidationError("--latency-ms must be from 0 to 10000.")
        }
    }

    func run() async throws {
        let sandbox = try SandboxProcess(threads: serverThreads, latencyMs: latencyMs)
        let count = APNsBench.bounded(self.count, latencyMs: latencyMs, concurrency: concurrency)
        let peerCount = APNsBench.bounded(self.peerCount, latencyMs: latencyMs, concurrency: concurrency)
        defer { sandbox.stop() }
        let account = try ServiceAccount(contentsOf: sandbox.directory.appendingPathComponent("service-account.json"))
        let creds = try SandboxCredentials.read(from: sandbox.directory)
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let client = FCMClient(
            configuration: .init(
                serviceAccount: account,
                endpoint: .custom(host: "127.0.0.1", port: sandbox.fcmPort),
                trust: .certificateAuthority(pem: creds.caCertificatePEM),
                connections: 2,
                requestTimeout: 30
            ),
            eventLoopGroup: group
        )
        let message = try PushMessage.decode(
            JSONValue.parse(
                #"{"title":"Flash sale","body":"40% off until midnight","media":"https://cdn.example.com/sale.jpg"}"#
            )
        )
        let renderer = FCMRenderer(projectID: account.projectID)
        let bodies = (0..<1000).map { i -> ByteBuffer in
            let r = renderer.render(message, to: .token("bench-device-token-\(i)"))
            var b = ByteBufferAllocator().buffer(capacity: r.bodyBytes.count)
            b.writeBytes(r.bodyBytes)
            return b
        }
        let path = "/v1/projects/\(account.projectID)/messages:send"
        _ = try await client.send(path: path, body: bodies[0])
        let start = Measure.now()
        let failures = try await APNsBench.drive(count: count, concurrency: concurrency) { i in
            do {
                _ = try await client.send(path: path, body: bodies[i % bodies.count])
                return nil
            } catch { return "\(error)" }
        }
        let seconds = Double(Measure.now() - start) / 1e9
        let ours = Double(count) / seconds
        await client.shutdown()
        try await group.shutdownGracefully()
        print(
            "fcm: \(count) messages, \(concurrency) in flight, emulator answering after \(APNsBench.ms(latencyMs)) on \(serverThreads) thread(s) in another process"
        )
        print(
            String(
                format: "  RichPushFCM: %.0f messages/s (%.2f s), %@ failed; peak memory %@",
                ours,
                seconds,
                failures.description,
                Measure.mb(Measure.peakResidentBytes())
            )
        )
        if peerCount > 0,
            let r = Peers.python(
                "firebase_admin_peer.py",
                ["bench", sandbox.directory.path, String(sandbox.fcmPort), "bench-device-token-0", String(peerCount)]
            ), let rate = r["rate"]?.doubleValue
        {
            print(
                String(
                    format: "  firebase-admin send_each_async: %.0f messages/s (%d sent, %d ok)",
                    rate,
                    Int(r["sent"]?.intValue ?? 0),
                    Int(r["ok"]?.intValue ?? 0)
                )
            )
            print(String(format: "  ratio RichPushFCM / firebase-admin: %.1fx", ours / rate))
        } else if peerCount > 0 {
            print("  firebase-admin: not run (python3 -m pip install firebase-admin)")
        }
    }
}
