import Foundation
import RichPushAPNs
import RichPushCore
import RichPushSandbox
import RichPushTransport
import Testing

@testable import RichPushFCM

/// Provider answers are input too: the emulators answer with what APNs and FCM never would, over real TLS and
/// HTTP/2, and the clients turn each into a failure with a retry decision, hold no more than their limit of it,
/// and go on sending.
@Suite struct HostileProviderTests {
    static let answers: [(String, HostileAnswer)] = [
        ("garbage body", .body(status: 400, bytes: [0xFF, 0x00, 0x7B, 0x22, 0xC3])),
        ("empty body", .body(status: 500, bytes: [])),
        ("reason of the wrong type", .body(status: 400, bytes: Array(#"{"reason":5,"timestamp":"soon"}"#.utf8))),
        ("error of the wrong type", .body(status: 404, bytes: Array(#"{"error":[1,2],"reason":{"a":null}}"#.utf8))),
        ("unknown reason", .body(status: 400, bytes: Array(#"{"reason":"SomethingNew2027"}"#.utf8))),
        ("extreme timestamp", .body(status: 410, bytes: Array(#"{"reason":"Unregistered","timestamp":1e308}"#.utf8))),
        (
            "nested 10,000 deep",
            .body(
                status: 400,
                bytes: Array((String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000)).utf8)
            )
        ),
        ("body over 1 MB", .huge(status: 400, bytes: 1_500_000)),
        ("body just under the limit", .huge(status: 400, bytes: HTTP2ClientConnection.maxResponseBytes - 100)),
        ("Retry-After 1e400", .header(status: 429, name: "retry-after", value: "1e400")),
        ("Retry-After -5", .header(status: 429, name: "retry-after", value: "-5")),
        ("Retry-After nan", .header(status: 503, name: "retry-after", value: "nan")),
        ("Retry-After of 40 years", .header(status: 503, name: "retry-after", value: "1262304000")),
        (
            "Retry-After 10 KB long",
            .header(status: 503, name: "retry-after", value: String(repeating: "9", count: 10_000))
        ),
        ("status abc", .status("abc")),
        ("status 99", .status("99")),
        ("status 1000", .status("1000")),
        ("status empty", .status("")),
        ("informational only", .informationalOnly),
        ("unknown 2xx", .body(status: 299, bytes: [])),
    ]

    /// A client of one connection to the APNs emulator on `port`, and a request for the sandbox's test device.
    static func emulatorClient(port: Int, requestTimeout: Double) throws -> (APNsClient, APNsRequest) {
        let creds = SandboxFixture.credentials
        let client = APNsClient(
            configuration: APNsConfiguration(
                endpoint: .custom(host: "127.0.0.1", port: port),
                authentication: .token(
                    try APNsSigningKey(p8: creds.apnsKeyPEM, keyID: creds.apnsKeyID, teamID: creds.apnsTeamID)
                ),
                trust: .certificateAuthority(pem: creds.caCertificatePEM),
                connections: 1,
                requestTimeout: requestTimeout
            )
        )
        let request = APNsRenderer(bundleID: "com.example.app").render(
            try PushMessage.decode(JSONValue.parse(#"{"title":"Hi"}"#)),
            deviceToken: APNsClientTests.token
        )
        return (client, request)
    }

    @Test func theAPNsClientClassifiesEveryHostileAnswer() async throws {
        let creds = SandboxFixture.credentials
        let emulator = try APNsEmulator(credentials: creds)
        let port = try await emulator.start()
        let (client, request) = try Self.emulatorClient(port: port, requestTimeout: 3)
        for (name, answer) in Self.answers {
            emulator.inject(.hostile(answer))
            do throws(APNsFailure) {
                let delivery = try await client.send(request)
                // Only a 2xx can pass, and then it is a delivery.
                #expect(name == "unknown 2xx" && delivery.apnsID != nil, "\(name): accepted")
            } catch {
                switch error.retry {
                case .retryAfter(let s): #expect(s.isFinite && s >= 0 && s <= maxRetryAfter, "\(name): \(s)")
                default: break
                }
                if name == "body over 1 MB" {
                    #expect(error.transport == .responseTooLarge(limit: HTTP2ClientConnection.maxResponseBytes))
                }
                if name.hasPrefix("status") || name == "informational only" {
                    #expect(error.transport != nil, "\(name): \(error)")
                }
                if name == "unknown reason" { #expect(error.reason == .unknown("SomethingNew2027")) }
            }
            // The client keeps working after each.
            let delivery = try await client.send(request)
            #expect(delivery.apnsID != nil, "\(name): the next send")
        }
        await client.shutdown()
        await emulator.stop()
    }

    @Test func theFCMClientClassifiesEveryHostileAnswer() async throws {
        let creds = SandboxFixture.credentials
        let emulator = try FCMEmulator(credentials: creds)
        let port = try await emulator.start()
        let account = try ServiceAccount(json: Data(creds.serviceAccountJSON(tokenURI: emulator.tokenURI).utf8))
        let client = FCMClient(
            configuration: FCMConfiguration(
                serviceAccount: account,
                endpoint: .custom(host: "127.0.0.1", port: port),
                trust: .certificateAuthority(pem: creds.caCertificatePEM),
                requestTimeout: 3
            )
        )
        let request = FCMRenderer(projectID: creds.fcmProjectID).render(
            try PushMessage.decode(JSONValue.parse(#"{"title":"Hi"}"#)),
            to: .token(FCMClientTests.token)
        )
        _ = try await client.accessToken()
        for (name, answer) in Self.answers {
            emulator.inject(.hostile(answer))
            do throws(FCMFailure) {
                _ = try await client.send(request)
                Issue.record("\(name): accepted")
            } catch {
                #expect(error.retryAfter.map { $0.isFinite && $0 >= 0 && $0 <= maxRetryAfter } ?? true, "\(name)")
                #expect(error.message.utf8.count < 2_000, "\(name): \(error.message.prefix(100))")
                if name == "body over 1 MB" {
                    #expect(error.transport == .responseTooLarge(limit: HTTP2ClientConnection.maxResponseBytes))
                }
            }
            _ = try await client.send(request)
        }
        await client.shutdown()
        await emulator.stop()
    }

    @Test func retryAfterIsReadWithinItsRange() {
        #expect(parseRetryAfter("7") == 7)
        #expect(parseRetryAfter("1e400") == nil && parseRetryAfter("-1") == nil && parseRetryAfter("nan") == nil)
        #expect(parseRetryAfter("inf") == nil && parseRetryAfter(String(repeating: "9", count: 100)) == nil)
        #expect(parseRetryAfter("99999999") == maxRetryAfter)
        #expect(parseRetryAfter("Wed, 21 Oct 2015 07:28:00 GMT") == 0)
    }
}

@Suite struct TokenLifetimeTests {
    /// OAuth's `expires_in` is the token endpoint's number: held to a minute...a day, an hour when unusable.
    @Test func anyExpiresInIsHeldToAMinuteToADay() {
        let cases: [(JSONValue?, TimeInterval)] = [
            (nil, 3600), (.null, 3600), (.string("3599"), 3600), (.int(0), 60), (.int(-5), 60),
            (.int(Int64.max), 86_400),
            (.double(1e308), 86_400), (.double(.infinity), 86_400), (.double(-.infinity), 60), (.double(.nan), 3600),
            (.int(3599), 3599),
        ]
        for (value, expected) in cases {
            #expect(FCMClient.tokenLifetime(value) == expected, "\(String(describing: value))")
        }
    }
}
