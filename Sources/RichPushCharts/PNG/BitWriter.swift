/// Writes bits least-significant first, as deflate streams are packed.
struct BitWriter {
    var bytes: [UInt8] = []
    private var buffer: UInt64 = 0
    private var count = 0

    init(capacity: Int) { bytes.reserveCapacity(capacity) }

    /// Appends `bits` (at most 32) of `value`. Whole bytes go out four at a time, in the order they were written:
    /// one append per 32 bits, where one a byte took a sixth of the encoder's time (an append checks the array's
    /// storage each time). The bytes are the same.
    mutating func write(_ value: UInt32, bits: Int) {
        buffer |= UInt64(value) << UInt64(count)
        count += bits
        if count >= 32 {
            let word = UInt32(truncatingIfNeeded: buffer).littleEndian
            withUnsafeBytes(of: word) { bytes.append(contentsOf: $0) }
            buffer >>= 32
            count -= 32
        }
    }

    /// Writes out what is pending, the last byte padded with zero bits.
    mutating func alignToByte() {
        while count > 0 {
            bytes.append(UInt8(truncatingIfNeeded: buffer))
            buffer >>= 8
            count -= 8
        }
        buffer = 0
        count = 0
    }
}
