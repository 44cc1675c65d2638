/// A deflate (RFC 1951) compressor inside a zlib (RFC 1950) wrapper, in plain Swift.
///
/// Written here rather than calling the system zlib so that the same input gives the same bytes on every
/// platform and library version: device and server must produce identical PNGs.
@_spi(Benchmark) public enum Deflate {
    static let windowSize = 32768
    static let minMatch = 3
    static let maxMatch = 258
    static let hashBits = 15
    // Measured on the benchmark chart: longer chains and an earlier stop change the size by under 0.5% and cost up
    // to half the time again (`richpush-bench chart`).
    static let maxChain = 8
    static let niceLength = 258
    static let symbolsPerBlock = 16384

    static let lengthBase: [Int] = [
        3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227,
        258,
    ]
    static let lengthExtra: [Int] = [
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0,
    ]
    static let distBase: [Int] = [
        1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097,
        6145, 8193, 12289, 16385, 24577,
    ]
    static let distExtra: [Int] = [
        0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13,
    ]
    static let codeLengthOrder = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15]

    /// Length code (0...28) for each match length 3...258.
    static let lengthCode: [UInt8] = {
        var t = [UInt8](repeating: 0, count: 259)
        for code in 0..<29 {
            let end = code == 28 ? 259 : lengthBase[code + 1]
            for l in lengthBase[code]..<end where l <= 258 { t[l] = UInt8(code) }
        }
        t[258] = 28
        return t
    }()

    /// Distance code (0...29) for each distance 1...32768: for 1...256 by the distance itself, above by 128s.
    static let distanceCodes: [UInt8] = {
        var t = [UInt8](repeating: 0, count: 512)
        for d in 1...32768 {
            var code = 29
            while distBase[code] > d { code -= 1 }
            if d <= 256 { t[d - 1] = UInt8(code) } else { t[256 + ((d - 1) >> 7)] = UInt8(code) }
        }
        return t
    }()

    @inline(__always)
    static func distanceCode(_ d: Int, in table: [UInt8] = distanceCodes) -> Int {
        Int(d <= 256 ? table[d - 1] : table[256 + ((d - 1) >> 7)])
    }

    /// A zlib stream of `data`.
    public static func zlib(_ data: UnsafeBufferPointer<UInt8>) -> [UInt8] {
        var w = BitWriter(capacity: data.count / 8 + 64)
        w.write(0x78, bits: 8)
        w.write(0xDA, bits: 8)  // 32K window, "best compression" flag; (0x78 << 8 | 0xDA) % 31 == 0
        compress(data, into: &w)
        w.alignToByte()
        let adler = Adler32.checksum(data)
        w.bytes.append(contentsOf: [
            UInt8(adler >> 24), UInt8(adler >> 16 & 0xFF), UInt8(adler >> 8 & 0xFF), UInt8(adler & 0xFF),
        ])
        return w.bytes
    }

    /// Symbols of one block: literals (0...255), end (256), or a match as length (3...258) with a distance.
    struct Symbols {
        var lengths: [UInt16] = []  // 0 for a literal
        var values: [UInt16] = []  // the literal byte, or the distance
        var litFreq = [Int](repeating: 0, count: 286)
        var distFreq = [Int](repeating: 0, count: 30)
        // The code tables, held here so that the hot loop does not check their lazy initialisation per symbol.
        let lengthCodes = Deflate.lengthCode
        let distanceCodes = Deflate.distanceCodes

        init() {
            lengths.reserveCapacity(symbolsPerBlock)
            values.reserveCapacity(symbolsPerBlock)
        }

        mutating func literal(_ b: UInt8) {
            lengths.append(0)
            values.append(UInt16(b))
            litFreq[Int(b)] += 1
        }

        mutating func match(length: Int, distance: Int) {
            lengths.append(UInt16(length))
            values.append(UInt16(distance))
            litFreq[257 + Int(lengthCodes[length])] += 1
            distFreq[Deflate.distanceCode(distance, in: distanceCodes)] += 1
        }

        var count: Int { lengths.count }
    }

    static func compress(_ data: UnsafeBufferPointer<UInt8>, into w: inout BitWriter) {
        let n = data.count
        let hashSize = 1 << hashBits
        var head = [Int32](repeating: -1, count: hashSize)
        var prev = [Int32](repeating: -1, count: windowSize)
        var symbols = Symbols()
        var pos = 0

        head.withUnsafeMutableBufferPointer { head in
            prev.withUnsafeMutableBufferPointer { prev in
                @inline(__always) func hash(_ p: Int) -> Int {
                    let v = Int(data[p]) << 16 | Int(data[p + 1]) << 8 | Int(data[p + 2])
                    return (v &* 0x9E37_79B1) >> (32 - hashBits) & (hashSize - 1)
                }
                @inline(__always) func insert(_ p: Int) {
                    guard p + 2 < n else { return }
                    let h = hash(p)
                    prev[p & (windowSize - 1)] = head[h]
                    head[h] = Int32(p)
                }
                @inline(__always) func longestMatch(_ p: Int) -> (Int, Int) {
                    guard p + 2 < n else { return (0, 0) }
                    var candidate = Int(head[hash(p)])
                    var best = 0
                    var bestDist = 0
                    var chain = maxChain
                    let limit = min(maxMatch, n - p)
                    while candidate >= 0 && p - candidate <= windowSize && chain > 0 {
                        if data[candidate + best] == data[p + best] || best == 0 {
                            // Eight bytes at a time, then byte by byte: the same length as byte by byte alone.
                            var l = 0
                            let base = UnsafeRawPointer(data.baseAddress!)
                            while l + 8 <= limit {
                                let diff =
                                    base.loadUnaligned(fromByteOffset: candidate + l, as: UInt64.self)
                                    ^ base.loadUnaligned(fromByteOffset: p + l, as: UInt64.self)
                                if diff != 0 {
                                    l += UInt64(littleEndian: diff).trailingZeroBitCount / 8
                                    break
                                }
                                l += 8
                            }
                            if l + 8 > limit { while l < limit && data[candidate + l] == data[p + l] { l += 1 } }
                            if l > best {
                                best = l
                                bestDist = p - candidate
                                if l >= niceLength || l == limit { break }
                            }
                        }
                        let next = Int(prev[candidate & (windowSize - 1)])
                        if next >= candidate { break }
                        candidate = next
                        chain -= 1
                    }
                    return best >= minMatch ? (best, bestDist) : (0, 0)
                }

                while pos < n {
                    var (len, dist) = longestMatch(pos)
                    insert(pos)
                    if len == 0 {
                        symbols.literal(data[pos])
                        pos += 1
                    } else {
                        // One step of lazy matching: a longer match at the next byte wins over this one.
                        if len < niceLength && pos + 1 < n {
                            let (nextLen, nextDist) = longestMatch(pos + 1)
                            if nextLen > len {
                                symbols.literal(data[pos])
                                pos += 1
                                insert(pos)
                                (len, dist) = (nextLen, nextDist)
                            }
                        }
                        symbols.match(length: len, distance: dist)
                        // Positions inside a long match are skipped: flat image areas would only lengthen chains.
                        if len <= 32 {
                            for k in 1..<len { insert(pos + k) }
                        } else {
                            // Index the match's last bytes so that a run continues at distance 1, which has the
                            // cheapest code.
                            for k in (len - 3)..<len { insert(pos + k) }
                        }
                        pos += len
                    }
                    if symbols.count >= symbolsPerBlock {
                        writeBlock(symbols, final: false, into: &w)
                        symbols = Symbols()
                    }
                }
            }
        }
        writeBlock(symbols, final: true, into: &w)
    }

    static func writeBlock(_ s: Symbols, final: Bool, into w: inout BitWriter) {
        var litFreq = s.litFreq
        litFreq[256] = 1
        var distFreq = s.distFreq
        // Decoders want at least two codes in each tree.
        if litFreq.filter({ $0 > 0 }).count < 2 { litFreq[0] = max(litFreq[0], 1) }
        if distFreq.filter({ $0 > 0 }).count < 2 {
            if distFreq[0] == 0 { distFreq[0] = 1 } else { distFreq[1] = 1 }
        }
        let lit = HuffmanCode(frequencies: litFreq, maxLength: 15)
        let dist = HuffmanCode(frequencies: distFreq, maxLength: 15)

        var hlit = 286
        while hlit > 257 && lit.lengths[hlit - 1] == 0 { hlit -= 1 }
        var hdist = 30
        while hdist > 1 && dist.lengths[hdist - 1] == 0 { hdist -= 1 }
        let all = Array(lit.lengths[0..<hlit]) + Array(dist.lengths[0..<hdist])

        // Run-length encode the code lengths (16: repeat previous, 17/18: runs of zeros).
        var rle: [(symbol: Int, extra: Int)] = []
        var i = 0
        while i < all.count {
            let v = all[i]
            var run = 1
            while i + run < all.count && all[i + run] == v { run += 1 }
            if v == 0 {
                var left = run
                while left >= 11 {
                    let r = min(left, 138)
                    rle.append((18, r - 11))
                    left -= r
                }
                if left >= 3 {
                    rle.append((17, left - 3))
                    left = 0
                }
                for _ in 0..<left { rle.append((0, 0)) }
            } else {
                rle.append((Int(v), 0))
                var left = run - 1
                while left >= 3 {
                    let r = min(left, 6)
                    rle.append((16, r - 3))
                    left -= r
                }
                for _ in 0..<left { rle.append((Int(v), 0)) }
            }
            i += run
        }
        var clFreq = [Int](repeating: 0, count: 19)
        for r in rle { clFreq[r.symbol] += 1 }
        let cl = HuffmanCode(frequencies: clFreq, maxLength: 7)
        var hclen = 19
        while hclen > 4 && cl.lengths[codeLengthOrder[hclen - 1]] == 0 { hclen -= 1 }

        w.write(final ? 1 : 0, bits: 1)
        w.write(2, bits: 2)  // dynamic Huffman
        w.write(UInt32(hlit - 257), bits: 5)
        w.write(UInt32(hdist - 1), bits: 5)
        w.write(UInt32(hclen - 4), bits: 4)
        for k in 0..<hclen { w.write(UInt32(cl.lengths[codeLengthOrder[k]]), bits: 3) }
        for r in rle {
            w.write(UInt32(cl.codes[r.symbol]), bits: Int(cl.lengths[r.symbol]))
            switch r.symbol {
            case 16: w.write(UInt32(r.extra), bits: 2)
            case 17: w.write(UInt32(r.extra), bits: 3)
            case 18: w.write(UInt32(r.extra), bits: 7)
            default: break
            }
        }
        // The tables in locals: a static is checked for its lazy initialisation at each use (1 % of a chart's
        // render and encode went to those checks in this loop).
        let (lengthCodes, lengthExtras, lengthBases) = (lengthCode, lengthExtra, lengthBase)
        let (distanceCodes, distExtras, distBases) = (distanceCodes, distExtra, distBase)
        for k in 0..<s.count {
            let length = Int(s.lengths[k])
            if length == 0 {
                let b = Int(s.values[k])
                w.write(UInt32(lit.codes[b]), bits: Int(lit.lengths[b]))
            } else {
                let code = Int(lengthCodes[length])
                w.write(UInt32(lit.codes[257 + code]), bits: Int(lit.lengths[257 + code]))
                if lengthExtras[code] > 0 { w.write(UInt32(length - lengthBases[code]), bits: lengthExtras[code]) }
                let d = Int(s.values[k])
                let dc = distanceCode(d, in: distanceCodes)
                w.write(UInt32(dist.codes[dc]), bits: Int(dist.lengths[dc]))
                if distExtras[dc] > 0 { w.write(UInt32(d - distBases[dc]), bits: distExtras[dc]) }
            }
        }
        w.write(UInt32(lit.codes[256]), bits: Int(lit.lengths[256]))
    }
}
