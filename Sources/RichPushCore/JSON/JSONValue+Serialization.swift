import Foundation

extension JSONValue {
    /// Compact JSON with keys in byte order: the same value always gives the same bytes.
    ///
    /// Slashes are not escaped (URLs stay readable and short); non-ASCII text is written as UTF-8.
    public func serialized() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        write(into: &out, pretty: false, indent: 0)
        return out
    }

    /// The compact form as a string.
    public var jsonString: String { String(decoding: serialized(), as: UTF8.self) }

    /// An indented form for people (the CLI), keys sorted.
    public func prettyPrinted() -> String {
        var out: [UInt8] = []
        write(into: &out, pretty: true, indent: 0)
        return String(decoding: out, as: UTF8.self)
    }

    /// The number of bytes of ``serialized()``, which is what APNs and FCM limits are measured on.
    public var serializedSize: Int { serialized().count }

    private func write(into out: inout [UInt8], pretty: Bool, indent: Int) {
        switch self {
        case .null: out.append(contentsOf: Array("null".utf8))
        case .bool(let b): out.append(contentsOf: Array((b ? "true" : "false").utf8))
        case .int(let i): out.append(contentsOf: Array(String(i).utf8))
        case .double(let d): out.append(contentsOf: Array(Self.format(d).utf8))
        case .string(let s): Self.writeString(s, into: &out)
        case .array(let a):
            out.append(UInt8(ascii: "["))
            for (n, element) in a.enumerated() {
                if n > 0 { out.append(UInt8(ascii: ",")) }
                if pretty { newline(&out, indent + 1) }
                element.write(into: &out, pretty: pretty, indent: indent + 1)
            }
            if pretty && !a.isEmpty { newline(&out, indent) }
            out.append(UInt8(ascii: "]"))
        case .object(let o):
            out.append(UInt8(ascii: "{"))
            let keys = o.keys.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
            for (n, key) in keys.enumerated() {
                if n > 0 { out.append(UInt8(ascii: ",")) }
                if pretty { newline(&out, indent + 1) }
                Self.writeString(key, into: &out)
                out.append(UInt8(ascii: ":"))
                if pretty { out.append(UInt8(ascii: " ")) }
                o[key]!.write(into: &out, pretty: pretty, indent: indent + 1)
            }
            if pretty && !o.isEmpty { newline(&out, indent) }
            out.append(UInt8(ascii: "}"))
        }
    }

    private func newline(_ out: inout [UInt8], _ level: Int) {
        out.append(0x0A)
        out.append(contentsOf: repeatElement(UInt8(ascii: " "), count: level * 2))
    }

    /// Shortest text that reads back as the same double; whole numbers keep no fraction.
    static func format(_ d: Double) -> String {
        guard d.isFinite else { return "null" }
        if d.rounded() == d, abs(d) < 1e15 { return String(Int64(d)) }
        return "\(d)"
    }

    /// `s` as a JSON string, escaped as ``serialized()`` escapes it, appended to `out` (for writers that know their
    /// keys' order and write an object without building it).
    public static func writeString(_ s: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        // Most strings need no escape: their bytes are copied in one append (a byte at a time was a tenth of a
        // webhook sender's work).
        if let copied = s.utf8.withContiguousStorageIfAvailable({ bytes -> Bool in
            guard !bytes.contains(where: { $0 < 0x20 || $0 == 0x22 || $0 == 0x5C }) else { return false }
            out.append(contentsOf: bytes)
            return true
        }), copied {
            out.append(UInt8(ascii: "\""))
            return
        }
        for b in s.utf8 {
            switch b {
            case 0x22: out.append(contentsOf: [0x5C, 0x22])
            case 0x5C: out.append(contentsOf: [0x5C, 0x5C])
            case 0x0A: out.append(contentsOf: [0x5C, UInt8(ascii: "n")])
            case 0x0D: out.append(contentsOf: [0x5C, UInt8(ascii: "r")])
            case 0x09: out.append(contentsOf: [0x5C, UInt8(ascii: "t")])
            case 0x00..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                out.append(contentsOf: [
                    0x5C, UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hex[Int(b >> 4)], hex[Int(b & 0xF)],
                ])
            default: out.append(b)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}
