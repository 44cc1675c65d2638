import Testing

@testable import RichPushSandbox

/// The emulators' record of what they accepted: the newest `capacity` items, and a per-key count that keeps a
/// lookup for an absent key O(1) while the kept items are evicted underneath it.
@Suite struct RecordRingTests {
    @Test func keepsTheNewestAndFindsThemByKey() {
        var ring = RecordRing<String>(capacity: 4, key: { String($0.prefix(1)) })
        for item in ["a1", "b1", "a2", "c1", "a3", "b2"] { ring.append(item) }
        #expect(ring.total == 6)
        #expect(ring.count == 4)
        #expect(ring.ordered == ["a2", "c1", "a3", "b2"])
        #expect(ring.items(withKey: "a") == ["a2", "a3"])
        #expect(ring.items(withKey: "b") == ["b2"])
        #expect(ring.items(withKey: "z") == [])
        #expect(ring.last(2) == ["a3", "b2"])
        #expect(ring.last(10) == ["a2", "c1", "a3", "b2"])
        #expect(ring.last(-1) == [])
        // Evicting every "a" leaves none behind in the count.
        for item in ["d1", "d2", "d3", "d4"] { ring.append(item) }
        #expect(ring.items(withKey: "a") == [])
        #expect(ring.items(withKey: "d") == ["d1", "d2", "d3", "d4"])
        ring.removeAll()
        #expect(ring.items(withKey: "d") == [])
        #expect(ring.last(3) == [])
    }
}
