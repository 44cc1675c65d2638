import Crypto
import Foundation
import RichPushCore
import RichPushTestSupport
import RichPushTransport
import Testing

@testable import RichPushWebPush

/// Web Push's message encryption (RFC 8291 over RFC 8188) and VAPID (RFC 8292), each checked both ways against an
/// independent implementation: `http_ece` opens what we encrypt and we open what it encrypts; `py_vapid` verifies
/// our Authorization header and we verify its.
@Suite struct WebPushCryptoTests {
    static func hex(_ bytes: some Sequence<UInt8>) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
    static func unhex(_ s: String) -> [UInt8] {
        var out: [UInt8] = []
        var i = s.startIndex
        while let j = s.index(i, offsetBy: 2, limitedBy: s.endIndex), i != j {
            out.append(UInt8(s[i..<j], radix: 16) ?? 0)
            i = j
        }
        return out
    }

    static func randomAuth() -> [UInt8] { (0..<16).map { _ in UInt8.random(in: 0...255) } }

    @Test func aMessageOpensWithTheReceiversKeysOnly() async throws {
        let receiver = P256.KeyAgreement.PrivateKey()
        let auth = Self.randomAuth()
        let message = Array(#"{"title":"Flash sale","image":"https://cdn.example.com/sale.jpg"}"#.utf8)
        let body = try WebPushEncryption.encrypt(message, p256dh: receiver.publicKey, auth: auth, padding: 30)
        #expect(body.count == WebPushEncryption.headerLength + message.count + 1 + 30 + 16)
        #expect(Array(body[16..<21]) == [0, 0, 0x10, 0, 65])
        #expect(try WebPushEncryption.decrypt(body, privateKey: receiver, auth: auth) == message)
        // Two messages never share a key and nonce: a fresh salt and sender key each time.
        let again = try WebPushEncryption.encrypt(message, p256dh: receiver.publicKey, auth: auth, padding: 30)
        #expect(Array(again[0..<16]) != Array(body[0..<16]) && Array(again[21..<86]) != Array(body[21..<86]))
        // The wrong secret, the wrong key, one flipped bit: refused, by name.
        #expect(throws: WebPushEncryption.Failure.self) {
            try WebPushEncryption.decrypt(body, privateKey: receiver, auth: Self.randomAuth())
        }
        #expect(throws: WebPushEncryption.Failure.self) {
            try WebPushEncryption.decrypt(body, privateKey: P256.KeyAgreement.PrivateKey(), auth: auth)
        }
        var altered = body
        altered[100] ^= 1
        do {
            _ = try WebPushEncryption.decrypt(altered, privateKey: receiver, auth: auth)
            Issue.record("an altered body opened")
        } catch let failure as WebPushEncryption.Failure {
            #expect(failure.rule == "decryption")
        }
        for cut in [0, 20, 85, 101] {
            #expect(throws: WebPushEncryption.Failure.self) {
                try WebPushEncryption.decrypt(Array(body.prefix(cut)), privateKey: receiver, auth: auth)
            }
        }
    }

    /// A subscription read from its token encrypts with the key it parsed and the bytes it read, not the key
    /// written out again: the body is the same byte for byte as with the key alone, for a given sender key and
    /// salt; bytes that are not an uncompressed point are not used; and the sender's scalar and the salt are drawn
    /// fresh for every message.
    @Test func theSubscriptionsOwnBytesMakeTheSameBody() throws {
        let receiver = P256.KeyAgreement.PrivateKey()
        let auth = Self.randomAuth()
        let token =
            "https://push.example.net/wpush/abc#" + JWT.base64URL(Data(receiver.publicKey.x963Representation)) + "."
            + JWT.base64URL(Data(auth))
        let subscription = try WebPushSubscription(token: token)
        let sender = P256.KeyAgreement.PrivateKey()
        let salt = Self.randomAuth()
        let message = Array("a message".utf8)
        let plain = try WebPushEncryption.encrypt(
            message,
            p256dh: receiver.publicKey,
            auth: auth,
            sender: sender,
            salt: salt
        )
        for bytes in [subscription.p256dh, [], Array(subscription.p256dh.dropFirst()), Array(repeating: 4, count: 65)] {
            let body = try WebPushEncryption.encrypt(
                message,
                p256dh: try subscription.publicKey,
                receiverKey: bytes,
                auth: auth,
                sender: sender,
                salt: salt
            )
            if bytes == subscription.p256dh || bytes.count != 65 {
                #expect(body == plain, "\(bytes.count) bytes")
            } else {
                // Bytes of the right shape that are not the key make a body the receiver cannot open.
                #expect(throws: WebPushEncryption.Failure.self) {
                    try WebPushEncryption.decrypt(body, privateKey: receiver, auth: auth)
                }
            }
        }
        let a = try subscription.encrypt(message)
        let b = try subscription.encrypt(message)
        #expect(try WebPushEncryption.decrypt(a, privateKey: receiver, auth: auth) == message)
        #expect(Array(a[0..<16]) != Array(b[0..<16]) && Array(a[21..<86]) != Array(b[21..<86]))
        let draws = (0..<64).map { _ in WebPushEncryption.randomBytes(48) }
        #expect(draws.allSatisfy { $0.count == 48 } && Set(draws.map { Self.hex($0) }).count == 64)
        #expect(WebPushEncryption.randomBytes(5).count == 5 && WebPushEncryption.randomBytes(0).isEmpty)
        // A subscription whose key is changed encrypts to the new key.
        var moved = subscription
        let other = P256.KeyAgreement.PrivateKey()
        moved.p256dh = Array(other.publicKey.x963Representation)
        #expect(try WebPushEncryption.decrypt(moved.encrypt(message), privateKey: other, auth: auth) == message)
    }

    /// Bodies from outside (the emulator reads what senders post) are cut, grown and flipped at random: each is
    /// refused with a named rule or opened, never a trap, and only the untouched body (or one whose record size
    /// alone grew) opens.
    /// The derivation's own HMAC-SHA256 agrees with the library's, for keys shorter and longer than a block and
    /// messages in several parts.
    @Test func theDerivationsHMACIsTheLibrarys() {
        var random = SeededRandom(seed: 2104)
        for keyLength in [0, 1, 16, 32, 63, 64, 65, 200] {
            let key = (0..<keyLength).map { _ in UInt8.random(in: 0...255, using: &random) }
            let parts = (0..<3).map { n in (0..<(n * 37)).map { _ in UInt8.random(in: 0...255, using: &random) } }
            let expected = HMAC<SHA256>.authenticationCode(
                for: parts.joined().map { $0 },
                using: SymmetricKey(data: key)
            )
            #expect(
                WebPushEncryption.hmac(key: key, parts[0], parts[1], parts[2]) == Array(expected),
                "key \(keyLength)"
            )
        }
    }

    @Test func hostileBodiesAreRefusedByName() async throws {
        let receiver = P256.KeyAgreement.PrivateKey()
        let auth = Self.randomAuth()
        let body = try WebPushEncryption.encrypt(Array("x".utf8), p256dh: receiver.publicKey, auth: auth)
        var random = SeededRandom(seed: 8291)
        var rules: Set<String> = []
        for round in 0..<3000 {
            var b = body
            switch round % 4 {
            case 0: b = Array(b.prefix(Int(random.next() % UInt64(b.count + 1))))
            case 1: b[Int(random.next() % UInt64(b.count))] ^= UInt8(truncatingIfNeeded: random.next() | 1)
            case 2: b += (0..<Int(random.next() % 5000)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            default: b = (0..<Int(random.next() % 200)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            }
            do {
                let opened = try WebPushEncryption.decrypt(b, privateKey: receiver, auth: auth)
                // The record size is the one field no key covers (RFC 8188 §2): a larger one changes nothing for a
                // single record. Anything else changed does not open.
                let changed = b.count == body.count ? b.indices.filter { b[$0] != body[$0] } : [-1]
                #expect(
                    opened == Array("x".utf8) && changed.allSatisfy { (16..<20).contains($0) },
                    "a changed body opened (round \(round), bytes \(changed))"
                )
            } catch let f as WebPushEncryption.Failure {
                rules.insert(f.rule)
            }
        }
        #expect(rules.isSuperset(of: ["header", "key-id", "record-size", "decryption"]), "\(rules)")
    }

    /// 4,096 bytes encrypted is the most a push service must take (RFC 8030 §7.2): 3,993 of plaintext.
    @Test func theLargestMessageIs3993BytesOfPlaintext() async throws {
        let receiver = P256.KeyAgreement.PrivateKey()
        let auth = Self.randomAuth()
        let largest = [UInt8](repeating: 0x41, count: WebPushEncryption.maxPlaintext)
        #expect(WebPushEncryption.maxPlaintext == 3993)
        #expect(try WebPushEncryption.encrypt(largest, p256dh: receiver.publicKey, auth: auth).count == 4096)
        do {
            _ = try WebPushEncryption.encrypt(largest + [0x41], p256dh: receiver.publicKey, auth: auth)
            Issue.record("3,994 bytes were encrypted")
        } catch let failure as WebPushEncryption.Failure {
            #expect(failure.rule == "payload-size" && failure.description.contains("3993"))
        }
        #expect(throws: WebPushEncryption.Failure.self) {
            try WebPushEncryption.encrypt([1], p256dh: receiver.publicKey, auth: [1, 2, 3])
        }
    }

    /// Both ways with `http_ece` (the library Python's Web Push senders use).
    @Test func httpEceOpensOursAndWeOpenItsMessages() async throws {
        let receiver = P256.KeyAgreement.PrivateKey()
        let auth = Self.randomAuth()
        let message = Array("When the picture arrives, the notification shows it.".utf8)
        let ours = try WebPushEncryption.encrypt(message, p256dh: receiver.publicKey, auth: auth, padding: 7)
        let script = """
            import http_ece, json, sys
            from cryptography.hazmat.primitives.asymmetric import ec
            from cryptography.hazmat.primitives import serialization
            d = json.load(sys.stdin)
            receiver = ec.derive_private_key(int(d["receiver"], 16), ec.SECP256R1())
            opened = http_ece.decrypt(bytes.fromhex(d["body"]), private_key=receiver,
                                      auth_secret=bytes.fromhex(d["auth"]), version="aes128gcm")
            sender = ec.generate_private_key(ec.SECP256R1())
            theirs = http_ece.encrypt(bytes.fromhex(d["message"]), private_key=sender,
                                      dh=bytes.fromhex(d["public"]), auth_secret=bytes.fromhex(d["auth"]),
                                      version="aes128gcm")
            print(json.dumps({"opened": opened.hex(), "theirs": theirs.hex()}))
            """
        let input: JSONValue = [
            "receiver": .string(Self.hex(receiver.rawRepresentation)),
            "public": .string(Self.hex(receiver.publicKey.x963Representation)), "auth": .string(Self.hex(auth)),
            "body": .string(Self.hex(ours)), "message": .string(Self.hex(message)),
        ]
        let run = try await Python.run(script, stdin: String(decoding: input.serialized(), as: UTF8.self))
        let text = String(decoding: run.output, as: UTF8.self)
        try #require(run.status == 0, "\(text)")
        let answer = try JSONValue.parse(run.output)
        #expect(Self.unhex(answer["opened"]?.stringValue ?? "") == message)
        let theirs = Self.unhex(answer["theirs"]?.stringValue ?? "")
        #expect(try WebPushEncryption.decrypt(theirs, privateKey: receiver, auth: auth) == message)
    }

    /// Both ways with `py_vapid` (the library Python's Web Push senders sign with).
    @Test func pyVapidVerifiesOursAndWeVerifyItsHeaders() async throws {
        let key = P256.Signing.PrivateKey()
        let endpoint = try #require(URL(string: "https://push.example.net:8443/wpush/v2/abc?x=1"))
        #expect(VAPID.audience(of: endpoint) == "https://push.example.net:8443")
        #expect(
            VAPID.audience(of: URL(string: "https://FCM.googleapis.com:443/fcm/send/x")!)
                == "https://fcm.googleapis.com"
        )
        let now = Date()
        let header = try VAPID.authorization(
            endpoint: endpoint,
            key: key,
            subject: "mailto:ops@example.com",
            expires: now.addingTimeInterval(12 * 3600),
            now: now
        )
        #expect(header.hasPrefix("vapid t=") && header.contains(",k=" + VAPID.publicKey(key.publicKey)))
        let verified = try VAPID.verify(header, endpoint: endpoint, subscribedWith: VAPID.publicKey(key.publicKey))
        #expect(verified.subject == "mailto:ops@example.com")
        // Refusals, each by name: another origin, another key, a stale token, a token for more than a day.
        func rule(_ body: () throws -> Any) -> String? {
            do {
                _ = try body()
                return nil
            } catch let f as VAPID.Failure { return f.rule } catch { return "\(error)" }
        }
        #expect(
            rule { try VAPID.verify(header, endpoint: URL(string: "https://other.example/x")!) } == "vapid-audience"
        )
        #expect(
            rule {
                try VAPID.verify(
                    header,
                    endpoint: endpoint,
                    subscribedWith: VAPID.publicKey(P256.Signing.PrivateKey().publicKey)
                )
            }
                == "vapid-key-mismatch"
        )
        #expect(
            rule { try VAPID.verify(header, endpoint: endpoint, now: now.addingTimeInterval(13 * 3600)) }
                == "vapid-expiry"
        )
        #expect(
            rule {
                try VAPID.authorization(
                    endpoint: endpoint,
                    key: key,
                    subject: "mailto:a@b.c",
                    expires: now.addingTimeInterval(90_000),
                    now: now
                )
            } == "vapid-expiry"
        )
        #expect(
            rule {
                try VAPID.authorization(
                    endpoint: endpoint,
                    key: key,
                    subject: "ops@example.com",
                    expires: now.addingTimeInterval(60)
                )
            }
                == "vapid-subject"
        )
        let forged = header.replacingOccurrences(of: ",k=", with: ",k=" + "A")
        #expect(rule { try VAPID.verify(forged, endpoint: endpoint) } != nil)

        let script = """
            import json, sys, time
            from py_vapid import Vapid02, b64urlencode
            from cryptography.hazmat.primitives import serialization
            d = json.load(sys.stdin)
            ok = Vapid02.verify(d["header"])
            v = Vapid02.from_raw(d["raw"].encode())
            theirs = v.sign({"aud": d["aud"], "exp": int(time.time()) + 3600, "sub": "mailto:peer@example.com"})
            print(json.dumps({"ours": ok, "theirs": theirs["Authorization"]}))
            """
        let input: JSONValue = [
            "header": .string(header), "raw": .string(JWT.base64URL(key.rawRepresentation)),
            "aud": .string(VAPID.audience(of: endpoint) ?? ""),
        ]
        let run = try await Python.run(script, stdin: String(decoding: input.serialized(), as: UTF8.self))
        let text = String(decoding: run.output, as: UTF8.self)
        try #require(run.status == 0, "\(text)")
        let answer = try JSONValue.parse(run.output)
        #expect(answer["ours"] == true, "\(text)")
        let theirs = try #require(answer["theirs"]?.stringValue)
        let peer = try VAPID.verify(theirs, endpoint: endpoint, subscribedWith: VAPID.publicKey(key.publicKey))
        #expect(peer.subject == "mailto:peer@example.com")
    }

    /// `PushSubscription.toJSON()` as a browser gives it, and every way it can be wrong.
    @Test func aSubscriptionIsReadWithItsRules() async throws {
        let receiver = P256.KeyAgreement.PrivateKey()
        let p256dh = JWT.base64URL(receiver.publicKey.x963Representation)
        let auth = JWT.base64URL(Self.randomAuth())
        let good: JSONValue = [
            "endpoint": "https://updates.push.services.example/wpush/v2/gAAA", "expirationTime": .null,
            "keys": ["p256dh": .string(p256dh), "auth": .string(auth)],
        ]
        let subscription = try WebPushSubscription(json: good)
        #expect(subscription.p256dh.count == 65 && subscription.auth.count == 16)
        let body = try subscription.encrypt(Array("hi".utf8))
        #expect(try WebPushEncryption.decrypt(body, privateKey: receiver, auth: subscription.auth) == Array("hi".utf8))
        func rule(_ json: JSONValue, allowHTTP: Bool = false) -> String? {
            do {
                _ = try WebPushSubscription(json: json, allowHTTP: allowHTTP)
                return nil
            } catch let f as WebPushEncryption.Failure { return f.rule } catch { return "\(error)" }
        }
        let keys: JSONValue = ["p256dh": .string(p256dh), "auth": .string(auth)]
        #expect(rule(["endpoint": "http://127.0.0.1:9/x", "keys": keys]) == "endpoint-scheme")
        #expect(rule(["endpoint": "http://127.0.0.1:9/x", "keys": keys], allowHTTP: true) == nil)
        #expect(rule(["endpoint": "not a url", "keys": keys]) == "endpoint")
        #expect(
            rule(["endpoint": "https://e.example/x", "keys": ["p256dh": "AAAA", "auth": .string(auth)]]) == "p256dh"
        )
        #expect(
            rule(["endpoint": "https://e.example/x", "keys": ["p256dh": .string(p256dh), "auth": "AAAA"]]) == "auth"
        )
        #expect(rule(["endpoint": "https://e.example/x"]) == "p256dh")
        // The length is the stored one: characters outside ASCII are three bytes each once percent-encoded, so 2,047
        // bytes of text can be a 6,000-byte endpoint, which every send would refuse (and prune the device).
        let wide = "https://push.example.com/" + String(repeating: "é", count: 1011)
        #expect(wide.utf8.count == 2047)
        #expect(rule(["endpoint": .string(wide), "keys": keys]) == "endpoint")
        let fits = "https://push.example.com/" + String(repeating: "é", count: 300)
        let read = try WebPushSubscription(json: ["endpoint": .string(fits), "keys": keys])
        #expect(read.token.utf8.count <= WebPushSubscription.maxEndpointLength + 1 + 87 + 1 + 22)
        #expect((try? WebPushSubscription(token: read.token)) == read)
        // The token form is split on its bytes: one "#", then exactly one "." between the keys.
        func tokenRule(_ token: String) -> String? {
            do {
                _ = try WebPushSubscription(token: token)
                return nil
            } catch let f as WebPushEncryption.Failure { return f.rule } catch { return "\(error)" }
        }
        let keysPart = "\(p256dh).\(auth)"
        #expect(tokenRule("https://e.example/x#" + keysPart) == nil)
        #expect(tokenRule("https://e.example/x" + keysPart) == "webpush-token")
        #expect(tokenRule("https://e.example/x#\(p256dh)\(auth)") == "webpush-token")
        #expect(tokenRule("https://e.example/x#\(p256dh).\(auth).") == "webpush-token")
        #expect(tokenRule("https://e.example/x#.\(keysPart)") == "webpush-token")
        #expect(tokenRule("https://e.example/x#y#" + keysPart) == "endpoint")
        // Control characters are not a browser's, and ports are 1 to 65535.
        for text in ["https://e.example/a\u{0}b", "https://e.example/a\r\nb", "https://e.example/\u{7F}"] {
            #expect(rule(["endpoint": .string(text), "keys": keys]) == "endpoint", "\(text.debugDescription)")
        }
        for port in [0, 65_536, 99_999] {
            #expect(rule(["endpoint": .string("https://e.example:\(port)/x"), "keys": keys]) == "endpoint-port")
        }
        #expect(rule(["endpoint": "https://e.example:65535/x", "keys": keys]) == nil)
    }

    /// One token per push service origin for most of its lifetime, a new one before its last quarter; each one
    /// verifies for its origin; the kept origins are bounded.
    @Test func theSignerSignsOncePerOriginAndRenewsBeforeTheEnd() async throws {
        let key = P256.Signing.PrivateKey()
        let signer = try VAPIDSigner(key: key, subject: "mailto:ops@example.com", lifetime: 3600, capacity: 2)
        let now = Date()
        let a1 = URL(string: "https://fcm.googleapis.com/fcm/send/one")!
        let a2 = URL(string: "https://fcm.googleapis.com/fcm/send/two")!
        let b = URL(string: "https://updates.push.services.mozilla.com/wpush/v2/x")!
        let first = try signer.authorization(for: a1, now: now)
        #expect(try signer.authorization(for: a2, now: now.addingTimeInterval(60)) == first)
        #expect(try signer.authorization(for: a1, now: now.addingTimeInterval(2600)) == first)
        let renewed = try signer.authorization(for: a1, now: now.addingTimeInterval(2800))
        #expect(renewed != first)
        #expect(
            try VAPID.verify(renewed, endpoint: a2, now: now.addingTimeInterval(2800)).subject
                == "mailto:ops@example.com"
        )
        let other = try signer.authorization(for: b, now: now)
        #expect(other != first && (try? VAPID.verify(other, endpoint: a1, now: now)) == nil)
        _ = try signer.authorization(for: URL(string: "https://push.example.net/x")!, now: now)
        #expect(signer.cachedOrigins == 2)
        #expect(throws: VAPID.Failure.self) { try VAPIDSigner(key: key, subject: "ops@example.com") }
    }
}
