/// CRC-32 as PNG chunks use it (ISO 3309, reflected polynomial 0xEDB88320).
enum CRC32 {
    /// Eight tables end to end: entry `k * 256 + n` is the CRC of byte n followed by k zero bytes (the first 256
    /// are the classic table), for the loop that reads eight bytes at a time.
    static let flat: [UInt32] = {
        var t = (0..<256).map { n -> UInt32 in
            var c = UInt32(n)
            for _ in 0..<8 { c = (c & 1) != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
            return c
        }
        for k in 1..<8 {
            for n in 0..<256 {
                let previous = t[(k - 1) * 256 + n]
                t.append(t[Int(previous & 0xFF)] ^ (previous >> 8))
            }
        }
        return t
    }()
    static let table = Array(flat[0..<256])

    /// `eightAtATime: false` goes byte by byte (for tests: both give the same checksum).
    static func checksum<C: Collection<UInt8>>(_ bytes: C, initial: UInt32 = 0, eightAtATime: Bool = true) -> UInt32 {
        if eightAtATime, let c = bytes.withContiguousStorageIfAvailable({ sliced($0, initial: initial) }) { return c }
        var c = ~initial
        for b in bytes { c = table[Int((c ^ UInt32(b)) & 0xFF)] ^ (c >> 8) }
        return ~c
    }

    /// Eight bytes a step (slicing by eight): the CRC of the next eight bytes is one lookup per byte in the table
    /// of its distance from the end, the lookups combined; the same checksum as byte by byte. The PNG's chunks went
    /// through a generic loop at about 2 ns a byte, 2.6 % of a chart's render and encode.
    static func sliced(_ bytes: UnsafeBufferPointer<UInt8>, initial: UInt32) -> UInt32 {
        var c = ~initial
        guard let base = bytes.baseAddress else { return initial }
        let n = bytes.count
        var i = 0
        flat.withUnsafeBufferPointer { t in
            while i + 8 <= n {
                let word = UInt64(littleEndian: UnsafeRawPointer(base + i).loadUnaligned(as: UInt64.self))
                let lo = UInt32(truncatingIfNeeded: word) ^ c
                let hi = UInt32(truncatingIfNeeded: word >> 32)
                c =
                    t[7 * 256 + Int(lo & 0xFF)] ^ t[6 * 256 + Int((lo >> 8) & 0xFF)]
                    ^ t[5 * 256 + Int((lo >> 16) & 0xFF)] ^ t[4 * 256 + Int(lo >> 24)]
                    ^ t[3 * 256 + Int(hi & 0xFF)] ^ t[2 * 256 + Int((hi >> 8) & 0xFF)]
                    ^ t[1 * 256 + Int((hi >> 16) & 0xFF)] ^ t[Int(hi >> 24)]
                i += 8
            }
            while i < n {
                c = t[Int((c ^ UInt32(base[i])) & 0xFF)] ^ (c >> 8)
                i += 1
            }
        }
        return ~c
    }
}

/// Adler-32, the checksum that ends a zlib stream.
enum Adler32 {
    static let weights = SIMD16<UInt32>(16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1)

    /// `sixteenAtATime: false` sums byte by byte (for tests: both give the same checksum).
    ///
    /// Sixteen bytes at a time, the sums kept per lane and folded once per run: over chunks v₀…v₍c−1₎ that follow
    /// sums a₀, b₀, a grows by Σ lanes of S = Σvⱼ, and b by 16·c·a₀ + 16·Σ lanes of P + Σ lanes of weights·S, where P
    /// adds up S as it stood before each chunk. The same checksum as byte by byte.
    static func checksum(_ bytes: UnsafeBufferPointer<UInt8>, sixteenAtATime: Bool = true) -> UInt32 {
        var a: UInt64 = 1
        var b: UInt64 = 0
        var i = 0
        let n = bytes.count
        guard let base = bytes.baseAddress else { return 1 }
        while i < n {
            // 5552 bytes (347 chunks) a run: a lane of P stays below 347·346/2·255, and the sum of P's sixteen lanes
            // below 2^32.
            let end = min(i + 5552, n)
            if sixteenAtATime && i + 16 <= end {
                var s = SIMD16<UInt32>()
                var p = SIMD16<UInt32>()
                var chunks: UInt64 = 0
                while i + 16 <= end {
                    p &+= s
                    s &+= SIMD16<UInt32>(
                        truncatingIfNeeded: UnsafeRawPointer(base + i).loadUnaligned(as: SIMD16<UInt8>.self)
                    )
                    chunks += 1
                    i += 16
                }
                b += 16 * chunks * a + 16 * UInt64(p.wrappedSum()) + UInt64((s &* weights).wrappedSum())
                a += UInt64(s.wrappedSum())
            }
            while i < end {
                a += UInt64(base[i])
                b += a
                i += 1
            }
            a %= 65521
            b %= 65521
        }
        return UInt32(b << 16 | a)
    }
}
