import Foundation
import RichPushCore
import RichPushFCM
import RichPushSandbox
import RichPushTransport
import Testing

/// RichPushFCM against the FCM emulator over real TLS HTTP/2 on 127.0.0.1.
@Suite struct FCMClientTests {
    static let token = "dQw4w9WgXcQ:APA91bH-sandbox_registration_token_0001"
    let creds = SandboxFixture.credentials

    func withSandbox(
        _ emulatorConfig: FCMEmulator.Configuration = .init(),
        client clientChange: (inout FCMConfiguration) -> Void = { _ in },
        _ body: (FCMEmulator, FCMClient) async throws -> Void
    ) async throws {
        let emulator = try FCMEmulator(credentials: creds, configuration: emulatorConfig)
        let port = try await emulator.start()
        let account = try ServiceAccount(json: Data(creds.serviceAccountJSON(tokenURI: emulator.tokenURI).utf8))
        var config = FCMConfiguration(
            serviceAccount: account,
            endpoint: .custom(host: "127.0.0.1", port: port),
            trust: .certificateAuthority(pem: creds.caCertificatePEM),
            requestTimeout: 2
        )
        clientChange(&config)
        let client = FCMClient(configuration: config)
        do { try await body(emulator, client) } catch {
            await client.shutdown()
            await emulator.stop()
            throw error
        }
        await client.shutdown()
        await emulator.stop()
    }

    func request(
        _ json: String = #"{"title":"Hi","media":"https://x.test/a.png"}"#,
        to target: FCMTarget = .token(token)
    ) throws -> FCMRequest {
        FCMRenderer(projectID: creds.fcmProjectID).render(try PushMessage.decode(JSONValue.parse(json)), to: target)
    }

    func failure(_ client: FCMClient, _ r: FCMRequest) async -> FCMFailure? {
        do throws(FCMFailure) {
            _ = try await client.send(r)
            return nil
        } catch { return error }
    }

    /// A configured time that is not a number, infinite, or whose nanoseconds overflow 64 bits, is held to its
    /// range rather than trapping in the conversion; the client still delivers.
    @Test(arguments: [Double.nan, .infinity, 1e300])
    func timesOutOfRangeAreHeldNotTrapped(_ seconds: Double) async throws {
        try await withSandbox(client: {
            $0.connectTimeout = seconds
            $0.requestTimeout = seconds
        }) { _, client in
            _ = try await client.send(try request())
        }
    }

    @Test func deliversWithATokenFromTheServiceAccountAndRecordsTheMessage() async throws {
        try await withSandbox { emulator, client in
            let r = try request()
            let name = try await client.send(r)
            #expect(name.hasPrefix("projects/\(creds.fcmProjectID)/messages/"))
            let recorded = emulator.recorded()
            #expect(recorded.count == 1)
            #expect(recorded.first?.message == r.body["message"])
            #expect(recorded.first?.target == .token(Self.token))
            #expect(emulator.tokenExchangeCount == 1)
        }
    }

    @Test func oneTokenFetchServesManyConcurrentSendsUntilItNearsExpiry() async throws {
        let clock = TestClock()
        try await withSandbox(
            .init(now: clock.now),
            client: {
                $0.now = clock.now
                $0.requestTimeout = 30
            }
        ) { emulator, client in
            try await withThrowingTaskGroup(of: Void.self) { g in
                for i in 0..<300 {
                    g.addTask {
                        _ = try await client.send(
                            try self.request(#"{"body":"n\#(i)"}"#, to: .token("device-token-\(i % 50)-abcdefgh"))
                        )
                    }
                }
                try await g.waitForAll()
            }
            #expect(client.tokenFetches == 1 && emulator.tokenExchangeCount == 1)
            clock.advance(3600 - 200)  // inside the refresh margin
            _ = try await client.send(try request())
            #expect(client.tokenFetches == 2)
            #expect(emulator.acceptedCount == 301)
        }
    }

    /// 3,000 answers with a body on one connection, 100 at a time (to one token: past the emulator's rate for a
    /// device, most are refusals with a JSON body): the client gives its receive window back many times, some of
    /// them while the frame that ends an answer is read, and every answer arrives, accepted or refused. (Writing the
    /// window update first let the stream's close overtake its last frame: 187 of 100,000 failed as "no final
    /// status" in `richpush-bench fcm`, 26 to 28 of these 3,000.)
    @Test func everyAnswerArrivesWhileTheWindowIsGivenBack() async throws {
        try await withSandbox(client: { $0.requestTimeout = 30 }) { emulator, client in
            let r = try request()
            let failures = try await withThrowingTaskGroup(of: [String].self) { g in
                for _ in 0..<100 {
                    g.addTask {
                        var failed: [String] = []
                        for _ in 0..<30 {
                            do throws(FCMFailure) { _ = try await client.send(r) } catch {
                                if error.httpStatus != 429 { failed.append("\(error)") }
                            }
                        }
                        return failed
                    }
                }
                return try await g.reduce(into: [String]()) { $0 += $1 }
            }
            let count = failures.count
            #expect(count == 0, "\(count) answers lost, the first: \(failures.first ?? "")")
            #expect(emulator.acceptedCount > 0)
        }
    }

    @Test func topicsConditionsAndValidateOnly() async throws {
        try await withSandbox { emulator, client in
            #expect(try await client.send(try request(to: .topic("news"))).contains("/messages/"))
            #expect(
                try await client.send(try request(to: .condition("'a' in topics && !('b' in topics)"))).contains(
                    "/messages/"
                )
            )
            let dry = try await client.send(
                message: ["token": .string(Self.token), "notification": ["title": "t"]],
                validateOnly: true
            )
            #expect(dry == "projects/\(creds.fcmProjectID)/messages/fake_message_id")
            #expect(emulator.acceptedCount == 2)
        }
    }

    @Test func unregisteredAndMismatchedTokens() async throws {
        try await withSandbox { emulator, client in
            emulator.unregister(token: Self.token)
            let gone = await failure(client, try request())
            #expect(gone?.httpStatus == 404 && gone?.code == .unregistered && gone?.retry == .dropToken)
            emulator.registerDevice("other-project-token-123456", project: "someone-else")
            let mismatch = await failure(client, try request(to: .token("other-project-token-123456")))
            #expect(mismatch?.httpStatus == 403 && mismatch?.code == .senderIDMismatch && mismatch?.retry == .never)
            let malformed = await failure(client, try request(to: .token("bad token!")))
            #expect(malformed?.code == .invalidArgument && malformed?.retry == .never)
        }
    }

    @Test(arguments: [
        (#"{"token":"\#(token)","data":{"n":1}}"#, "message.data[0].value"),
        (#"{"token":"\#(token)","data":{"from":"x"}}"#, "message.data[0].key"),
        (#"{"token":"\#(token)","topic":"x"}"#, "message"),
        (#"{"token":"\#(token)","android":{"ttl":"3 days"}}"#, "message.android.ttl"),
        (#"{"token":"\#(token)","android":{"priority":"urgent"}}"#, "message.android.priority"),
        (#"{"token":"\#(token)","android":{"notification":{"color":"red"}}}"#, "message.android.notification.color"),
        (
            #"{"token":"\#(token)","webpush":{"fcm_options":{"link":"http://x.test"}}}"#,
            "message.webpush.fcm_options.link"
        ),
        (#"{"token":"\#(token)","colour":"red"}"#, "message"),
        (
            #"{"condition":"'a' in topics || 'b' in topics || 'c' in topics || 'd' in topics || 'e' in topics || 'f' in topics"}"#,
            "message.condition"
        ),
        (#"{"topic":"news","notification":{"body":"\#(String(repeating: "x", count: 2100))"}}"#, "message"),
    ])
    func invalidMessagesNameTheField(_ message: String, _ field: String) async throws {
        try await withSandbox { _, client in
            do throws(FCMFailure) {
                _ = try await client.send(message: try! JSONValue.parse(message))
                Issue.record("should fail")
            } catch {
                #expect(
                    error.httpStatus == 400 && error.code == .invalidArgument && error.retry == .fixRequest,
                    "\(error)"
                )
                #expect(error.fieldViolations.map(\.field).contains(field), "\(error.fieldViolations)")
            }
        }
    }

    @Test func faultsMapToRetryDecisions() async throws {
        try await withSandbox { emulator, client in
            emulator.inject(.quotaExceeded(retryAfter: 61))
            emulator.inject(.unavailable(retryAfter: 3))
            emulator.inject(.internalError)
            let r = try request()
            var decisions: [RetryDecision] = []
            for _ in 0..<3 { if let f = await failure(client, r) { decisions.append(f.retry) } }
            #expect(decisions == [.retryAfter(61), .retryAfter(3), .retry])
            _ = try await client.send(r)
        }
    }

    @Test func perDeviceQuota() async throws {
        // The emulator's clock stands still: quotas count per calendar minute, and a run straddling a minute's end
        // would start a new count.
        let start = Date()
        try await withSandbox(.init(deviceMessagesPerMinute: 5, now: { start })) { _, client in
            let r = try request()
            for _ in 0..<5 { _ = try await client.send(r) }
            let over = await failure(client, r)
            #expect(over?.httpStatus == 429 && over?.code == .quotaExceeded)
            if case .retryAfter(let s)? = over?.retry {
                #expect(s > 0 && s <= 60)
            } else {
                Issue.record("expected retryAfter")
            }
        }
    }

    @Test func transportFaults() async throws {
        try await withSandbox(client: {
            $0.requestTimeout = 1.5
            $0.connections = 1
        }) { emulator, client in
            _ = try await client.send(try request())
            emulator.inject(.stall)
            let stalled = await failure(client, try request())
            // Named by cause, as APNs' are (it read "transport" alone).
            #expect(stalled?.transport == .timedOut && stalled?.label == "transport_timed_out")
            emulator.inject(.reset)
            let reset = await failure(client, try request())
            #expect(reset?.transport == .connectionClosed && reset?.label == "transport_connection_closed")
            emulator.inject(.goAway)
            _ = try await client.send(try request())  // retried on a fresh connection
            #expect(emulator.acceptedCount == 2)
        }
    }

    @Test func anAccountWithoutRightsOnTheProjectIsRefused() async throws {
        try await withSandbox { _, client in
            do throws(FCMFailure) {
                _ = try await client.send(
                    message: ["token": .string(Self.token), "notification": ["title": "t"]],
                    projectID: "not-mine"
                )
                Issue.record("should fail")
            } catch {
                #expect(error.httpStatus == 403 && error.retry == .fixCredentials)
            }
        }
    }

    @Test func aTokenEndpointThatRejectsTheAssertionMeansFixCredentials() async throws {
        let other = try SandboxCredentials.generate(projectID: creds.fcmProjectID)
        try await withSandbox(client: { config in
            let wrong = try! ServiceAccount(
                json: Data(other.serviceAccountJSON(tokenURI: config.serviceAccount.tokenURI).utf8)
            )
            config.serviceAccount = wrong
        }) { _, client in
            do throws(FCMFailure) {
                _ = try await client.accessToken()
                Issue.record("should fail")
            } catch {
                #expect(error.retry == .fixCredentials && error.message.contains("invalid_grant"))
                #expect(!error.description.contains("PRIVATE KEY"))
            }
        }
    }
}
