extension MediaURL {
    /// The host as the URL standard's host parser reads it (https://url.spec.whatwg.org/#host-parsing), in the form
    /// it serializes: an IPv6 address in brackets, compressed (RFC 5952); an IPv4 address in any spelling as four
    /// decimal numbers; a name percent-decoded, mapped and in its ASCII form, its trailing dot kept.
    static func parseHost(_ raw: Substring.UnicodeScalarView) throws(Problem) -> String {
        if raw.first == "[" {
            let inside = String(String.UnicodeScalarView(raw.dropFirst().dropLast()))
            if inside.contains("%") {
                throw Problem(.host, "an IPv6 address with a zone (%…) only means something on the sender's network")
            }
            guard raw.last == "]", let pieces = IPv6.parse(inside) else {
                throw Problem(.host, "'\(String(String.UnicodeScalarView(raw)).prefix(64))' is not an IPv6 address")
            }
            return "[" + IPv6.serialize(pieces) + "]"
        }
        let name = try percentDecoded(raw)
        let ascii = try IDNA.toASCII(name)
        guard IPv4.endsInNumber(ascii) else { return ascii }
        guard let v4 = IPv4.parse(ascii) else {
            throw Problem(.host, "'\(ascii.prefix(64))' ends in a number but is not an IPv4 address")
        }
        return IPv4.serialize(v4)
    }

    /// `%XX` in a host stands for a byte (the URL standard decodes them before IDNA); the bytes must be UTF-8.
    private static func percentDecoded(_ raw: Substring.UnicodeScalarView) throws(Problem) -> String {
        guard raw.contains("%") else { return String(String.UnicodeScalarView(raw)) }
        let utf8 = Array(String(String.UnicodeScalarView(raw)).utf8)
        var bytes: [UInt8] = []
        var i = 0
        while i < utf8.count {
            if utf8[i] == UInt8(ascii: "%"), i + 2 < utf8.count, let h = hexValue(utf8[i + 1]),
                let l = hexValue(utf8[i + 2])
            {
                bytes.append(h << 4 | l)
                i += 3
            } else {
                bytes.append(utf8[i])
                i += 1
            }
        }
        guard let s = String(validating: bytes, as: UTF8.self) else {
            throw Problem(.host, "the host's percent-encoded bytes are not UTF-8")
        }
        return s
    }

    static func hexValue(_ b: UInt8) -> UInt8? {
        switch b {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return b - 48
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return b - 87
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return b - 55
        default: return nil
        }
    }
}

/// The URL standard's IPv4 parser (https://url.spec.whatwg.org/#concept-ipv4-parser): one to four parts, each
/// decimal, octal (`0177`) or hexadecimal (`0x7f`), the last filling the bytes left.
extension MediaURL {
    /// A host as an IPv4 address in any spelling the WHATWG URL standard reads (`0x7f.1`, `2130706433`, a
    /// trailing dot); nil when it is not one. The server's address policy reads hosts with the same rules.
    public static func ipv4Address(_ host: String) -> UInt32? { IPv4.parse(host) }
}

enum IPv4 {
    /// https://url.spec.whatwg.org/#ends-in-a-number-checker
    static func endsInNumber(_ host: String) -> Bool {
        var parts = host.split(separator: ".", omittingEmptySubsequences: false)
        if parts.last == "" {
            if parts.count == 1 { return false }
            parts.removeLast()
        }
        guard let last = parts.last, !last.isEmpty else { return false }
        if last.utf8.allSatisfy({ (48...57).contains($0) }) { return true }
        return number(last) != nil && (last.hasPrefix("0x") || last.hasPrefix("0X"))
    }

    static func parse(_ host: String) -> UInt32? {
        var parts = host.split(separator: ".", omittingEmptySubsequences: false)
        if parts.last == "" && parts.count > 1 { parts.removeLast() }
        guard (1...4).contains(parts.count) else { return nil }
        var numbers: [UInt64] = []
        for p in parts {
            guard let n = number(p) else { return nil }
            numbers.append(n)
        }
        for n in numbers.dropLast() where n > 255 { return nil }
        guard let last = numbers.last, last < UInt64(1) << (8 * UInt64(5 - numbers.count)) else { return nil }
        var value = last
        for (i, n) in numbers.dropLast().enumerated() { value += n << (8 * UInt64(3 - i)) }
        return UInt32(value)
    }

    /// A part's value; nil when it is not a number (or has more digits than any valid part).
    static func number(_ part: Substring) -> UInt64? {
        guard !part.isEmpty else { return nil }
        var s = part
        var radix = 10
        if s.count >= 2, s.hasPrefix("0x") || s.hasPrefix("0X") {
            s = s.dropFirst(2)
            radix = 16
            if s.isEmpty { return 0 }
        } else if s.count >= 2, s.hasPrefix("0") {
            s = s.dropFirst()
            radix = 8
        }
        // Digits only (no sign), and no more than a valid part has.
        guard s.count <= 16, s.utf8.allSatisfy({ MediaURL.hexValue($0).map { Int($0) < radix } ?? false }) else {
            return nil
        }
        return UInt64(s, radix: radix)
    }

    static func serialize(_ a: UInt32) -> String { "\(a >> 24).\((a >> 16) & 255).\((a >> 8) & 255).\(a & 255)" }
}

/// The URL standard's IPv6 parser and serializer (https://url.spec.whatwg.org/#concept-ipv6-parser): eight 16-bit
/// pieces, `::` for a run of zeros, a dotted IPv4 address in the last two; no zone.
enum IPv6 {
    static func parse(_ text: String) -> [UInt16]? {
        let c = Array(text.utf8)
        guard c.count <= 64 else { return nil }
        var pieces = [UInt16](repeating: 0, count: 8)
        var index = 0
        var compress: Int?
        var p = 0
        let colon = UInt8(ascii: ":")
        if c.first == colon {
            guard c.count > 1, c[1] == colon else { return nil }
            p = 2
            index = 1
            compress = 1
        }
        while p < c.count {
            guard index < 8 else { return nil }
            if c[p] == colon {
                guard compress == nil else { return nil }
                p += 1
                index += 1
                compress = index
                continue
            }
            var value: UInt16 = 0
            var length = 0
            while length < 4, p < c.count, let h = MediaURL.hexValue(c[p]) {
                value = value << 4 | UInt16(h)
                p += 1
                length += 1
            }
            if p < c.count, c[p] == UInt8(ascii: ".") {
                guard length > 0, index <= 6 else { return nil }
                p -= length
                guard let v4 = dottedQuad(c[p...]) else { return nil }
                pieces[index] = UInt16(v4 >> 16)
                pieces[index + 1] = UInt16(v4 & 0xFFFF)
                index += 2
                p = c.count
                break
            } else if p < c.count, c[p] == colon {
                p += 1
                guard p < c.count else { return nil }
            } else if p < c.count {
                return nil
            }
            guard length > 0 else { return nil }
            pieces[index] = value
            index += 1
        }
        if let compress {
            // Move what followed `::` to the end; the zeros between are the compressed run.
            let tail = Array(pieces[compress..<index])
            for i in compress..<8 { pieces[i] = 0 }
            for (i, v) in tail.enumerated() { pieces[8 - tail.count + i] = v }
        } else if index != 8 {
            return nil
        }
        return pieces
    }

    /// Four decimal numbers of 0 to 255 without leading zeros, the end of an IPv6 address.
    private static func dottedQuad(_ c: ArraySlice<UInt8>) -> UInt32? {
        let parts = c.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        var value: UInt32 = 0
        for part in parts {
            guard (1...3).contains(part.count), part.allSatisfy({ (48...57).contains($0) }),
                part.count == 1 || part.first != UInt8(ascii: "0")
            else { return nil }
            let n = part.reduce(UInt32(0)) { $0 * 10 + UInt32($1 - 48) }
            guard n <= 255 else { return nil }
            value = value << 8 | n
        }
        return value
    }

    /// RFC 5952 §4: lower case, no leading zeros, the first longest run of two or more zero pieces as `::`.
    static func serialize(_ pieces: [UInt16]) -> String {
        var best: (start: Int, length: Int)?
        var i = 0
        while i < 8 {
            guard pieces[i] == 0 else {
                i += 1
                continue
            }
            var j = i
            while j < 8 && pieces[j] == 0 { j += 1 }
            if j - i >= 2, j - i > (best?.length ?? 0) { best = (i, j - i) }
            i = j
        }
        var out = ""
        i = 0
        while i < 8 {
            if let b = best, i == b.start {
                out += i == 0 ? "::" : ":"
                i += b.length
                continue
            }
            out += String(pieces[i], radix: 16)
            if i != 7 { out += ":" }
            i += 1
        }
        return out
    }
}
