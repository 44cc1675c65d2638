/// Canonical Huffman codes with a length limit, built deterministically (ties broken by symbol).
struct HuffmanCode {
    /// Code length per symbol; 0 for unused symbols.
    var lengths: [UInt8]
    /// The codes, bit-reversed so that they can be written least-significant bit first.
    var codes: [UInt16]

    init(frequencies: [Int], maxLength: Int) {
        lengths = HuffmanCode.lengths(for: frequencies, maxLength: maxLength)
        codes = HuffmanCode.canonicalCodes(lengths)
    }

    init(lengths: [UInt8]) {
        self.lengths = lengths
        codes = HuffmanCode.canonicalCodes(lengths)
    }

    static func lengths(for frequencies: [Int], maxLength: Int) -> [UInt8] {
        var result = [UInt8](repeating: 0, count: frequencies.count)
        var used = frequencies.indices.filter { frequencies[$0] > 0 }
        if used.isEmpty { return result }
        if used.count == 1 {
            result[used[0]] = 1
            return result
        }
        // Build the tree with two sorted queues (leaves, then merged nodes): no heap needed.
        used.sort { frequencies[$0] != frequencies[$1] ? frequencies[$0] < frequencies[$1] : $0 < $1 }
        let n = used.count
        var weight = [Int](repeating: 0, count: 2 * n)
        var parent = [Int](repeating: -1, count: 2 * n)
        for (i, s) in used.enumerated() { weight[i] = frequencies[s] }
        var leaf = 0
        var node = n
        var next = n
        func take() -> Int {
            if leaf < n && (node >= next || weight[leaf] <= weight[node]) {
                leaf += 1
                return leaf - 1
            }
            node += 1
            return node - 1
        }
        while next < 2 * n - 1 {
            let a = take()
            let b = take()
            weight[next] = weight[a] + weight[b]
            parent[a] = next
            parent[b] = next
            next += 1
        }
        // Depth of each leaf.
        var depth = [Int](repeating: 0, count: 2 * n)
        var i = 2 * n - 3
        while i >= 0 {
            depth[i] = depth[parent[i]] + 1
            i -= 1
        }
        // Count codes per length, then pull over-long codes up while keeping the code complete.
        var count = [Int](repeating: 0, count: max(maxLength, 2 * n) + 2)
        for i in 0..<n { count[depth[i]] += 1 }
        var len = count.count - 1
        while len > maxLength {
            while count[len] > 0 {
                var j = len - 2
                while j > 0 && count[j] == 0 { j -= 1 }
                count[len] -= 2
                count[len - 1] += 1
                count[j + 1] += 2
                count[j] -= 1
            }
            len -= 1
        }
        // Shortest codes to the most frequent symbols.
        var order = Array(used.reversed())  // most frequent first
        order.sort { frequencies[$0] != frequencies[$1] ? frequencies[$0] > frequencies[$1] : $0 < $1 }
        var k = 0
        for l in 1...maxLength {
            for _ in 0..<count[l] {
                result[order[k]] = UInt8(l)
                k += 1
            }
        }
        return result
    }

    static func canonicalCodes(_ lengths: [UInt8]) -> [UInt16] {
        var countPerLength = [Int](repeating: 0, count: 17)
        for l in lengths where l > 0 { countPerLength[Int(l)] += 1 }
        var nextCode = [Int](repeating: 0, count: 17)
        var code = 0
        for bits in 1...16 {
            code = (code + countPerLength[bits - 1]) << 1
            nextCode[bits] = code
        }
        var codes = [UInt16](repeating: 0, count: lengths.count)
        for (s, l) in lengths.enumerated() where l > 0 {
            let c = nextCode[Int(l)]
            nextCode[Int(l)] += 1
            var reversed = 0
            for b in 0..<Int(l) where (c >> b) & 1 != 0 { reversed |= 1 << (Int(l) - 1 - b) }
            codes[s] = UInt16(reversed)
        }
        return codes
    }
}
