/// Ids the emulators give each request and message (`apns-id`, `apns-unique-id`, a Web Push message's location):
/// random version-4 UUIDs in lower case, made from the system's random generator. `UUID()` here opened and read
/// `/dev/urandom` on every call: two files opened per APNs request, 7 to 9 % of the emulator's samples in a profile.
enum RequestID {
    static func uuid() -> String {
        var generator = SystemRandomNumberGenerator()
        let high = generator.next() as UInt64
        let low = generator.next() as UInt64
        // Version 4 (random) and the RFC 4122 variant.
        let a = (high & 0xFFFF_FFFF_FFFF_0FFF) | 0x0000_0000_0000_4000
        let b = (low & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000
        var out = [UInt8]()
        out.reserveCapacity(36)
        let digits = Array("0123456789abcdef".utf8)
        for (value, range) in [(a, 0..<16), (b, 16..<32)] {
            for i in range {
                if i == 8 || i == 12 || i == 16 || i == 20 { out.append(UInt8(ascii: "-")) }
                let shift = UInt64(60 - 4 * (i % 16))
                out.append(digits[Int((value >> shift) & 0xF)])
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
