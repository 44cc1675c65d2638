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

/// The last `capacity` items, oldest first, with a count of all ever added.
struct RecordRing<Item: Sendable>: Sendable {
    let capacity: Int
    private var items: [Item] = []
    private var start = 0
    private(set) var total = 0

    init(capacity: Int) { self.capacity = max(1, capacity) }

    mutating func append(_ item: Item) {
        total += 1
        if items.count < capacity {
            items.append(item)
        } else {
            items[start] = item
            start = (start + 1) % capacity
        }
    }

    var ordered: [Item] { Array(items[start...] + items[..<start]) }

    mutating func removeAll() {
        items.removeAll()
        start = 0
        total = 0
    }
}

/// A small deterministic generator for fault rates.
struct SplitMix: Sendable {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func nextDouble() -> Double { Double(next() >> 11) / Double(1 << 53) }
}
