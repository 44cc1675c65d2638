/// Which requests misbehave: the next N, or a share of them chosen by a seeded generator.
struct FaultPlan<Fault: Sendable>: Sendable {
    private var rules: [(fault: Fault, remaining: Int?, rate: Double?)] = []
    private var rng = SplitMix(seed: 0x5EED)

    mutating func add(_ fault: Fault, count: Int) { rules.append((fault, count, nil)) }
    mutating func add(_ fault: Fault, rate: Double) { rules.append((fault, nil, rate)) }
    mutating func clear() { rules.removeAll() }
    /// Counted faults not yet met.
    var pending: Int { rules.reduce(0) { $0 + ($1.remaining ?? 0) } }

    /// The fault for the request now being handled, if any.
    mutating func next() -> Fault? {
        for i in rules.indices {
            if let rate = rules[i].rate {
                if rng.nextDouble() < rate { return rules[i].fault }
                continue
            }
            if let n = rules[i].remaining, n > 0 {
                let fault = rules[i].fault
                if n == 1 { rules.remove(at: i) } else { rules[i].remaining = n - 1 }
                return fault
            }
        }
        return nil
    }
}

/// The last `capacity` items, oldest first, with a count of all ever added. With a `key`, it also counts the kept
/// items per key, so that asking for a key it does not hold costs O(1): the benchmarks poll for one device's
/// notification many times a second while 100,000 others are kept.
struct RecordRing<Item: Sendable>: Sendable {
    let capacity: Int
    private let key: (@Sendable (Item) -> String)?
    private var items: [Item] = []
    private var start = 0
    private var perKey: [String: Int] = [:]
    private(set) var total = 0

    init(capacity: Int, key: (@Sendable (Item) -> String)? = nil) {
        self.capacity = max(1, capacity)
        self.key = key
    }

    var count: Int { items.count }

    mutating func append(_ item: Item) {
        total += 1
        if let key { perKey[key(item), default: 0] += 1 }
        if items.count < capacity {
            items.append(item)
        } else {
            if let key {
                let gone = key(items[start])
                if let n = perKey[gone], n > 1 { perKey[gone] = n - 1 } else { perKey[gone] = nil }
            }
            items[start] = item
            start = (start + 1) % capacity
        }
    }

    var ordered: [Item] { Array(items[start...] + items[..<start]) }

    /// The newest `n` items, oldest first, without copying the rest.
    func last(_ n: Int) -> [Item] {
        let n = min(max(0, n), items.count)
        return (items.count - n..<items.count).map { items[(start + $0) % items.count] }
    }

    /// The kept items with this key, oldest first (a ring made without a key filters every item).
    func items(withKey wanted: String) -> [Item] {
        guard let key else { return [] }
        guard perKey[wanted] != nil else { return [] }
        return Array((0..<items.count).lazy.map { items[(start + $0) % items.count] }.filter { key($0) == wanted })
    }

    mutating func removeAll() {
        items.removeAll()
        perKey.removeAll()
        start = 0
        total = 0
    }
}

/// A small deterministic generator (splitmix64) for fault rates, and for tests whose "random" inputs must be the
/// same on every run.
public struct SplitMix: Sendable {
    var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func nextDouble() -> Double { Double(next() >> 11) / Double(1 << 53) }
}
