import Crypto
import Foundation

/// Message encryption for Web Push (RFC 8291) in the `aes128gcm` content coding (RFC 8188), as one record: what a
/// sender does to a message for one subscription, and what the browser (or our emulator) does to read it.
///
/// The body is `salt (16) ‖ record size (4, big-endian) ‖ key id length (1) = 65 ‖ the sender's ephemeral P-256 key
/// (65, uncompressed) ‖ AES-128-GCM(plaintext ‖ 0x02 ‖ padding zeros) ‖ tag (16)`, where
/// `IKM = HKDF(salt: auth, ikm: ECDH(sender, receiver), info: "WebPush: info" ‖ 0 ‖ receiver key ‖ sender key, 32)`,
/// `CEK = HKDF(salt, IKM, "Content-Encoding: aes128gcm" ‖ 0, 16)` and `NONCE = HKDF(salt, IKM,
/// "Content-Encoding: nonce" ‖ 0, 12)` (RFC 8291 §3.3–3.4, RFC 8188 §2.2–2.3).
public enum WebPushEncryption {
    /// The record size written: a push service takes bodies of 4,096 bytes (RFC 8030 §7.2), one record.
    public static let recordSize = 4096
    /// Salt, record size, key id length and the sender's key.
    public static let headerLength = 16 + 4 + 1 + 65
    /// The most plaintext one message carries: 4,096 less the header, the tag and the delimiter (RFC 8291 §4).
    public static let maxPlaintext = recordSize - headerLength - 16 - 1

    /// Why a message, a subscription or a VAPID token was refused, naming the rule.
    public struct Failure: Error, CustomStringConvertible, Equatable {
        public var rule: String
        public var description: String
        init(_ rule: String, _ description: String) {
            self.rule = rule
            self.description = description
        }
    }

    /// Encrypts `plaintext` for the subscription keys (`p256dh`, the receiver's public key; `auth`, its 16-byte
    /// secret). A fresh sender key and salt are made for every message unless given (tests give them to compare
    /// with known bodies); `padding` zero bytes are added inside the record to hide the length.
    public static func encrypt(
        _ plaintext: [UInt8],
        p256dh receiver: P256.KeyAgreement.PublicKey,
        auth: [UInt8],
        padding: Int = 0,
        sender given: P256.KeyAgreement.PrivateKey? = nil,
        salt givenSalt: [UInt8]? = nil
    ) throws -> [UInt8] {
        try encrypt(
            plaintext,
            p256dh: receiver,
            receiverKey: nil,
            auth: auth,
            padding: padding,
            sender: given,
            salt: givenSalt
        )
    }

    /// The same, with the receiver's key also as the bytes it was read from (a subscription's `p256dh`), so that it
    /// is not written out again: writing a point takes a field inversion, one of the three a message took (together
    /// about 4 % of a send's CPU under `perf`).
    static func encrypt(
        _ plaintext: [UInt8],
        p256dh receiver: P256.KeyAgreement.PublicKey,
        receiverKey receiverBytes: [UInt8]?,
        auth: [UInt8],
        padding: Int = 0,
        sender given: P256.KeyAgreement.PrivateKey? = nil,
        salt givenSalt: [UInt8]? = nil
    ) throws -> [UInt8] {
        // One draw for the key's scalar and the salt (the system's generator asks the kernel for 8 bytes a call).
        var drawn = givenSalt == nil || given == nil ? randomBytes(48) : []
        let sender = try given ?? ephemeralKey(scalar: Array(drawn[16..<48]))
        guard auth.count == 16 else { throw Failure("auth-length", "the subscription's auth secret must be 16 bytes") }
        guard padding >= 0, plaintext.count + padding <= maxPlaintext else {
            throw Failure(
                "payload-size",
                "the message is \(plaintext.count + max(0, padding)) bytes encrypted whole; one Web Push message carries at most \(maxPlaintext)"
            )
        }
        let salt = givenSalt ?? Array(drawn[0..<16])
        drawn.withUnsafeMutableBytes { _ = $0.initializeMemory(as: UInt8.self, repeating: 0) }
        guard salt.count == 16 else { throw Failure("salt-length", "the salt must be 16 bytes") }
        let senderKey = Array(sender.publicKey.x963Representation)
        let receiverKey =
            receiverBytes.flatMap { $0.count == 65 && $0.first == 0x04 ? $0 : nil }
            ?? Array(receiver.x963Representation)
        let (key, nonce) = try derive(
            secret: sender.sharedSecretFromKeyAgreement(with: receiver),
            auth: auth,
            receiverKey: receiverKey,
            senderKey: senderKey,
            salt: salt
        )
        let record = plaintext + [0x02] + [UInt8](repeating: 0, count: padding)
        let sealed = try AES.GCM.seal(record, using: key, nonce: AES.GCM.Nonce(data: nonce))
        var body = salt
        body += withUnsafeBytes(of: UInt32(recordSize).bigEndian) { Array($0) }
        body.append(UInt8(senderKey.count))
        body += senderKey
        body += sealed.ciphertext
        body += sealed.tag
        return body
    }

    /// Reads a message with the receiver's private key and auth secret (what a browser does).
    public static func decrypt(
        _ body: [UInt8],
        privateKey receiver: P256.KeyAgreement.PrivateKey,
        auth: [UInt8]
    ) throws -> [UInt8] {
        guard auth.count == 16 else { throw Failure("auth-length", "the auth secret must be 16 bytes") }
        guard body.count >= 21 else { throw Failure("header", "the body is shorter than the aes128gcm header") }
        let salt = Array(body[0..<16])
        let rs = body[16..<20].reduce(0) { $0 << 8 | Int($1) }
        let idLength = Int(body[20])
        guard rs >= 18 else { throw Failure("record-size", "the record size \(rs) is below 18") }
        guard idLength == 65, body.count >= 21 + idLength else {
            throw Failure("key-id", "the key id must be the sender's 65-byte uncompressed P-256 key")
        }
        let senderKey = Array(body[21..<(21 + idLength)])
        let record = Array(body[(21 + idLength)...])
        guard record.count > 16 else { throw Failure("record", "the record is shorter than its tag") }
        guard record.count <= rs else {
            throw Failure("record-size", "one record of \(record.count) bytes is longer than the record size \(rs)")
        }
        let sender: P256.KeyAgreement.PublicKey
        do {
            sender = try P256.KeyAgreement.PublicKey(x963Representation: senderKey)
        } catch {
            throw Failure("key-id", "the key id is not a point on P-256")
        }
        let (key, nonce) = try derive(
            secret: receiver.sharedSecretFromKeyAgreement(with: sender),
            auth: auth,
            receiverKey: Array(receiver.publicKey.x963Representation),
            senderKey: senderKey,
            salt: salt
        )
        let opened: Data
        do {
            opened = try AES.GCM.open(
                AES.GCM.SealedBox(
                    nonce: AES.GCM.Nonce(data: nonce),
                    ciphertext: record.dropLast(16),
                    tag: record.suffix(16)
                ),
                using: key
            )
        } catch {
            throw Failure("decryption", "the record does not open with these keys (wrong keys, or altered)")
        }
        // Padding is zeros after the delimiter; the only record is the last, whose delimiter is 2.
        guard let end = opened.lastIndex(where: { $0 != 0 }), opened[end] == 0x02 else {
            throw Failure("delimiter", "the record does not end with the last record's delimiter (2)")
        }
        return Array(opened[opened.startIndex..<end])
    }

    /// A fresh key pair for one message, made from 32 random bytes: the library's own generation also runs a
    /// consistency check (a signature and its verification) on every key, which doubled the cost of a message
    /// (`richpush-bench webpush-encrypt`). A scalar outside the curve's order (about one draw in 2^32) is drawn again.
    static func ephemeralKey(scalar first: [UInt8]? = nil) throws -> P256.KeyAgreement.PrivateKey {
        var scalar = first ?? randomBytes(32)
        defer { scalar.withUnsafeMutableBytes { _ = $0.initializeMemory(as: UInt8.self, repeating: 0) } }
        for _ in 0..<8 {
            if let key = try? P256.KeyAgreement.PrivateKey(rawRepresentation: scalar) { return key }
            // Drawn again in place, so that the refused scalar is not left behind in a freed buffer.
            let again = randomBytes(32)
            scalar.withUnsafeMutableBufferPointer { s in for i in s.indices { s[i] = again[i] } }
        }
        return P256.KeyAgreement.PrivateKey()
    }

    /// `count` bytes of the system's generator, 8 to a draw (each draw is a call to the kernel: drawing a byte at a
    /// time made 48 calls a message).
    static func randomBytes(_ count: Int) -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        var bytes = [UInt8]()
        bytes.reserveCapacity(count + 8)
        while bytes.count < count {
            withUnsafeBytes(of: generator.next()) { bytes += $0 }
        }
        bytes.removeLast(bytes.count - count)
        return bytes
    }

    /// The content key and nonce (RFC 8291 §3.4 and RFC 8188 §2.2), as five HMAC-SHA256 of a few dozen bytes each:
    /// every HKDF here asks for one block of output, so each is one HMAC to extract and one to expand, and the key
    /// and the nonce share their extract. Done through the library's HKDF and key types, the same derivation was
    /// about a fifth of a Web Push send's CPU (`perf` under `richpush-bench webpush-send`).
    static func derive(
        secret: SharedSecret,
        auth: [UInt8],
        receiverKey: [UInt8],
        senderKey: [UInt8],
        salt: [UInt8]
    ) throws -> (SymmetricKey, [UInt8]) {
        let shared = secret.withUnsafeBytes { Array($0) }
        // IKM = HKDF(salt: auth, ikm: the ECDH secret, info: "WebPush: info" ‖ 0 ‖ receiver ‖ sender, 32 bytes).
        let keyPRK = hmac(key: auth, shared)
        let ikm = hmac(key: keyPRK, Self.keyInfoLabel, receiverKey, senderKey, [1])
        // CEK and NONCE = HKDF(salt, IKM, their info ‖ 0, 16 and 12 bytes).
        let prk = hmac(key: salt, ikm)
        let key = hmac(key: prk, Self.keyLabel)
        let nonce = hmac(key: prk, Self.nonceLabel)
        return (SymmetricKey(data: key.prefix(16)), Array(nonce.prefix(12)))
    }

    /// The infos with their zero and HKDF-Expand's first counter byte.
    static let keyInfoLabel = Array("WebPush: info".utf8) + [0]
    static let keyLabel = Array("Content-Encoding: aes128gcm".utf8) + [0, 1]
    static let nonceLabel = Array("Content-Encoding: nonce".utf8) + [0, 1]

    /// HMAC-SHA256 (RFC 2104) of the parts, in order, under `key`.
    static func hmac(key: [UInt8], _ parts: [UInt8]...) -> [UInt8] {
        var block = key.count > 64 ? Array(SHA256.hash(data: key)) : key
        block += repeatElement(0, count: 64 - block.count)
        var inner = SHA256()
        inner.update(data: block.map { $0 ^ 0x36 })
        for part in parts { inner.update(data: part) }
        var outer = SHA256()
        outer.update(data: block.map { $0 ^ 0x5C })
        outer.update(data: Array(inner.finalize()))
        return Array(outer.finalize())
    }
}
