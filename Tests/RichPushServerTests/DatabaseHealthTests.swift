import Foundation
import NIOConcurrencyHelpers
import RichPushServer
import Testing

/// What a node says of its database: a failure marks it down, unless the database answered something after the
/// operation that saw it began (load, or a wait that outlasted a fault the probe has seen end, is not an outage).
@Suite struct DatabaseHealthTests {
    @Test func aFailureMarksTheDatabaseDownOnlyWhenNothingWasAnsweredSinceItsOperationBegan() {
        let health = DatabaseHealth()
        let changes = NIOLockedValueBox<[Bool]>([])
        health.observe { up in changes.withLockedValue { $0.append(up) } }

        // Load: a query misses its deadline while others are answered. Still up.
        let slow = health.epoch
        health.answered()
        health.markDown("no answer in time", begunAt: slow)
        #expect(health.isUp && health.status.reason == nil)

        // An outage: nothing answered since the operation began.
        let beforeTheFault = health.epoch
        health.markDown("connection refused", begunAt: health.epoch)
        #expect(!health.isUp && health.status.reason == "connection refused")
        // Begun during the fault; it ends in a timeout after the probe saw the database answer.
        let duringTheFault = health.epoch
        health.markUp()
        health.markDown("no answer in time", begunAt: duringTheFault)
        health.markDown("no answer in time", begunAt: beforeTheFault)
        #expect(health.isUp && health.status.reason == nil)
        // Begun after the recovery, with nothing answered since: down again.
        health.markDown("no answer in time", begunAt: health.epoch)
        #expect(!health.isUp && health.status.reason == "no answer in time")
        // While it is down, every failure says why (the newest reason), stale or not.
        health.markDown("server closed the connection", begunAt: duringTheFault)
        #expect(health.status.reason == "server closed the connection")
        // Without an epoch (a failure seen now, of nothing that began earlier): down.
        health.markUp()
        health.markDown("refused")
        #expect(!health.isUp)
        #expect(changes.withLockedValue { $0 } == [false, true, false, true, false])
    }

    /// The probe's missed deadline: one is a slow moment (a node starved of CPU misses it too), two in a row with
    /// nothing answered since the first began are a hang; an answer between them starts the count again.
    @Test func theProbeTellsAHangOnlyFromTwoMissesInARow() {
        let health = DatabaseHealth()
        let first = health.epoch
        health.probeMissed("no answer in time", begunAt: first)
        #expect(health.isUp)
        // A query answered meanwhile: the next miss is a first again.
        health.answered()
        let afterAnAnswer = health.epoch
        health.probeMissed("no answer in time", begunAt: afterAnAnswer)
        #expect(health.isUp)
        // Nothing answered since that miss began: the second in a row tells the hang.
        health.probeMissed("no answer in time", begunAt: health.epoch)
        #expect(!health.isUp && health.status.reason == "no answer in time")
        // Up again; a miss begun then is a first.
        health.markUp()
        health.probeMissed("no answer in time", begunAt: health.epoch)
        #expect(health.isUp)
    }
}
