/// CRC-32 as PNG chunks use it (ISO 3309, reflected polynomial 0xEDB88320).
enum CRC32 {
    static let table: [UInt32] = (0..<256).map { n -> UInt32 in
        var c = UInt32(n)
        for _ in 0..<8 { c = (c & 1) != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
        return c
    }

    static func checksum<C: Collection<UInt8>>(_ bytes: C, initial: UInt32 = 0) -> UInt32 {
        var c = ~initial
        for b in bytes { c = table[Int((c ^ UInt32(b)) & 0xFF)] ^ (c >> 8) }
        return ~c
    }
}

/// Adler-32, the checksum that ends a zlib stream.
enum Adler32 {
    /// Sixteen bytes x₀…x₁₅ at once: a grows by Σx, b by 16·a + Σ(16−k)·xₖ, the same sums as byte by byte.
    static let weights = SIMD16<UInt32>(16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1)

    /// `sixteenAtATime: false` sums byte by byte (for tests: both give the same checksum).
    static func checksum(_ bytes: UnsafeBufferPointer<UInt8>, sixteenAtATime: Bool = true) -> UInt32 {
        var a: UInt32 = 1, b: UInt32 = 0
        var i = 0
        let n = bytes.count
        guard let base = bytes.baseAddress else { return 1 }
        while i < n {
            // 5552 (347 × 16) is the most bytes that keep the sums below 2^32 before reduction.
            let end = min(i + 5552, n)
            while sixteenAtATime && i + 16 <= end {
                let v = SIMD16<UInt32>(truncatingIfNeeded: UnsafeRawPointer(base + i).loadUnaligned(as: SIMD16<UInt8>.self))
                b &+= 16 &* a &+ (v &* weights).wrappedSum()
                a &+= v.wrappedSum()
                i += 16
            }
            while i < end {
                a &+= UInt32(base[i])
                b &+= a
                i += 1
            }
            a %= 65521
            b %= 65521
        }
        return b << 16 | a
    }
}
