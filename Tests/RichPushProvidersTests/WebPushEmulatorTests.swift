import Crypto
import Foundation
import RichPushCore
import RichPushSandbox
import RichPushTestSupport
import RichPushTransport
import RichPushWebPush
import Testing

/// The Web Push emulator over real TLS on 127.0.0.1: `pywebpush` (a real sender) is accepted and its message read;
/// what our library makes is accepted too; every refusal class answers its status and reason.
@Suite struct WebPushEmulatorTests {
    /// Posts with Python's `requests`, trusting the sandbox's CA: one request per entry, each answered with its
    /// status, `Retry-After` and reason.
    static func post(
        _ requests: [JSONValue],
        ca: String
    ) async throws -> [(status: Int, retryAfter: String?, reason: String?)] {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("wp-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let caPath = dir.appendingPathComponent("ca.pem").path
        try ca.write(toFile: caPath, atomically: true, encoding: .utf8)
        let script = """
            import json, sys, requests
            d = json.load(sys.stdin)
            out = []
            for r in d["requests"]:
                resp = requests.post(r["url"], data=bytes.fromhex(r.get("body", "")), headers=r.get("headers", {}),
                                     verify=d["ca"], timeout=10)
                try:
                    reason = resp.json().get("reason")
                except Exception:
                    reason = None
                out.append({"status": resp.status_code, "retry_after": resp.headers.get("retry-after"), "reason": reason})
            print(json.dumps(out))
            """
        let input: JSONValue = ["requests": .array(requests), "ca": .string(caPath)]
        let run = try await Python.run(script, stdin: String(decoding: input.serialized(), as: UTF8.self))
        guard run.status == 0, case .array(let answers) = try JSONValue.parse(run.output) else {
            throw CocoaError(
                .fileReadUnknown,
                userInfo: [NSLocalizedDescriptionKey: String(decoding: run.output, as: UTF8.self)]
            )
        }
        return answers.map {
            (Int($0["status"]?.intValue ?? 0), $0["retry_after"]?.stringValue, $0["reason"]?.stringValue)
        }
    }

    /// A started emulator, a VAPID key, and a subscription made with that key.
    static func started() async throws -> (WebPushEmulator, P256.Signing.PrivateKey, WebPushSubscription) {
        let push = try WebPushEmulator(credentials: SandboxFixture.credentials)
        try await push.start()
        let vapid = P256.Signing.PrivateKey()
        let subscription = try WebPushSubscription(
            json: push.subscribe(applicationServerKey: VAPID.publicKey(vapid.publicKey))
        )
        return (push, vapid, subscription)
    }

    static func hex(_ b: some Sequence<UInt8>) -> String { b.map { String(format: "%02x", $0) }.joined() }

    @Test func pywebpushIsAcceptedAndItsMessageRead() async throws {
        let creds = SandboxFixture.credentials
        let push = try WebPushEmulator(credentials: creds)
        try await push.start()
        defer { Task { await push.stop() } }
        let vapid = P256.Signing.PrivateKey()
        let subscription = push.subscribe(applicationServerKey: VAPID.publicKey(vapid.publicKey))
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("wp-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let caPath = dir.appendingPathComponent("ca.pem").path
        try creds.caCertificatePEM.write(toFile: caPath, atomically: true, encoding: .utf8)
        let script = """
            import json, sys, traceback, requests
            from pywebpush import webpush
            sys.stderr = sys.stdout
            d = json.load(sys.stdin)
            session = requests.Session()
            session.verify = d["ca"]
            session.trust_env = False  # the environment's CA bundle would replace the sandbox's CA
            resp = webpush(subscription_info=d["subscription"], data=json.dumps({"title": "From a peer", "image": "https://cdn.example.com/a.jpg"}),
                           vapid_private_key=d["key"], vapid_claims={"sub": "mailto:peer@example.com"}, ttl=120,
                           requests_session=session)
            print(json.dumps({"status": resp.status_code, "location": resp.headers.get("location")}))
            """
        let input: JSONValue = [
            "subscription": subscription, "key": .string(JWT.base64URL(vapid.rawRepresentation)), "ca": .string(caPath),
        ]
        let run = try await Python.run(script, stdin: String(decoding: input.serialized(), as: UTF8.self))
        let text = String(decoding: run.output, as: UTF8.self)
        try #require(run.status == 0, "\(text)")
        let answer = try JSONValue.parse(run.output)
        #expect(answer["status"] == 201 && answer["location"]?.stringValue?.contains("/message/") == true, "\(text)")
        let got = try #require(push.recorded().last)
        #expect(got.json?["title"] == "From a peer" && got.ttl == 120 && got.subject == "mailto:peer@example.com")
    }

    @Test func ourMessagesAreAcceptedAndEveryRefusalIsNamed() async throws {
        let creds = SandboxFixture.credentials
        let (push, vapid, subscription) = try await Self.started()
        defer { Task { await push.stop() } }
        let url = subscription.endpoint.absoluteString
        let auth = try VAPID.authorization(
            endpoint: subscription.endpoint,
            key: vapid,
            subject: "mailto:ops@example.com",
            expires: Date().addingTimeInterval(3600)
        )
        let sealed = try subscription.encrypt(Array(#"{"title":"Sale"}"#.utf8))
        let body = Self.hex(sealed)
        // The same message with its salt's first byte changed (flipped, so that it differs whatever the byte was:
        // writing 00 over it left one message in 256 unchanged, and accepted).
        var salted = sealed
        salted[0] ^= 0xFF
        func request(_ headers: [String: String], body: String = body) -> JSONValue {
            ["url": .string(url), "headers": .object(headers.mapValues { .string($0) }), "body": .string(body)]
        }
        let good = [
            "TTL": "60", "Content-Encoding": "aes128gcm", "Authorization": auth, "Urgency": "high", "Topic": "sale-1",
        ]
        var other = good
        other["Authorization"] = try VAPID.authorization(
            endpoint: subscription.endpoint,
            key: P256.Signing.PrivateKey(),
            subject: "mailto:ops@example.com",
            expires: Date().addingTimeInterval(3600)
        )
        var noTTL = good
        noTTL["TTL"] = nil
        var badUrgency = good
        badUrgency["Urgency"] = "urgent"
        var badTopic = good
        badTopic["Topic"] = String(repeating: "a", count: 33)
        var noVAPID = good
        noVAPID["Authorization"] = nil
        var plain = good
        plain["Content-Encoding"] = nil
        let tooLarge = String(repeating: "00", count: 4097)
        let answers = try await Self.post(
            [
                request(good), request(good), request(other), request(noTTL), request(badUrgency), request(badTopic),
                request(noVAPID), request(plain), request(good, body: tooLarge),
                request(good, body: Self.hex(salted)),
            ],
            ca: creds.caCertificatePEM
        )
        #expect(answers.map(\.status) == [201, 201, 403, 400, 400, 400, 401, 415, 413, 400], "\(answers)")
        #expect(
            answers.map { $0.reason ?? "" }
                == [
                    "", "", "vapid-key-mismatch", "ttl", "urgency", "topic", "vapid-missing", "content-encoding",
                    "payload-too-large", "decryption-decryption",
                ],
            "\(answers)"
        )
        let records = push.recorded()
        #expect(records.count == 2 && records[0].json?["title"] == "Sale" && records[0].urgency == "high")
        #expect(!records[0].replacedPending && records[1].replacedPending && records[1].topic == "sale-1")
        // On demand: 429 with Retry-After, 503, then a subscription gone (410).
        push.inject(.tooManyRequests(retryAfter: 7))
        push.inject(.unavailable(retryAfter: 3))
        let faults = try await Self.post([request(good), request(good)], ca: creds.caCertificatePEM)
        #expect(faults.map(\.status) == [429, 503] && faults.map(\.retryAfter) == ["7", "3"], "\(faults)")
        push.unregister(url)
        #expect(try await Self.post([request(good)], ca: creds.caCertificatePEM).map(\.status) == [410])
        #expect(push.acceptedCount == 2)
    }

    /// What `WebPushRequest` builds is accepted, and each answer maps to the delivery's next step: delivered, tried
    /// again after `Retry-After`, credentials to fix, the subscription pruned.
    @Test func builtRequestsAreAcceptedAndAnswersMapToRetryDecisions() async throws {
        let creds = SandboxFixture.credentials
        let (push, vapid, subscription) = try await Self.started()
        defer { Task { await push.stop() } }
        func built(key: P256.Signing.PrivateKey = vapid, topic: String? = "order-42") throws -> WebPushRequest {
            try WebPushRequest(
                subscription: subscription,
                payload: Array(#"{"title":"Your order shipped","image":"https://cdn.example.com/parcel.jpg"}"#.utf8),
                vapidKey: key,
                subject: "https://shop.example.com/contact",
                ttl: 3600,
                urgency: .high,
                topic: topic
            )
        }
        func asJSON(_ r: WebPushRequest) -> JSONValue {
            [
                "url": .string(r.endpoint.absoluteString),
                "headers": .object(Dictionary(r.headers.map { ($0.name, JSONValue.string($0.value)) }) { a, _ in a }),
                "body": .string(Self.hex(r.body)),
            ]
        }
        push.inject(.tooManyRequests(retryAfter: 7))
        let first = try await Self.post(
            [asJSON(try built()), asJSON(try built()), asJSON(try built(key: P256.Signing.PrivateKey()))],
            ca: creds.caCertificatePEM
        )
        push.unregister(subscription.endpoint.absoluteString)
        let gone = try await Self.post([asJSON(try built())], ca: creds.caCertificatePEM)
        let decisions = (first + gone).map { WebPushRequest.decision(status: $0.status, retryAfter: $0.retryAfter) }
        #expect(decisions == [.retryAfter(7), nil, .fixCredentials, .dropToken], "\(first + gone)")
        let got = try #require(push.recorded().first)
        #expect(got.json?["title"] == "Your order shipped" && got.topic == "order-42" && got.urgency == "high")
        #expect(got.ttl == 3600 && got.subject == "https://shop.example.com/contact")
        // Refused before anything is sent, by name.
        #expect(throws: WebPushEncryption.Failure.self) { try built(topic: "not a topic!") }
        #expect(WebPushRequest.decision(status: 413, retryAfter: nil) == .fixRequest)
        #expect(WebPushRequest.decision(status: 503, retryAfter: "30") == .retryAfter(30))
        #expect(WebPushRequest.decision(status: 502, retryAfter: "-5") == .retry)
    }
}
