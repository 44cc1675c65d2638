import Foundation
import NIOConcurrencyHelpers
import Testing

@testable import RichPushServer

/// The node's word that work was queued: each telling reaches the listeners and the other nodes' announcer once,
/// at the same cost however often it was told before.
@Suite struct WorkQueuedTests {
    /// The announcer is called at the same stack depth the thousandth time as the first. A closure kept in a lock
    /// and read back through its inout access was wrapped once more at each reading: after a send of N requests each
    /// telling walked N nested wrappers (a quarter of a PostgreSQL node's CPU in the cluster benchmark).
    @Test func tellingCostsTheSameTheThousandthTime() {
        let q = WorkQueued()
        let depths = NIOLockedValueBox<[Int]>([])
        let woken = NIOLockedValueBox(0)
        q.listen { woken.withLockedValue { $0 += 1 } }
        q.tellPeers { _ in depths.withLockedValue { $0.append(Thread.callStackReturnAddresses.count) } }
        for _ in 0..<1000 { q.tell() }
        let seen = depths.withLockedValue { $0 }
        #expect(seen.count == 1000 && woken.withLockedValue { $0 } == 1000)
        #expect(
            seen.last == seen.first,
            "stack depth \(seen.first ?? -1) at the first telling, \(seen.last ?? -1) at the last"
        )
    }

    /// A notice between nodes carries the earliest time as seconds with microseconds; whatever else arrives on the
    /// channel (any client of the database may send there) reads as "not known", which forgets every mark.
    @Test func aNoticesTimeIsReadOnlyWhenItIsOne() {
        let t = Date(timeIntervalSince1970: 1_900_000_000.123456)
        let text = WorkNotice.payload(earliest: t)
        #expect(text == "1900000000.123456")
        #expect(WorkNotice.earliest(fromPayload: text) == t)
        #expect(WorkNotice.payload(earliest: nil) == "")
        #expect(WorkNotice.payload(earliest: Date(timeIntervalSince1970: .infinity)) == "")
        for junk in [
            "", "nan", "inf", "-inf", "1e300", "-5", "0x10", "1e3", "12 34", "1.2.3", String(repeating: "1", count: 40),
            "é",
        ] {
            #expect(WorkNotice.earliest(fromPayload: junk) == nil, "\(junk)")
        }
    }
}
