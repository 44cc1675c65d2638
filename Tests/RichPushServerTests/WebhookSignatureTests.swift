import Foundation
import RichPushCore
import RichPushSandbox
import RichPushTestSupport
import Testing

@testable import RichPushServer

/// Our signatures checked by an independent implementation of the Standard Webhooks specification (the
/// `standardwebhooks` package from PyPI): a request it accepts, and a tampered body, an old timestamp and a wrong
/// secret it refuses. And the other way: what it signs, the sandbox receiver verifies.
@Suite struct WebhookSignatureTests {
    /// For each case on standard input (secret, id, timestamp, signature header, body in base64), "ok" or the error.
    static let verifier = """
        import sys, json, base64
        from standardwebhooks.webhooks import Webhook
        for line in sys.stdin:
            c = json.loads(line)
            headers = {"webhook-id": c["id"], "webhook-timestamp": c["timestamp"], "webhook-signature": c["signature"]}
            try:
                Webhook(c["secret"]).verify(base64.b64decode(c["body"]), headers)
                print("ok")
            except Exception as e:
                print(type(e).__name__)
        """

    static func signed(
        secret: String,
        signWith: [String],
        body: [UInt8],
        at date: Date = Date(),
        tamper: Bool = false
    ) -> JSONValue {
        let id = "msg_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
        let t = Int64(date.timeIntervalSince1970)
        let signature = WebhookSigner.signature(id: id, timestamp: t, body: body, secrets: signWith)
        var sent = body
        if tamper { sent[sent.count / 2] ^= 1 }
        return [
            "secret": .string(secret), "id": .string(id), "timestamp": .string(String(t)),
            "signature": .string(signature), "body": .string(Data(sent).base64EncodedString()),
        ]
    }

    @Test func standardWebhooksVerifiesOursAndRefusesWhatItShould() async throws {
        let secret = WebhookSigner.newSecret()
        let previous = WebhookSigner.newSecret()
        let endpoint = WebhookEndpoint(
            appID: "app",
            url: "https://h.example/x",
            types: [.deliveryDelivered],
            secret: secret
        )
        let event = WebhookEvent(
            seq: 41,
            xid: 0,
            appID: "app",
            type: "delivery.delivered",
            notificationID: "n-1",
            deliveryID: 7,
            provider: "apns",
            target: String(repeating: "ab", count: 32),
            providerID: "apns-id",
            detail: #"{"note":"ünïcode ✓"}"#,
            createdAt: Date()
        )
        let body = WebhookBatch([event], for: endpoint, exact: nil).body
        let cases: [(JSONValue, String)] = [
            (Self.signed(secret: secret, signWith: [secret], body: body), "ok"),
            // During a rotation the header has two signatures; a receiver with either secret verifies.
            (Self.signed(secret: secret, signWith: [previous, secret], body: body), "ok"),
            (Self.signed(secret: previous, signWith: [secret, previous], body: body), "ok"),
            (Self.signed(secret: secret, signWith: [secret], body: body, tamper: true), "WebhookVerificationError"),
            (
                Self.signed(secret: secret, signWith: [secret], body: body, at: Date().addingTimeInterval(-600)),
                "WebhookVerificationError"
            ),
            (Self.signed(secret: previous, signWith: [secret], body: body), "WebhookVerificationError"),
        ]
        let input = cases.map { $0.0.jsonString }.joined(separator: "\n") + "\n"
        let run = try await Python.run(Self.verifier, stdin: input)
        #expect(run.status == 0)
        let answers = String(decoding: run.output, as: UTF8.self).split(separator: "\n").map(String.init)
        #expect(answers == cases.map(\.1))
        // The sandbox receiver's own check agrees on each case.
        for (c, expected) in cases {
            let verified = WebhookReceiver.verify(
                secret: c["secret"]!.stringValue!,
                id: c["id"]!.stringValue!,
                timestamp: c["timestamp"]!.stringValue!,
                signatures: c["signature"]!.stringValue!,
                body: Array(Data(base64Encoded: c["body"]!.stringValue!)!)
            )
            #expect(verified == (expected == "ok"))
        }
    }

    @Test func whatStandardWebhooksSignsOurReceiverVerifies() async throws {
        let secret = WebhookSigner.newSecret()
        let script = """
            import sys, datetime
            from standardwebhooks.webhooks import Webhook
            now = datetime.datetime.now(tz=datetime.timezone.utc)
            print(int(now.timestamp()))
            print(Webhook(sys.argv[1] if len(sys.argv) > 1 else "\(secret)").sign("msg_x1", now, '{"type":"batch"}'))
            """
        let run = try await Python.run(script)
        let lines = String(decoding: run.output, as: UTF8.self).split(separator: "\n").map(String.init)
        #expect(lines.count == 2)
        let ours = WebhookSigner.signature(
            id: "msg_x1",
            timestamp: Int64(lines[0])!,
            body: Array(#"{"type":"batch"}"#.utf8),
            secrets: [secret]
        )
        #expect(ours == lines[1])
        #expect(
            WebhookReceiver.verify(
                secret: secret,
                id: "msg_x1",
                timestamp: lines[0],
                signatures: lines[1],
                body: Array(#"{"type":"batch"}"#.utf8)
            )
        )
    }

    @Test func secretsHaveTheShapeTheSpecificationAsksFor() {
        let s = WebhookSigner.newSecret()
        #expect(s.hasPrefix("whsec_"))
        let key = Data(base64Encoded: String(s.dropFirst(6)))
        #expect(key?.count == 32)
        #expect(WebhookSigner.key(of: "whsec_!!") == nil)
        #expect(WebhookSigner.signature(id: "a", timestamp: 1, body: [], secrets: ["not-a-secret"]) == "")
    }
}
