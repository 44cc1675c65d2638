import ArgumentParser
import Crypto
import Foundation
import NIOPosix
import RichPushCore
import RichPushSandbox
import RichPushServer
import RichPushTransport
import RichPushWebPush

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Web Push's cost per message: encryption for one subscription (RFC 8291: a fresh key pair, ECDH, HKDF, AES-GCM)
/// and a VAPID token (an ES256 signature), ours and, in the same run, http_ece and py_vapid's (pywebpush's parts).
struct WebPushEncryptBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "webpush-encrypt",
        abstract: "Web Push encryption and VAPID signing per message, beside http_ece and py_vapid."
    )

    @Option var count = 5000
    @Option(help: "Plaintext bytes per message (at most 3993).") var size = 1000

    func run() throws {
        guard (1...1_000_000).contains(count) else { throw ValidationError("--count must be from 1 to 1000000.") }
        guard (0...WebPushEncryption.maxPlaintext).contains(size) else {
            throw ValidationError("--size must be from 0 to \(WebPushEncryption.maxPlaintext).")
        }
        let receiver = P256.KeyAgreement.PrivateKey()
        let auth = (0..<16).map { _ in UInt8.random(in: 0...255) }
        let message = [UInt8](repeating: 0x78, count: size)
        var sink = 0
        let t0 = Measure.now()
        for _ in 0..<count {
            sink &+= try WebPushEncryption.encrypt(message, p256dh: receiver.publicKey, auth: auth).count
        }
        let encrypt = Double(Measure.now() - t0) / 1000 / Double(count)
        let floor = try CryptoFloor.measure(count: count, size: size)
        let key = P256.Signing.PrivateKey()
        let endpoint = URL(string: "https://push.example.net/wpush/v2/abc")!
        let t1 = Measure.now()
        for _ in 0..<count {
            sink &+= try VAPID.authorization(
                endpoint: endpoint,
                key: key,
                subject: "mailto:ops@example.com",
                expires: Date().addingTimeInterval(3600)
            ).count
        }
        let sign = Double(Measure.now() - t1) / 1000 / Double(count)
        // What a sender pays per message: one token per push service origin, kept (VAPIDSigner).
        let signer = try VAPIDSigner(key: key, subject: "mailto:ops@example.com")
        let t2 = Measure.now()
        for _ in 0..<count { sink &+= try signer.authorization(for: endpoint).count }
        let cached = Double(Measure.now() - t2) / 1000 / Double(count)
        print("webpush-encrypt: \(count) messages of \(size) bytes (checksum \(sink % 997))")
        print(
            String(
                format:
                    "  RichPushWebPush: encrypt %.1f µs, VAPID token %.1f µs per message (%.2f µs with the signer's kept token)",
                encrypt,
                sign,
                cached
            )
        )
        print("  " + floor.line + String(format: "; encrypt is %.2fx it", encrypt / floor.total))
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent(
            "../../Benchmarks/webpush_encrypt.py"
        ).standardized.path
        let (status, out) = try Measure.runProcess("python3", [script, String(count), String(size)])
        guard status == 0, let peer = try? JSONValue.parse(out), let peerEncrypt = peer["encrypt_us"]?.doubleValue,
            let peerSign = peer["sign_us"]?.doubleValue
        else {
            print("  http_ece / py_vapid: not run (python3 -m pip install http_ece py-vapid)")
            throw ExitCode(1)
        }
        print(
            String(
                format: "  http_ece + py_vapid: encrypt %.1f µs, VAPID token %.1f µs per message",
                peerEncrypt,
                peerSign
            )
        )
        print(
            String(
                format: "  ratio: encryption %.1fx, token %.1fx, both %.1fx",
                peerEncrypt / encrypt,
                peerSign / sign,
                (peerEncrypt + peerSign) / (encrypt + sign)
            )
        )
    }
}

/// Encrypted sends per second to the sandbox's Web Push service (in a child process), through the server's
/// provider as a fan-out reaches it (the deliveries of one notification: rendered once, then encrypted per
/// subscription, token kept per origin, HTTP/2), and pywebpush's in the same run against the same service: its
/// sends per second with a kept session per thread, its best case.
struct WebPushSendBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "webpush-send",
        abstract: "Encrypted Web Push sends per second to the emulator, beside pywebpush."
    )

    @Option(help: "Sends of ours.") var count = 20_000
    @Option(help: "Sends of pywebpush's.") var peerCount = 2_000
    @Option(help: "Our sends in flight.") var concurrency = 200
    @Option(help: "pywebpush's threads.") var threads = 8
    @Option(help: "Subscriptions sent to, in turn.") var subscriptions = 100

    func run() async throws {
        guard (1...1_000_000).contains(count), (0...100_000).contains(peerCount), (1...10_000).contains(concurrency),
            (1...64).contains(threads), (1...10_000).contains(subscriptions)
        else { throw ValidationError("counts out of range") }
        let sandbox = try SandboxProcess(threads: 1)
        defer { sandbox.stop() }
        let creds = try SandboxCredentials.read(from: sandbox.directory)
        let key = P256.Signing.PrivateKey()
        let publicKey = VAPID.publicKey(key.publicKey)
        var subs: [JSONValue] = []
        for _ in 0..<subscriptions {
            subs.append(try await Self.subscribe(adminPort: sandbox.adminPort, key: publicKey))
        }
        let tokens = try subs.map { try WebPushSubscription(json: $0).token }
        let message = PushMessage(
            alert: .init(title: "Flash sale", body: "40% off until midnight"),
            media: [PushMedia(url: "https://cdn.example.com/sale.jpg")],
            deepLink: "https://shop.example.com/sale"
        )
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let provider = WebPushProvider(
            .init(
                policy: AddressPolicy(allowAll: true),
                trust: .certificateAuthority(pem: creds.caCertificatePEM),
                connectionsPerOrigin: 4
            ),
            eventLoopGroup: group
        )
        let app = ServerApp(
            id: "bench",
            name: "bench",
            bundleID: "",
            webPush: WebPushCredentials(privateKey: Array(key.rawRepresentation), subject: "mailto:bench@example.com")
        )
        // A warm-up: the connections opened and the token signed before the clock starts.
        _ = await provider.send(token: tokens[0], message: message, app: app, receiptURL: nil)
        func delivery(_ n: Int) -> DeliveryRecord {
            DeliveryRecord(
                id: Int64(n + 1),
                queued: NewDelivery(
                    notificationID: "bench",
                    appID: app.id,
                    provider: .webPush,
                    target: .token(tokens[n % tokens.count])
                )
            )
        }
        let cpu0 = Measure.cpuSeconds()
        let t0 = Measure.now()
        let outcomes = await withTaskGroup(of: Bool.self) { tasks -> (ok: Int, failed: Int) in
            var next = 0
            var (ok, failed) = (0, 0)
            func add() {
                let d = delivery(next)
                next += 1
                tasks.addTask {
                    if case .delivered = await provider.send(d, message: message, app: app, receipt: nil) {
                        return true
                    }
                    return false
                }
            }
            while next < min(concurrency, count) { add() }
            for await delivered in tasks {
                if delivered { ok += 1 } else { failed += 1 }
                if next < count { add() }
            }
            return (ok, failed)
        }
        let seconds = Double(Measure.now() - t0) / 1e9
        let cpu = Measure.cpuSeconds() - cpu0
        await provider.shutdown()
        try await group.shutdownGracefully()
        let floor = try CryptoFloor.measure(count: 3000, size: WebPushMessage(message).bytes.count)
        let ours = Double(count) / seconds
        print(
            "webpush-send: \(count) encrypted pushes to \(subscriptions) subscriptions of the emulator (another process), \(concurrency) in flight"
        )
        print(
            String(
                format: "  RichPush: %.0f sends/s (%d delivered, %d failed), %.1f µs CPU per send in this process",
                ours,
                outcomes.ok,
                outcomes.failed,
                cpu / Double(count) * 1e6
            )
        )
        print(
            "  " + floor.line
                + String(format: "; a send's CPU is %.2fx it", cpu / Double(count) * 1e6 / floor.total)
        )
        guard peerCount > 0 else { return }
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("webpush-send-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let ca = dir.appendingPathComponent("ca.pem").path
        try creds.caCertificatePEM.write(toFile: ca, atomically: true, encoding: .utf8)
        let input: JSONValue = [
            "subscriptions": .array(subs), "key": .string(JWT.base64URL(key.rawRepresentation)), "ca": .string(ca),
            "payload": .string(WebPushMessage(message).payload.jsonString), "count": .int(Int64(peerCount)),
            "threads": .int(Int64(threads)),
        ]
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent(
            "../../Benchmarks/webpush_send.py"
        ).standardized.path
        for kept in [true, false] {
            var input = input
            if case .object(var o) = input {
                o["session"] = .bool(kept)
                // A new connection per push is slower: fewer pushes measure it as well.
                if !kept { o["count"] = .int(Int64(max(1, peerCount / 4))) }
                input = .object(o)
            }
            let inputFile = dir.appendingPathComponent("input.json").path
            try input.jsonString.write(toFile: inputFile, atomically: true, encoding: .utf8)
            let (status, out) = try Measure.runProcess("sh", ["-c", "python3 \"$0\" < \"$1\"", script, inputFile])
            guard status == 0, let peer = try? JSONValue.parse(out), let rate = peer["per_second"]?.doubleValue,
                let peerCPU = peer["cpu_s"]?.doubleValue, let n = input["count"]?.intValue
            else {
                print("  pywebpush: not run (python3 -m pip install pywebpush)")
                throw ExitCode(1)
            }
            print(
                String(
                    format:
                        "  pywebpush (%d threads, %@): %.0f sends/s %@, %.0f µs CPU per send; ratio %.1fx the sends per second, %.1fx the CPU per send",
                    threads,
                    kept ? "a kept session each" : "webpush() as documented: a new connection per push",
                    rate,
                    peer["statuses"]?.jsonString ?? "",
                    peerCPU / Double(n) * 1e6,
                    ours / rate,
                    peerCPU / Double(n) / (cpu / Double(count))
                )
            )
        }
    }

    /// A subscription from the sandbox's admin API, made for this VAPID key.
    static func subscribe(adminPort: Int, key: String) async throws -> JSONValue {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(adminPort)/webpush/subscriptions")!)
        request.httpMethod = "POST"
        request.httpBody = Data((["application_server_key": .string(key)] as JSONValue).jsonString.utf8)
        let (data, _) = try await URLSession.shared.data(for: request)
        return try JSONValue.parse(data)
    }
}

/// The floor of a Web Push message's cryptography (RFC 8291), each part alone in a loop, through the library's
/// primitives: a fresh key pair with its public key written out, the ECDH, the five HMAC-SHA256 of the two HKDFs,
/// and AES-128-GCM over the record. A send costs at least their sum. Timed in the thread's CPU time, as a send's
/// cost is the process's CPU time: in wall time a busy machine doubled the floor and halved the ratio.
struct CryptoFloor {
    var key, ecdh, hkdf, aes: Double
    var total: Double { key + ecdh + hkdf + aes }
    var line: String {
        String(
            format: "floor of the cryptography: %.1f µs (key pair %.1f, ECDH %.1f, HKDF %.1f, AES-GCM %.1f)",
            total,
            key,
            ecdh,
            hkdf,
            aes
        )
    }

    static func measure(count: Int, size: Int) throws -> CryptoFloor {
        let receiver = P256.KeyAgreement.PrivateKey().publicKey
        var sink = 0
        var scalars: [[UInt8]] = []
        for _ in 0..<count {
            scalars.append(Array(SymmetricKey(size: .bits256).withUnsafeBytes { Array($0) }))
        }
        var senders: [P256.KeyAgreement.PrivateKey] = []
        senders.reserveCapacity(count)
        let t0 = Measure.threadCPU()
        for scalar in scalars {
            let k = try P256.KeyAgreement.PrivateKey(rawRepresentation: scalar)
            sink &+= k.publicKey.x963Representation.count
            senders.append(k)
        }
        let t1 = Measure.threadCPU()
        for k in senders { sink &+= try k.sharedSecretFromKeyAgreement(with: receiver).withUnsafeBytes { $0.count } }
        let t2 = Measure.threadCPU()
        let auth = SymmetricKey(size: .bits128)
        let info = [UInt8](repeating: 1, count: 145)
        for _ in 0..<count {
            let a = HMAC<SHA256>.authenticationCode(for: info.prefix(32), using: auth)
            let b = HMAC<SHA256>.authenticationCode(for: info, using: SymmetricKey(data: a))
            let c = HMAC<SHA256>.authenticationCode(for: info.prefix(32), using: SymmetricKey(data: b))
            let prk = SymmetricKey(data: c)
            sink &+= HMAC<SHA256>.authenticationCode(for: info.prefix(29), using: prk).byteCount
            sink &+= HMAC<SHA256>.authenticationCode(for: info.prefix(25), using: prk).byteCount
        }
        let t3 = Measure.threadCPU()
        let record = [UInt8](repeating: 0x78, count: size + 1)
        let cek = SymmetricKey(size: .bits128)
        let nonce = try AES.GCM.Nonce(data: [UInt8](repeating: 7, count: 12))
        for _ in 0..<count { sink &+= try AES.GCM.seal(record, using: cek, nonce: nonce).ciphertext.count }
        let t4 = Measure.threadCPU()
        if sink == 42 { print("") }
        func us(_ a: UInt64, _ b: UInt64) -> Double { Double(b - a) / 1000 / Double(count) }
        return CryptoFloor(key: us(t0, t1), ecdh: us(t1, t2), hkdf: us(t2, t3), aes: us(t3, t4))
    }
}
