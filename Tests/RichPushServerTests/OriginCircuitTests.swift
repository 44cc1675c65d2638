import Foundation
import RichPushTransport
import Testing

@testable import RichPushServer

/// The circuit of one push service origin, driven event by event with the clock passed in.
@Suite struct OriginCircuitTests {
    let t0 = Date(timeIntervalSince1970: 1_800_000_000)
    let policy = OriginCircuit.Policy(failuresToOpen: 3, firstBackoff: 2, maxBackoff: 8)

    @Test func failuresInARowOpenItAndASuccessBetweenResetsTheRun() {
        var c = OriginCircuit(policy: policy)
        #expect(c.admit(now: t0).0 == .send)
        #expect(c.finished(.failed, probe: false, now: t0) == nil)
        #expect(c.finished(.failed, probe: false, now: t0) == nil)
        #expect(c.failuresInARow == 2)
        // An answer (even a 4xx about one token) shows the service working: the run starts again.
        #expect(c.finished(.answered, probe: false, now: t0) == nil)
        #expect(c.failuresInARow == 0)
        // What never reached the service says nothing.
        #expect(c.finished(.neutral, probe: false, now: t0) == nil)
        #expect(c.finished(.failed, probe: false, now: t0) == nil)
        #expect(c.finished(.failed, probe: false, now: t0) == nil)
        #expect(c.finished(.failed, probe: false, now: t0) == .opened)
        #expect(c.state == .open(until: t0.addingTimeInterval(2), backoff: 2, since: t0))
        #expect(c.name == "open" && c.retryAt == t0.addingTimeInterval(2) && c.openedAt == t0)
    }

    @Test func openItHoldsEverySendUntilItsTimeThenOneProbeGoes() {
        var c = opened()
        #expect(c.admit(now: t0.addingTimeInterval(1)).0 == .wait(until: t0.addingTimeInterval(2)))
        let (probe, change) = c.admit(now: t0.addingTimeInterval(2))
        #expect(probe == .probe && change == .probing && c.name == "probing")
        // While the probe runs the rest wait a backoff (they come back then, whatever the probe says).
        #expect(c.admit(now: t0.addingTimeInterval(3)).0 == .wait(until: t0.addingTimeInterval(5)))
        // Failures of sends that began before it opened change nothing now.
        #expect(c.finished(.failed, probe: false, now: t0.addingTimeInterval(3)) == nil)
        #expect(c.name == "probing")
    }

    @Test func aFailedProbeReopensWithTheWaitDoubledUpToTheCap() {
        var c = opened()
        var now = t0.addingTimeInterval(2)
        var expected: [TimeInterval] = []
        var waits: [TimeInterval] = []
        for backoff in [4.0, 8, 8] {
            #expect(c.admit(now: now).0 == .probe)
            #expect(c.finished(.failed, probe: true, now: now) == .opened)
            guard case .open(let until, let b, let since) = c.state else {
                Issue.record("not open: \(c.state)")
                return
            }
            #expect(since == t0)
            waits.append(b)
            expected.append(backoff)
            #expect(until == now.addingTimeInterval(backoff))
            now = until
        }
        #expect(waits == expected)
    }

    @Test func aProbeThatSucceedsClosesIt() {
        var c = opened()
        #expect(c.admit(now: t0.addingTimeInterval(2)).0 == .probe)
        #expect(c.finished(.answered, probe: true, now: t0.addingTimeInterval(2.5)) == .closed)
        #expect(c.state == .closed(failures: 0))
        #expect(c.admit(now: t0.addingTimeInterval(2.6)).0 == .send)
    }

    @Test func aProbeThatNeverWentOutLetsTheNextSendProbe() {
        var c = opened()
        let at = t0.addingTimeInterval(2)
        #expect(c.admit(now: at).0 == .probe)
        // Its lease was gone: it was not sent.
        _ = c.finished(.neutral, probe: true, now: at)
        #expect(c.admit(now: at).0 == .probe)
    }

    @Test func anAnswerToASendThatBeganEarlierClosesAnOpenCircuit() {
        var c = opened()
        #expect(c.finished(.answered, probe: false, now: t0.addingTimeInterval(1)) == .closed)
        #expect(c.admit(now: t0.addingTimeInterval(1)).0 == .send)
    }

    @Test func thePolicyHoldsItsNumbersInRange() {
        let p = OriginCircuit.Policy(failuresToOpen: 0, firstBackoff: -5, maxBackoff: .infinity)
        #expect(p.failuresToOpen == 1 && p.firstBackoff == 0.001 && p.maxBackoff == 86_400)
        let q = OriginCircuit.Policy(failuresToOpen: 3, firstBackoff: 30, maxBackoff: 1)
        #expect(q.maxBackoff == 30)
    }

    /// A circuit opened at t0 (three failures in a row).
    func opened() -> OriginCircuit {
        var c = OriginCircuit(policy: policy)
        for _ in 0..<3 { _ = c.finished(.failed, probe: false, now: t0) }
        return c
    }
}

/// The node's bounds and circuits: what each send is told, and what a result says of its service.
@Suite struct DeliveryAdmissionTests {
    let t0 = Date(timeIntervalSince1970: 1_800_000_000)

    func delivery(_ id: Int64, app: String) -> DeliveryRecord {
        DeliveryRecord(
            id: id,
            notificationID: "n",
            appID: app,
            provider: .apns,
            target: .token("t\(id)"),
            state: .leased,
            attempts: 1,
            notBefore: t0,
            expiresAt: nil,
            leaseOwner: "w",
            leaseUntil: nil,
            reason: nil,
            providerID: nil,
            updatedAt: t0
        )
    }

    @Test func anOriginTakesItsBoundOfSendsAndNoMore() {
        let a = DeliveryAdmission(limits: .init(perApp: 100, perOrigin: 3))
        let origin = "https://push.example.com:443"
        let answers = (0..<5).map { _ in a.admit(app: "a", origin: origin, now: t0) }
        #expect(answers == [.send(probe: false), .send(probe: false), .send(probe: false), .busy, .busy])
        #expect(a.inFlight(origin: origin) == 3)
        // Another origin is not held up by it.
        #expect(a.admit(app: "a", origin: "https://other.example.com:443", now: t0) == .send(probe: false))
        a.finished(app: "a", origin: origin, probe: false, signal: .answered, reason: nil, now: t0)
        #expect(a.admit(app: "b", origin: origin, now: t0) == .send(probe: false))
        #expect(a.admit(app: "b", origin: origin, now: t0) == .busy)
        // No origin named: only the app's bound, which its claim kept.
        #expect(a.admit(app: "b", origin: nil, now: t0) == .send(probe: false))
    }

    @Test func anAppHoldsItsBoundAndTheClaimRoomsSaySo() {
        let a = DeliveryAdmission(limits: .init(perApp: 2, perOrigin: 100))
        #expect(a.rooms() == ClaimRooms(perApp: 2))
        let over = a.hold([delivery(1, app: "a"), delivery(2, app: "a"), delivery(3, app: "a"), delivery(4, app: "b")])
        #expect(over == [3])
        #expect(a.rooms().room("a") == 0 && a.rooms().room("b") == 1 && a.rooms().room("c") == 2)
        a.unhold(app: "a")
        #expect(a.rooms().room("a") == 1 && a.held(app: "a") == 1)
    }

    @Test func anOpenCircuitSendsTheDeliveriesBackUntilItsProbe() {
        let a = DeliveryAdmission(limits: .init(perApp: 100, perOrigin: 100, failuresToOpen: 2, firstBackoff: 4))
        let origin = "https://dead.example.com:443"
        for _ in 0..<2 {
            #expect(a.admit(app: "a", origin: origin, now: t0) == .send(probe: false))
            a.finished(app: "a", origin: origin, probe: false, signal: .failed, reason: "send_deadline", now: t0)
        }
        #expect(a.circuitState(origin: origin) == "open")
        guard case .wait(let until, let reason) = a.admit(app: "b", origin: origin, now: t0) else {
            Issue.record("not told to wait")
            return
        }
        // Back at the reopening, spread over a quarter of the wait after it.
        #expect(reason == "circuit_open" && until >= t0.addingTimeInterval(4) && until <= t0.addingTimeInterval(5))
        #expect(a.admit(app: "b", origin: origin, now: t0.addingTimeInterval(4)) == .send(probe: true))
        #expect(a.circuitState(origin: origin) == "probing")
        a.finished(app: "b", origin: origin, probe: true, signal: .answered, reason: nil, now: t0.addingTimeInterval(4))
        #expect(a.circuitState(origin: origin) == "closed")
        let status = a.status(app: "a")
        #expect(status.map(\.origin) == [origin] && status.first?.lastFailure == "send_deadline")
        #expect(a.status(app: "nobody").isEmpty)
    }

    @Test func aResultSaysWhatItShowsOfItsService() {
        let failed: [SendResult] = [
            .failed(.retry, reason: "send_deadline"), .failed(.retry, reason: "webpush_transport"),
            .failed(.retry, reason: "webpush_503"), .failed(.retry, reason: "ServiceUnavailable"),
            .failed(.retry, reason: "transport_timed_out"),
            .failed(.fixCredentials, reason: "transport_connect_failed"),
            .failed(.retry, reason: "UNAVAILABLE"), .failed(.retry, reason: "webpush_dns"),
        ]
        let answered: [SendResult] = [
            .delivered(providerID: nil), .failed(.dropToken, reason: "webpush_410"),
            .failed(.dropToken, reason: "Unregistered"), .failed(.fixRequest, reason: "webpush_413"),
            .failed(.never, reason: "BadDeviceToken"), .failed(.fixCredentials, reason: "InvalidProviderToken"),
        ]
        let neutral: [SendResult] = [
            .failed(.retry, reason: "database_unavailable"), .failed(.fixCredentials, reason: "unknown_app"),
            .failed(.fixCredentials, reason: "webpush_not_configured"), .failed(.retryAfter(5), reason: "webpush_429"),
            .failed(.retryAfter(5), reason: "TooManyRequests"), .failed(.retryAfter(5), reason: "QUOTA_EXCEEDED"),
            .failed(.dropToken, reason: "webpush_address_refused_loopback"),
            .failed(.never, reason: "notification_missing"),
        ]
        for r in failed { #expect(DeliveryAdmission.signal(of: r) == .failed, "\(r)") }
        for r in answered { #expect(DeliveryAdmission.signal(of: r) == .answered, "\(r)") }
        for r in neutral { #expect(DeliveryAdmission.signal(of: r) == .neutral, "\(r)") }
    }

    @Test func theDefaultsLeaveAnotherAppATenthOfTheNode() {
        let d = DeliveryAdmission.Limits.defaults(concurrency: 200)
        #expect(d.perApp == 180 && d.perOrigin == 180)
        #expect(DeliveryAdmission.Limits.defaults(concurrency: 10).perApp == 9)
        let reserved = DeliveryAdmission.Limits.defaults(concurrency: 200, reserve: 100)
        #expect(reserved.perApp == 270 && reserved.perOrigin == 180)
        #expect(DeliveryAdmission.Limits.defaults(concurrency: 1).perApp == 1)
        let clamped = DeliveryAdmission.Limits(perApp: 0, perOrigin: -3, originWait: 1e9, busyDelay: -1)
        #expect(clamped.perApp == 1 && clamped.perOrigin == 1 && clamped.originWait == 60 && clamped.busyDelay == 0.01)
    }
}
