import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RichPushAPNs
import RichPushCore
import RichPushSandbox
import Testing

@testable import RichPushTransport

/// The connection and the pool at the moment a connection dies: a request must end, never wait forever.
@Suite struct HTTP2ConnectionTests {
    let creds = SandboxFixture.credentials

    func apnsRequest(_ conn: HTTP2ClientConnection, key: APNsSigningKey) throws -> H2Request {
        let jwt = try JWT.es256(
            header: #"{"alg":"ES256","kid":"\#(key.keyID)"}"#,
            claims: #"{"iss":"\#(key.teamID)","iat":\#(Int(Date().timeIntervalSince1970))}"#,
            key: key.privateKey
        )
        var body = ByteBufferAllocator().buffer(capacity: 64)
        body.writeString(#"{"aps":{"alert":"hi"}}"#)
        return H2Request(
            path: "/3/device/" + String(repeating: "ab", count: 32),
            headers: [("apns-topic", "com.example.app"), ("authorization", "bearer " + jwt)],
            body: body
        )
    }

    /// Closes the connection, then marks it open again, as if the close had not been noticed yet when the next
    /// request checked it. The mark is set on the event loop, after the close and its notifications ran there.
    func closeUnnoticed(_ conn: HTTP2ClientConnection) async throws {
        try await conn.channel.close()
        // As if the close had not been seen yet: the state of an open, ready connection.
        try await conn.channel.eventLoop.submit {
            conn.state.withLockedValue {
                $0 = HTTP2ConnectionState()
                _ = $0.settingsReceived(maxConcurrentStreams: 100)
            }
        }.get()
    }

    /// The connection closed after the caller saw it open and before its event loop opened the stream (the
    /// window the server's fault test fell into now and then): the request fails at once as not sent.
    @Test func aStreamThatCannotOpenFailsAsNotSent() async throws {
        let emulator = try APNsEmulator(credentials: creds)
        let port = try await emulator.start()
        let key = try APNsSigningKey(p8: creds.apnsKeyPEM, keyID: creds.apnsKeyID, teamID: creds.apnsTeamID)
        let conn = try await HTTP2ClientConnection.connect(
            to: .init(host: "127.0.0.1", port: port, trust: .certificateAuthority(pem: creds.caCertificatePEM)),
            group: NIOSingletons.posixEventLoopGroup
        )
        #expect(try await conn.send(try apnsRequest(conn, key: key), timeout: .seconds(5)).status == 200)
        try await closeUnnoticed(conn)
        let started = Date()
        do {
            _ = try await conn.send(try apnsRequest(conn, key: key), timeout: .seconds(30))
            Issue.record("a request on a closed connection succeeded")
        } catch let error as TransportError {
            #expect(error == .notSent && error.safeToRetry)
        }
        // Below the 30 s timeout: the request was sent again, not waited out. (A loaded full run took 10.1 s here,
        // so the bound is the timeout's, not the machine's.)
        #expect(Date().timeIntervalSince(started) < 25)
        #expect(conn.inFlight == 0)
        #expect(emulator.acceptedCount == 1)
        await emulator.stop()
    }

    /// A pool of one connection to the emulator on `port`, with the configuration's defaults unless given.
    func onePool(port: Int, maxAttempts: Int? = nil, backoffBase: TimeAmount? = nil) -> HTTP2ConnectionPool<Void> {
        var configuration = HTTP2ConnectionPool<Void>.Configuration(
            target: .init(host: "127.0.0.1", port: port, trust: .certificateAuthority(pem: creds.caCertificatePEM)),
            connections: 1,
            requestTimeout: .seconds(30)
        )
        if let maxAttempts { configuration.maxAttempts = maxAttempts }
        if let backoffBase { configuration.backoffBase = backoffBase }
        return HTTP2ConnectionPool<Void>(
            configuration: configuration,
            group: NIOSingletons.posixEventLoopGroup,
            makeExtra: {}
        )
    }

    /// The pool sends such a request again on a new connection: it was never sent, so nothing is duplicated.
    @Test func thePoolSendsANotSentRequestAgainOnANewConnection() async throws {
        let emulator = try APNsEmulator(credentials: creds)
        let port = try await emulator.start()
        let key = try APNsSigningKey(p8: creds.apnsKeyPEM, keyID: creds.apnsKeyID, teamID: creds.apnsTeamID)
        let pool = onePool(port: port)
        let (first, used) = try await pool.execute { try apnsRequest($0.connection, key: key) }
        #expect(first.status == 200)
        try await closeUnnoticed(used.connection)
        let started = Date()
        let (second, next) = try await pool.execute { try apnsRequest($0.connection, key: key) }
        #expect(second.status == 200 && next.id != used.id)
        // Below the 30 s timeout: the request was sent again, not waited out. (A loaded full run took 10.1 s here,
        // so the bound is the timeout's, not the machine's.)
        #expect(Date().timeIntervalSince(started) < 25)
        #expect(emulator.acceptedCount == 2)
        await pool.shutdown()
        await emulator.stop()
    }

    /// A service whose connections go away before answering anything is connected to again only after a backoff
    /// that grows, as after a failed connect: freed at once, a server sending GOAWAY right after its SETTINGS had the
    /// pool open 146 connections in 0.63 s for one request (found by a hostile server).
    @Test func connectionsThatGoAwayBeforeAnsweringAreReplacedWithBackoff() async throws {
        let emulator = try APNsEmulator(credentials: creds)
        let port = try await emulator.start()
        let key = try APNsSigningKey(p8: creds.apnsKeyPEM, keyID: creds.apnsKeyID, teamID: creds.apnsTeamID)
        let pool = onePool(port: port, maxAttempts: 3, backoffBase: .milliseconds(400))
        emulator.inject(.goAway(reason: "Shutdown", processed: false), count: 10)
        let started = Date()
        await #expect(throws: TransportError.goingAway(reason: "Shutdown", processed: false)) {
            _ = try await pool.execute { try apnsRequest($0.connection, key: key) }
        }
        // Three attempts, the second after 200 to 400 ms, the third after 400 to 800 ms more.
        let took = Date().timeIntervalSince(started)
        #expect(took >= 0.6, "three attempts on connections that went away took \(took) s")
        await pool.shutdown()
        await emulator.stop()
    }

    /// The request timeout counts from the call, so it holds whatever happens before the stream opens.
    @Test func theTimeoutHoldsForARequestTheServerNeverAnswers() async throws {
        let emulator = try APNsEmulator(credentials: creds)
        let port = try await emulator.start()
        let key = try APNsSigningKey(p8: creds.apnsKeyPEM, keyID: creds.apnsKeyID, teamID: creds.apnsTeamID)
        let conn = try await HTTP2ClientConnection.connect(
            to: .init(host: "127.0.0.1", port: port, trust: .certificateAuthority(pem: creds.caCertificatePEM)),
            group: NIOSingletons.posixEventLoopGroup
        )
        emulator.inject(.stall)
        let started = Date()
        await #expect(throws: TransportError.timedOut) {
            _ = try await conn.send(try apnsRequest(conn, key: key), timeout: .milliseconds(300))
        }
        // Not before the deadline; `timedOut` comes only from the send's own timer, so no wall-clock bound after it
        // (such a bound measured the parallel suite's scheduling, as in the handshake test below).
        let took = Date().timeIntervalSince(started)
        #expect(took >= 0.29, "\(took)")
        // The stream stays open for a late answer, its place still counted, and is reset after the grace (the only
        // bound here is the loop's: the reset comes from the connection's own timer).
        #expect(conn.inFlight == 1)
        let waiting = Date()
        while conn.inFlight != 0, Date().timeIntervalSince(waiting) < 30 {
            try await Task.sleep(nanoseconds: 50_000_000)
        }
        #expect(conn.inFlight == 0)
        // The grace runs from the timeout (0.3 s after the start), whenever the caller heard of it.
        #expect(Date().timeIntervalSince(started) >= 5.2)
        conn.close()
        await emulator.stop()
    }

    /// Requests that time out as their answers come (a server answering at the client's deadline): the client resets
    /// each stream and its answer arrives after. RFC 9113 (section 5.1, "closed") has the client ignore frames on a
    /// stream it reset; the HTTP/2 library ignored them on its last 32 resets only and took a frame on an older one as
    /// an error of the whole connection, closing it with every other request in flight. (A loaded suite's drain test
    /// saw 73 requests fail as "connection closed" beside 93 timeouts, each then sent again.) The connection now
    /// stays up, and the next request on it is answered.
    @Test func lateAnswersToTimedOutRequestsDoNotEndTheConnection() async throws {
        // 180 resets in all: more than the library's 32, fewer than the 200 in 30 s after which a server of the same
        // library takes the client for an attacker (rapid reset) and sends GOAWAY.
        _ = try await timeoutBurst(rounds: 2, perRound: 90)
    }

    /// 800 requests that time out within a few seconds: their streams are not reset at once, so the answers that come
    /// late end them, and the server does not take the client for a rapid-reset attacker. Reset at once, the
    /// emulator's HTTP/2 server (200 resets in 30 s at most) sent GOAWAY and the connection took no more requests.
    @Test func aBurstOfTimeoutsIsNotABurstOfResets() async throws {
        let outcomes = try await timeoutBurst(rounds: 8, perRound: 100)
        #expect(outcomes["\(TransportError.timedOut)", default: 0] > 200, "too few timeouts to tell: \(outcomes)")
    }

    /// A service that stops answering: 300 requests time out and none is answered within the grace. The client
    /// resets 100 of them at most (its budget), fewer than the 200 in 30 s after which the emulator's HTTP/2 server,
    /// like others, takes the client for a rapid-reset attacker and sends GOAWAY; it retires the connection instead,
    /// which closes once nothing on it awaits an answer. The service, answering again, takes the next request on a
    /// new connection.
    @Test func aServiceThatStopsAnsweringIsNotSentAResetPerStream() async throws {
        let emulator = try APNsEmulator(credentials: creds)
        let port = try await emulator.start()
        let key = try APNsSigningKey(p8: creds.apnsKeyPEM, keyID: creds.apnsKeyID, teamID: creds.apnsTeamID)
        let target = HTTP2ClientConnection.Target(
            host: "127.0.0.1",
            port: port,
            trust: .certificateAuthority(pem: creds.caCertificatePEM)
        )
        let conn = try await HTTP2ClientConnection.connect(to: target, group: NIOSingletons.posixEventLoopGroup)
        let request = try apnsRequest(conn, key: key)
        #expect(try await conn.send(request, timeout: .seconds(10)).status == 200)
        emulator.inject(.stall, count: 300)
        let outcomes = await withTaskGroup(of: String.self) { group in
            for _ in 0..<300 {
                group.addTask {
                    do {
                        _ = try await conn.send(request, timeout: .milliseconds(300))
                        return "answered"
                    } catch { return "\(error)" }
                }
            }
            var all: [String: Int] = [:]
            for await o in group { all[o, default: 0] += 1 }
            return all
        }
        #expect(outcomes == ["\(TransportError.timedOut)": 300])
        // The grace is 5 s; the bound is only that it ends.
        let closed = conn.closeFuture
        let ended = try await withThrowingTaskGroup(of: Bool.self) { group in
            group.addTask {
                try await closed.get()
                return true
            }
            group.addTask {
                try await Task.sleep(for: .seconds(60))
                return false
            }
            let first = try await group.next()!
            group.cancelAll()
            return first
        }
        #expect(ended, "the connection was still open 60 s after its requests timed out")
        #expect(conn.retiredBecause == HTTP2StreamTable.resetBudgetSpent)
        let next = try await HTTP2ClientConnection.connect(to: target, group: NIOSingletons.posixEventLoopGroup)
        #expect(try await next.send(try apnsRequest(next, key: key), timeout: .seconds(10)).status == 200)
        next.close()
        await emulator.stop()
    }

    /// A server shutting down gracefully: GOAWAY (NO_ERROR) naming the last request it processes, whose answer
    /// comes 300 ms later. The requests after it go again on a new connection, and the one it still answers gets its
    /// answer: the pool closed the connection at the first request refused on it, and that request failed as
    /// processed, never sent again. Every request is delivered once.
    @Test func aGracefulGoAwayLetsTheLastRequestItProcessesBeAnswered() async throws {
        let emulator = try APNsEmulator(credentials: creds)
        try await emulator.start()
        let failures = try await Self.sendAcrossADrain(40, to: emulator, warm: true)
        #expect(failures.isEmpty, "\(failures)")
        #expect(emulator.acceptedCount == 41)
        await emulator.stop()
    }

    /// `count` requests at once through an APNs client of one connection across the emulator's drain (after one
    /// request first when `warm`: the provider token taken, the stream limit raised); the failures.
    static func sendAcrossADrain(_ count: Int, to emulator: APNsEmulator, warm: Bool) async throws -> [String] {
        let (client, request) = try HostileProviderTests.emulatorClient(port: emulator.port, requestTimeout: 30)
        if warm { _ = try await client.send(request) }
        emulator.inject(.drain(reason: "Shutdown"))
        let failures = await withTaskGroup(of: String?.self) { group in
            for _ in 0..<count {
                group.addTask {
                    do throws(APNsFailure) {
                        _ = try await client.send(request)
                        return nil
                    } catch { return "\(error)" }
                }
            }
            var all: [String] = []
            for await case let f? in group { all.append(f) }
            return all
        }
        await client.shutdown()
        return failures
    }

    /// The same shutdown on a fresh connection, whose stream limit is still 1 (as APNs starts a connection with a
    /// provider token): the requests after the first wait in the HTTP/2 layer, which lets them go after the GOAWAY
    /// and fails each write with an error through the pipeline. The client closed the connection at that error, and
    /// the request the server was still answering failed as processed (every run of 5 before the mend); the flaky
    /// test above met the same when its limit had not yet been raised.
    @Test func requestsHeldByTheStreamLimitAcrossAGoAwayDoNotCloseTheConnection() async throws {
        let emulator = try APNsEmulator(credentials: creds)
        try await emulator.start()
        let failures = try await Self.sendAcrossADrain(10, to: emulator, warm: false)
        #expect(failures.isEmpty, "\(failures)")
        #expect(emulator.acceptedCount == 10)
        await emulator.stop()
    }

    /// The emulator's drain owes the answers of the requests it named processed, delayed ones too: it closes the
    /// connection once they are written. It closed 350 ms after the drain began, and a request handled before it
    /// whose answer waited out a longer response delay failed as processed.
    @Test func theEmulatorsDrainClosesOnceTheAnswersItOwesAreWritten() async throws {
        let emulator = try APNsEmulator(
            credentials: creds,
            configuration: .init(responseDelay: .init(milliseconds: 600))
        )
        let port = try await emulator.start()
        let (client, request) = try HostileProviderTests.emulatorClient(port: port, requestTimeout: 30)
        _ = try await client.send(request)
        // One request handled (its answer 600 ms away), then another that starts the drain (answered 300 ms later).
        let delayed = Task { _ = try await client.send(request) }
        for _ in 0..<500 where emulator.acceptedCount < 2 { try await Task.sleep(nanoseconds: 1_000_000) }
        emulator.inject(.drain(reason: "Shutdown"))
        let starter = Task { _ = try await client.send(request) }
        var failures: [String] = []
        for t in [delayed, starter] {
            do { try await t.value } catch { failures.append("\(error)") }
        }
        #expect(failures.isEmpty, "\(failures)")
        #expect(emulator.acceptedCount == 3)
        await client.shutdown()
        await emulator.stop()
    }

    /// The APNs emulator, its key, and a pool of one connection to it that has sent one request (the provider token
    /// taken, the stream limit raised).
    func warmPool() async throws -> (APNsEmulator, APNsSigningKey, HTTP2ConnectionPool<Void>) {
        let emulator = try APNsEmulator(credentials: creds)
        let port = try await emulator.start()
        let key = try APNsSigningKey(p8: creds.apnsKeyPEM, keyID: creds.apnsKeyID, teamID: creds.apnsTeamID)
        let pool = onePool(port: port)
        _ = try await pool.execute { try self.apnsRequest($0.connection, key: key) }
        return (emulator, key, pool)
    }

    /// A connection going away with a request still to be answered leaves its slot (a new connection takes the next
    /// requests) but not the pool's care: a shutdown closes it too. The pool forgot it, and its shutdown returned
    /// with it still open.
    @Test func aPoolShutDownClosesTheConnectionsStillDraining() async throws {
        let (emulator, key, pool) = try await warmPool()
        let first = try #require(pool.openConnections.first?.connection)
        emulator.inject(.drain(reason: "Shutdown"))
        // One request starts the drain (its answer comes 300 ms later); the other goes again on a new connection,
        // and its acquire sets the first connection aside.
        let sends = (0..<2).map { _ in
            Task { try await pool.execute { try self.apnsRequest($0.connection, key: key) } }
        }
        for _ in 0..<200 where pool.openConnections.first?.connection === first {
            try await Task.sleep(nanoseconds: 2_000_000)
        }
        await pool.shutdown()
        #expect(first.isClosed)
        #expect(pool.drainingConnections.isEmpty)
        for s in sends { _ = try? await s.value }
        await emulator.stop()
    }

    /// A server that sends GOAWAY on every connection while a request on it still waits for its answer: the pool
    /// keeps at most one such connection per slot open (the oldest past that is closed, its request failing as the
    /// server may have processed it), so the open connections stay within twice its slots. It held one per request,
    /// each for as long as its answer took (a Web Push endpoint is any origin a subscriber names).
    @Test func connectionsGoingAwayStayWithinTheSlots() async throws {
        let (emulator, key, pool) = try await warmPool()
        emulator.inject(.drain(reason: "Shutdown"), count: 3)
        let finished = NIOLockedValueBox(0)
        let sends = (0..<3).map { _ in
            Task {
                defer { finished.withLockedValue { $0 += 1 } }
                return try await pool.execute { try self.apnsRequest($0.connection, key: key) }
            }
        }
        // Every connection the pool has shown, and the most of them open at once.
        var seen: [ObjectIdentifier: HTTP2ClientConnection] = [:]
        var mostOpen = 0
        while finished.withLockedValue({ $0 }) < sends.count {
            for p in pool.openConnections + pool.drainingConnections {
                seen[ObjectIdentifier(p.connection)] = p.connection
            }
            mostOpen = max(mostOpen, seen.values.filter { !$0.isClosed }.count)
            try await Task.sleep(nanoseconds: 1_000_000)
        }
        #expect(mostOpen <= 2, "\(mostOpen) connections open at once, \(seen.count) seen")
        var outcomes: [String] = []
        for s in sends {
            do { outcomes.append("\(try await s.value.0.status)") } catch { outcomes.append("\(error)") }
        }
        #expect(outcomes.contains("200"), "\(outcomes)")
        await pool.shutdown()
        await emulator.stop()
    }

    /// `rounds` of `perRound` requests at once with a 2 ms timeout, on one connection to the emulator, then one more
    /// with 10 s: each of the first answered or timed out (none failed with the connection), the last answered.
    /// Their outcomes.
    func timeoutBurst(rounds: Int, perRound: Int) async throws -> [String: Int] {
        let emulator = try APNsEmulator(credentials: creds)
        let port = try await emulator.start()
        let key = try APNsSigningKey(p8: creds.apnsKeyPEM, keyID: creds.apnsKeyID, teamID: creds.apnsTeamID)
        let conn = try await HTTP2ClientConnection.connect(
            to: .init(host: "127.0.0.1", port: port, trust: .certificateAuthority(pem: creds.caCertificatePEM)),
            group: NIOSingletons.posixEventLoopGroup
        )
        let request = try apnsRequest(conn, key: key)
        var outcomes: [String: Int] = [:]
        for _ in 0..<rounds {
            let round = await withTaskGroup(of: String.self) { group in
                for _ in 0..<perRound {
                    group.addTask {
                        do {
                            _ = try await conn.send(request, timeout: .milliseconds(2))
                            return "answered"
                        } catch { return "\(error)" }
                    }
                }
                var all: [String: Int] = [:]
                for await o in group { all[o, default: 0] += 1 }
                return all
            }
            outcomes.merge(round, uniquingKeysWith: +)
        }
        try await Task.sleep(nanoseconds: 300_000_000)
        if conn.isUsable {
            #expect(Set(outcomes.keys).isSubset(of: ["answered", "\(TransportError.timedOut)"]), "\(outcomes)")
            let after = try await conn.send(request, timeout: .seconds(10))
            #expect(after.status == 200, "\(outcomes)")
        } else {
            // A run loaded past the late answers' grace resets streams; past its budget the client retires the
            // connection itself (it is never the server's GOAWAY), and the requests after are refused unsent: going
            // away, then, once the connection has closed, not sent (a loaded CI run: 400 timed out, 200 refused as
            // going away, 200 as closed "with the request in flight", which they never were).
            #expect(conn.retiredBecause == HTTP2StreamTable.resetBudgetSpent, "\(outcomes)")
            let retired = TransportError.goingAway(reason: HTTP2StreamTable.resetBudgetSpent, processed: false)
            let allowed: Set = ["answered", "\(TransportError.timedOut)", "\(retired)", "\(TransportError.notSent)"]
            #expect(Set(outcomes.keys).isSubset(of: allowed), "\(outcomes)")
        }
        conn.close()
        await emulator.stop()
        return outcomes
    }

    /// A request given to a connection that has closed fails as not sent, which is safe to send again: it failed as
    /// closed "with the request in flight" (maybe processed, not sent again) though nothing was written, as when the
    /// connection closed between the pool's choice and the send.
    @Test func aRequestOnAClosedConnectionFailsAsNotSent() async throws {
        let emulator = try APNsEmulator(credentials: creds)
        let port = try await emulator.start()
        let key = try APNsSigningKey(p8: creds.apnsKeyPEM, keyID: creds.apnsKeyID, teamID: creds.apnsTeamID)
        let conn = try await HTTP2ClientConnection.connect(
            to: .init(host: "127.0.0.1", port: port, trust: .certificateAuthority(pem: creds.caCertificatePEM)),
            group: NIOSingletons.posixEventLoopGroup
        )
        let request = try apnsRequest(conn, key: key)
        #expect(try await conn.send(request, timeout: .seconds(10)).status == 200)
        conn.close()
        try await conn.closeFuture.get()
        do {
            _ = try await conn.send(request, timeout: .seconds(10))
            Issue.record("a closed connection took a request")
        } catch let error as TransportError {
            #expect(error == .notSent && error.safeToRetry, "\(error)")
        }
        #expect(emulator.acceptedCount == 1)
        await emulator.stop()
    }

    /// A server that takes the TCP connection and never finishes the handshakes: the connect fails at its timeout
    /// and says so (it read "connection closed with the request in flight" when the timeout closed it), as a
    /// failure to connect, which cannot have sent anything.
    @Test func aHandshakeThatNeverEndsFailsAtTheTimeoutAndSaysSo() async throws {
        let silent = try await ServerBootstrap(group: NIOSingletons.posixEventLoopGroup)
            .bind(host: "127.0.0.1", port: 0).get()
        let port = try #require(silent.localAddress?.port)
        let started = Date()
        do {
            _ = try await HTTP2ClientConnection.connect(
                to: .init(host: "127.0.0.1", port: port, trust: .certificateAuthority(pem: creds.caCertificatePEM)),
                group: NIOSingletons.posixEventLoopGroup,
                timeout: .milliseconds(300)
            )
            Issue.record("connected to a server that never answers")
        } catch let error as TransportError {
            guard case .connectFailed(let message, let stage) = error else {
                Issue.record("\(error)")
                return
            }
            #expect(message.contains("127.0.0.1:\(port)") && message.contains("had not ended within 0.3 s"))
            #expect(stage == .handshakeTimedOut && error.label == "handshake_timed_out")
            #expect(error.safeToRetry)
        }
        // Not before the deadline. No bound after it: the message above says the connect's own deadline ended it
        // (only its timer sets what that message reads), and a wall-clock bound on the rest measured the scheduling
        // of the parallel suite on two cores (a fresh clone's run had this test at 18 s, and tests that await
        // nothing at 14 s).
        let took = Date().timeIntervalSince(started)
        #expect(took >= 0.29, "\(took)")
        try await silent.close()
    }

    /// A connect that fails names the step that did not complete, for both ways of connecting: no TCP connection
    /// (`connect_failed`), a certificate not trusted (`tls_failed`), a server that closes during the handshake
    /// (`closed_in_handshake`) or never ends it (`handshake_timed_out`). Each of them read `connect_failed` before,
    /// whose meaning could only list the three steps.
    @Test func aConnectThatFailsNamesTheStepThatDidNotComplete() async throws {
        let group = NIOSingletons.posixEventLoopGroup
        // Only the silent server waits out the timeout: the others fail before it, however loaded the machine (at
        // 0.5 s a TLS handshake with the emulator in a loaded run read as handshake_timed_out).
        func stage(
            port: Int,
            trust: TLSTrust? = nil,
            negotiated: Bool,
            timeout: TimeAmount = .seconds(20)
        ) async -> (ConnectStage?, String) {
            let target = HTTP2ClientConnection.Target(
                host: "127.0.0.1",
                port: port,
                trust: trust ?? .certificateAuthority(pem: creds.caCertificatePEM)
            )
            do {
                if negotiated {
                    _ = try await NegotiatedConnection.connect(to: target, group: group, timeout: timeout)
                } else {
                    _ = try await HTTP2ClientConnection.connect(to: target, group: group, timeout: timeout)
                }
                return (nil, "connected")
            } catch let error as TransportError {
                guard case .connectFailed(_, let stage) = error else { return (nil, "\(error)") }
                #expect(error.safeToRetry && TransportError.meaning(ofLabel: error.label) != nil, "\(error)")
                return (stage, "\(error)")
            } catch {
                return (nil, "\(error)")
            }
        }
        // A port nothing listens on, held by a socket bound to it and not listening, so that no other test's
        // server takes it meanwhile (a port closed before the connect was taken by one: a fresh clone's run read
        // "tls" there, twice).
        let held = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(held) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { a in
            a.withMemoryRebound(to: sockaddr.self, capacity: 1) { p in
                bind(held, p, length) == 0 && getsockname(held, p, &length) == 0
            }
        }
        try #require(bound)
        let gonePort = Int(UInt16(bigEndian: address.sin_port))
        // The emulator, its certificate checked against the system's authorities (which never signed it).
        let emulator = try APNsEmulator(credentials: creds)
        let emulatorPort = try await emulator.start()
        // A server that closes each connection as it comes, and one that never answers.
        let closing = try await ServerBootstrap(group: group)
            .childChannelInitializer { $0.close() }
            .bind(host: "127.0.0.1", port: 0).get()
        let closingPort = try #require(closing.localAddress?.port)
        let silent = try await ServerBootstrap(group: group).bind(host: "127.0.0.1", port: 0).get()
        let silentPort = try #require(silent.localAddress?.port)
        for negotiated in [false, true] {
            let tcp = await stage(port: gonePort, negotiated: negotiated)
            #expect(tcp.0 == .tcp, "\(tcp.1)")
            let tls = await stage(port: emulatorPort, trust: .system, negotiated: negotiated)
            #expect(tls.0 == .tls && tls.1.contains("TLS handshake failed"), "\(tls.1)")
            let closed = await stage(port: closingPort, negotiated: negotiated)
            #expect(closed.0 == .closedInHandshake, "\(closed.1)")
            // The timeout covers the TCP connect too: 1.5 s, so that a loaded run's event loop, late to see the
            // connect complete, does not read as the TCP step failing (at 300 ms it did, once in 8 runs).
            let timedOut = await stage(port: silentPort, negotiated: negotiated, timeout: .milliseconds(1500))
            #expect(timedOut.0 == .handshakeTimedOut, "\(timedOut.1)")
        }
        #expect(ConnectStage.tls.label == "tls_failed" && ConnectStage.tcp.label == "connect_failed")
        try await closing.close()
        try await silent.close()
        await emulator.stop()
    }

    /// A pool shut down while one of its connects is still under way (an app's clients are replaced when its
    /// credentials change): the connect fails later and must not mark a slot the shutdown removed. The API
    /// fuzzer's server trapped here (index out of range) after a run of credential changes.
    @Test func aConnectThatFailsAfterTheShutdownDoesNotTrap() async throws {
        // A listener that takes the connection and never answers the TLS handshake.
        let silent = try await ServerBootstrap(group: NIOSingletons.posixEventLoopGroup)
            .bind(host: "127.0.0.1", port: 0).get()
        let port = try #require(silent.localAddress?.port)
        let pool = HTTP2ConnectionPool<Void>(
            configuration: .init(
                target: .init(host: "127.0.0.1", port: port, trust: .certificateAuthority(pem: creds.caCertificatePEM)),
                connections: 2,
                connectTimeout: .milliseconds(400),
                maxAttempts: 1
            ),
            group: NIOSingletons.posixEventLoopGroup,
            makeExtra: {}
        )
        let request = Task { try await pool.execute { _ in H2Request(path: "/", headers: [], body: ByteBuffer()) } }
        try await Task.sleep(nanoseconds: 100_000_000)
        await pool.shutdown()
        await #expect(throws: TransportError.self) { _ = try await request.value }
        // The connect's own failure lands after the shutdown; give it time to run.
        try await Task.sleep(nanoseconds: 600_000_000)
        #expect(pool.openConnections.isEmpty)
        try await silent.close()
    }
}
