import Foundation
import Testing

@testable import RichPushServer

/// The key cache keeps the entries used last, whatever floods it, and each operation stays O(1).
@Suite struct StoreCacheTests {
    @Test func theLeastRecentlyUsedEntryMakesRoom() {
        var lru = LRU<Int>(capacity: 3)
        for (i, k) in ["a", "b", "c"].enumerated() { lru.set(k, i) }
        #expect(lru.keysByUse == ["c", "b", "a"])
        #expect(lru.get("a") == 0)  // a is now the newest
        lru.set("d", 3)  // b, the least recently used, goes
        #expect(lru.keysByUse == ["d", "a", "c"])
        #expect(lru.get("b") == nil)
        lru.remove("a")
        lru.set("e", 4)
        lru.set("f", 5)  // c goes
        #expect(lru.keysByUse == ["f", "e", "d"])
        lru.set("e", 40)
        #expect(lru.keysByUse == ["e", "f", "d"] && lru.get("e") == 40 && lru.count == 3)
        lru.removeAll()
        #expect(lru.count == 0 && lru.keysByUse.isEmpty)
        lru.set("g", 6)
        #expect(lru.keysByUse == ["g"])
    }

    @Test func aFloodOfUnknownKeysKeepsTheKeysInUse() async throws {
        let cache = StoreCache<String>(lifetime: 60, capacity: 1_000)
        _ = try await cache.value("real") { "grant" }
        var loads = 0
        for i in 0..<100_000 {
            _ = try await cache.value("unknown-\(i)") { nil }
            // The real key is used between the unknown ones, as a real client's requests are.
            if i % 100 == 0 {
                _ = try await cache.value("real") {
                    loads += 1
                    return "grant"
                }
            }
        }
        #expect(loads == 0)
        #expect(cache.count == 1_000)
    }
}
