import ArgumentParser
import Crypto
import Foundation
import RichPushCore
import RichPushWebPush

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
