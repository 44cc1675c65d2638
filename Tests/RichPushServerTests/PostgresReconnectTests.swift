import Foundation
import RichPushServer
import RichPushTestSupport
import Testing

/// A node whose database comes back after a long outage is back within seconds: its pool, which waits longer and
/// longer between attempts to connect (a minute at most), is replaced once a connection of the node's own is
/// answered.
@Suite struct PostgresReconnectTests {
    @Test func aNodeIsBackSoonAfterALongOutageNotWhenItsPoolNextTries() async throws {
        let server = try await PostgresServer.shared()
        let relay = try await TCPRelay.start(to: server.port)
        defer { relay.stop() }
        let url = try await PostgresFixture.url()
        let relayed = url.replacingOccurrences(of: ":\(server.port)/", with: ":\(relay.port)/")
        let db = try await PostgresDatabase.open(try PostgresSettings(url: relayed), timeout: .seconds(10))
        relay.cut()
        let cutAt = ContinuousClock.now
        while db.health.isUp, cutAt.duration(to: .now) < .seconds(30) {
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(!db.health.isUp, "still up 30 s after the cut")
        // The pool's attempts come further and further apart. Once two are 8 s apart the next is about 10 s
        // away: restore just after one, so that a node relying on its pool alone would be back in 10 s at the
        // earliest. (A node that also tries a connection of its own every second or two never shows such a gap:
        // the cut then ends after 50 s, when the pool's gaps are past 8 s.)
        var gap = Duration.zero
        while cutAt.duration(to: .now) < .seconds(50) {
            let attempts = relay.attempts
            if attempts.count >= 2 {
                gap = attempts[attempts.count - 2].duration(to: attempts[attempts.count - 1])
                if gap >= .seconds(8), attempts[attempts.count - 1].duration(to: .now) < .milliseconds(300) { break }
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        relay.restore()
        let restoredAt = ContinuousClock.now
        while !db.health.isUp, restoredAt.duration(to: .now) < .seconds(30) {
            try await Task.sleep(for: .milliseconds(100))
        }
        let back = restoredAt.duration(to: .now)
        // Within 6 s (about 2 s when the machine is quiet): the pool's next attempt would have been 10 s away.
        #expect(
            db.health.isUp && back < .seconds(6),
            "back \(back) after the restore; cut for \(cutAt.duration(to: restoredAt)), last gap between attempts \(gap)"
        )
        let answer = try await db.rows("SELECT 1")
        #expect(answer.count == 1)
        print("reconnect test: cut \(cutAt.duration(to: restoredAt)), back \(back) after the restore")
        await db.close()
    }
}
