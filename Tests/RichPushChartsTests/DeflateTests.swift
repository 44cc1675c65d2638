import Foundation
import RichPushTestSupport
import Testing

@_spi(Benchmark) @testable import RichPushCharts

@Suite struct DeflateTests {
    static func samples() -> [(String, [UInt8])] {
        var rng = SystemRandomNumberGenerator()
        var random = [UInt8](repeating: 0, count: 200_000)
        for i in random.indices { random[i] = UInt8.random(in: 0...255, using: &rng) }
        var text: [UInt8] = []
        for i in 0..<20_000 { text += Array("line \(i % 97) of a repetitive text; ".utf8) }
        var mixed: [UInt8] = []
        for i in 0..<300_000 { mixed.append(i % 1000 < 700 ? 0 : UInt8(truncatingIfNeeded: i &* 31 ^ (i >> 3))) }
        return [
            ("empty", []), ("one", [42]), ("two", [1, 2]), ("zeros", [UInt8](repeating: 0, count: 1_000_000)),
            ("random", random), ("text", text), ("mixed", mixed),
            ("run-258", [UInt8](repeating: 7, count: 258 * 3 + 2)),
        ]
    }

    @Test func pythonZlibInflatesEveryStreamToTheOriginal() async throws {
        let dir = try ExternalTools.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        for (name, data) in Self.samples() {
            let z = data.withUnsafeBufferPointer { Deflate.zlib($0) }
            try Data(data).write(to: dir.appendingPathComponent("\(name).raw"))
            try Data(z).write(to: dir.appendingPathComponent("\(name).z"))
        }
        let check = """
            import sys, zlib, glob, os
            bad = []
            for z in sorted(glob.glob(os.path.join(sys.argv[1], '*.z'))):
                raw = open(z[:-2] + '.raw', 'rb').read()
                try:
                    if zlib.decompress(open(z, 'rb').read()) != raw: bad.append(z + ': differs')
                except Exception as e: bad.append(z + ': ' + str(e))
            print('\\n'.join(bad) if bad else 'all ok')
            """
        let r = try await ExternalTools.python(check, [dir.path])
        #expect(r.status == 0 && r.output.trimmingCharacters(in: .whitespacesAndNewlines) == "all ok", "\(r.output)")
    }

    @Test func compressesFlatDataHard() {
        let zeros = [UInt8](repeating: 0, count: 1_000_000)
        let z = zeros.withUnsafeBufferPointer { Deflate.zlib($0) }
        #expect(z.count < 2_000)
    }

    @Test func huffmanLengthsRespectTheLimitAndStayComplete() {
        // Fibonacci frequencies force a very deep tree.
        var freq = [Int](repeating: 0, count: 30)
        var a = 1
        var b = 1
        for i in 0..<30 {
            freq[i] = a
            (a, b) = (b, a + b)
        }
        let lengths = HuffmanCode.lengths(for: freq, maxLength: 15)
        #expect(lengths.allSatisfy { $0 >= 1 && $0 <= 15 })
        // Kraft sum of a complete code is exactly 1.
        let kraft = lengths.reduce(0.0) { $0 + 1.0 / Double(1 << Int($1)) }
        #expect(kraft == 1.0)
        let seven = HuffmanCode.lengths(for: Array(freq.prefix(19)), maxLength: 7)
        #expect(seven.allSatisfy { $0 <= 7 } && seven.reduce(0.0) { $0 + 1.0 / Double(1 << Int($1)) } == 1.0)
    }

    @Test func checksumsMatchKnownValues() {
        #expect(CRC32.checksum(Array("123456789".utf8)) == 0xCBF4_3926)
        #expect(CRC32.checksum(Array("IEND".utf8)) == 0xAE42_6082)
        let adler = Array("Wikipedia".utf8).withUnsafeBufferPointer { Adler32.checksum($0) }
        #expect(adler == 0x11E6_0398)
    }
}

@Suite struct PNGFilterTests {
    @Test func adlerSixteenAtATimeEqualsByteByByteAndDistanceCodesTheSearch() {
        var rng = SeededRandom(seed: 11)
        for n in [0, 1, 15, 16, 17, 5551, 5552, 5553, 5568, 100_003] {
            let bytes = (0..<n).map { _ in Bool.random(using: &rng) ? UInt8.random(in: 0...255, using: &rng) : 255 }
            bytes.withUnsafeBufferPointer {
                #expect(Adler32.checksum($0) == Adler32.checksum($0, sixteenAtATime: false), "n \(n)")
            }
            // CRC-32 eight bytes at a time, from any starting CRC (a chunk's continues its type's).
            for initial: UInt32 in [0, 0xAE42_6082, .max] {
                let fast = CRC32.checksum(bytes, initial: initial)
                #expect(fast == CRC32.checksum(bytes, initial: initial, eightAtATime: false), "n \(n)")
                #expect(fast == CRC32.checksum(bytes.lazy.map { $0 }, initial: initial), "n \(n)")
            }
        }
        for d in 1...32768 {
            var code = 29
            while Deflate.distBase[code] > d { code -= 1 }
            if Deflate.distanceCode(d) != code {
                Issue.record("distance \(d): \(Deflate.distanceCode(d)) not \(code)")
                break
            }
        }
    }
}
