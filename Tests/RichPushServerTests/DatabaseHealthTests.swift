import Foundation
import NIOConcurrencyHelpers
import RichPushServer
import Testing

/// What a node says of its database: a failure marks it down, unless the operation that saw it began before the
/// database last came back up (it waited out the fault; the probe has seen the database answer since).
@Suite struct DatabaseHealthTests {
    @Test func aFailureOfAnOperationBegunBeforeTheRecoveryIsStale() {
        let health = DatabaseHealth()
        let changes = NIOLockedValueBox<[Bool]>([])
        health.observe { up in changes.withLockedValue { $0.append(up) } }
        let beforeTheFault = health.epoch
        health.markDown("connection refused", begunAt: health.epoch)
        #expect(!health.isUp && health.status.reason == "connection refused")
        // Begun during the fault; it ends in a timeout after the probe saw the database answer.
        let duringTheFault = health.epoch
        health.markUp()
        health.markDown("no answer in time", begunAt: duringTheFault)
        health.markDown("no answer in time", begunAt: beforeTheFault)
        #expect(health.isUp && health.status.reason == nil)
        // Begun after the recovery: the database is down again.
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
}
