import Foundation

/// A syntax error in a JSON document, with the byte offset where it was found.
public struct JSONSyntaxError: Error, Sendable, Equatable, CustomStringConvertible {
    public var offset: Int
    public var message: String
    public var description: String { "invalid JSON at byte \(offset): \(message)" }
}

extension JSONValue {
    /// Parses a JSON document (RFC 8259). Repeated keys keep the last value, as FCM does, unless
    /// `repeatedKeys` is `.refuse`.
    ///
    /// ```swift
    /// let value = try JSONValue.parse(Data(#"{"aps":{"mutable-content":1}}"#.utf8))
    /// ```
    public static func parse(
        _ data: some Collection<UInt8>,
        maxDepth: Int = 64,
        deepValues: DeepValues = .refuse,
        repeatedKeys: RepeatedKeys = .keepLast
    ) throws(JSONSyntaxError) -> JSONValue {
        var parser = JSONParser(
            bytes: Array(data),
            maxDepth: maxDepth,
            deepValues: deepValues,
            refusesRepeatedKeys: repeatedKeys == .refuse
        )
        return try parser.parseDocument()
    }

    /// What the parser does with a key an object names twice. RFC 8259 (section 4) leaves the outcome to the
    /// reader; I-JSON (RFC 7493, section 2.3) forbids such objects.
    public enum RepeatedKeys: Sendable {
        /// The last value is kept (what most readers, and the push services, do).
        case keepLast
        /// The document is refused, naming the key: a request body whose two readers could disagree.
        case refuse
    }

    /// What the parser does with an object or array nested deeper than its `maxDepth`.
    public enum DeepValues: Sendable {
        /// The document is refused (a request body the server must keep whole).
        case refuse
        /// The value is checked for syntax without recursion and read as `null`, so that a deep key that is not
        /// ours cannot make the keys we read unreadable (a received payload).
        case readAsNull
    }

    public static func parse(_ text: String) throws(JSONSyntaxError) -> JSONValue {
        try parse(Array(text.utf8))
    }
}

struct JSONParser {
    let bytes: [UInt8]
    let maxDepth: Int
    let deepValues: JSONValue.DeepValues
    let refusesRepeatedKeys: Bool
    var index = 0
    var depth = 0

    init(
        bytes: [UInt8],
        maxDepth: Int,
        deepValues: JSONValue.DeepValues = .refuse,
        refusesRepeatedKeys: Bool = false
    ) {
        self.bytes = bytes
        self.maxDepth = maxDepth
        self.deepValues = deepValues
        self.refusesRepeatedKeys = refusesRepeatedKeys
    }

    mutating func parseDocument() throws(JSONSyntaxError) -> JSONValue {
        // A UTF-8 byte order mark is tolerated at the very start.
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { index = 3 }
        skipWhitespace()
        let value = try parseValue()
        skipWhitespace()
        guard index == bytes.count else { throw fail("unexpected data after the document") }
        return value
    }

    func fail(_ message: String) -> JSONSyntaxError {
        JSONSyntaxError(offset: index, message: message)
    }

    mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    mutating func parseValue() throws(JSONSyntaxError) -> JSONValue {
        guard index < bytes.count else { throw fail("unexpected end of input") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"):
            try expectLiteral("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try expectLiteral("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try expectLiteral("null")
            return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        default: throw fail("unexpected character")
        }
    }

    mutating func expectLiteral(_ word: String) throws(JSONSyntaxError) {
        let w = Array(word.utf8)
        guard index + w.count <= bytes.count, Array(bytes[index..<index + w.count]) == w else {
            throw fail("expected \(word)")
        }
        index += w.count
    }

    /// True when the container at `index` is one level too deep and was stepped over (it reads as null).
    mutating func skippedTooDeep() throws(JSONSyntaxError) -> Bool {
        guard depth >= maxDepth else { return false }
        if case .refuse = deepValues { throw fail("nested deeper than \(maxDepth) levels") }
        try skipNested()
        return true
    }

    /// Checks the syntax of the container at `index` and steps past it, keeping an explicit stack of the closers
    /// it waits for instead of recursing (a 5 KB payload can nest 2,500 levels).
    mutating func skipNested() throws(JSONSyntaxError) {
        var closers: [UInt8] = []
        var expectValue = true
        repeat {
            skipWhitespace()
            guard index < bytes.count else { throw fail("unexpected end of input") }
            let b = bytes[index]
            if expectValue {
                if b == UInt8(ascii: "{") || b == UInt8(ascii: "[") {
                    let close = b == UInt8(ascii: "{") ? UInt8(ascii: "}") : UInt8(ascii: "]")
                    index += 1
                    skipWhitespace()
                    if index < bytes.count, bytes[index] == close {
                        index += 1
                        expectValue = false
                    } else {
                        closers.append(close)
                        if close == UInt8(ascii: "}") { try skipKeyAndColon() }
                    }
                } else {
                    _ = try parseScalar()
                    expectValue = false
                }
            } else {
                let close = closers[closers.count - 1]
                if b == UInt8(ascii: ",") {
                    index += 1
                    if close == UInt8(ascii: "}") { try skipKeyAndColon() }
                    expectValue = true
                } else if b == close {
                    index += 1
                    closers.removeLast()
                } else {
                    throw fail("expected ',' or '\(Character(Unicode.Scalar(close)))'")
                }
            }
        } while expectValue || !closers.isEmpty
    }

    private mutating func skipKeyAndColon() throws(JSONSyntaxError) {
        skipWhitespace()
        guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw fail("expected a key string") }
        _ = try parseString()
        skipWhitespace()
        guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw fail("expected ':'") }
        index += 1
    }

    /// A string, number or literal (never a container).
    private mutating func parseScalar() throws(JSONSyntaxError) -> JSONValue {
        switch bytes[index] {
        case UInt8(ascii: "{"), UInt8(ascii: "["): throw fail("unexpected container")
        default: return try parseValue()
        }
    }

    mutating func parseObject() throws(JSONSyntaxError) -> JSONValue {
        if try skippedTooDeep() { return .null }
        depth += 1
        defer { depth -= 1 }
        index += 1
        var result: [String: JSONValue] = [:]
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            return .object(result)
        }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw fail("expected a key string") }
            let keyOffset = index
            let key = try parseString()
            // Compared as the stored dictionary compares (Unicode-equivalent spellings are one key there too).
            if refusesRepeatedKeys, result[key] != nil {
                throw JSONSyntaxError(
                    offset: keyOffset,
                    message: "the key '\(key.prefix(100))' appears twice in one object"
                )
            }
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw fail("expected ':'") }
            index += 1
            skipWhitespace()
            result[key] = try parseValue()
            skipWhitespace()
            guard index < bytes.count else { throw fail("unexpected end of input in object") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            if bytes[index] == UInt8(ascii: "}") {
                index += 1
                return .object(result)
            }
            throw fail("expected ',' or '}'")
        }
    }

    mutating func parseArray() throws(JSONSyntaxError) -> JSONValue {
        if try skippedTooDeep() { return .null }
        depth += 1
        defer { depth -= 1 }
        index += 1
        var result: [JSONValue] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            return .array(result)
        }
        while true {
            skipWhitespace()
            result.append(try parseValue())
            skipWhitespace()
            guard index < bytes.count else { throw fail("unexpected end of input in array") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            if bytes[index] == UInt8(ascii: "]") {
                index += 1
                return .array(result)
            }
            throw fail("expected ',' or ']'")
        }
    }

    mutating func parseString() throws(JSONSyntaxError) -> String {
        index += 1  // opening quote
        var out: [UInt8] = []
        while index < bytes.count {
            let b = bytes[index]
            switch b {
            case UInt8(ascii: "\""):
                index += 1
                guard let s = String(validating: out, as: UTF8.self) else { throw fail("string is not valid UTF-8") }
                return s
            case UInt8(ascii: "\\"):
                index += 1
                guard index < bytes.count else { throw fail("unfinished escape") }
                let e = bytes[index]
                index += 1
                switch e {
                case UInt8(ascii: "\""): out.append(0x22)
                case UInt8(ascii: "\\"): out.append(0x5C)
                case UInt8(ascii: "/"): out.append(0x2F)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try parseHex4()
                    if (0xD800...0xDBFF).contains(scalar) {
                        guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"),
                            bytes[index + 1] == UInt8(ascii: "u")
                        else { throw fail("lone high surrogate") }
                        index += 2
                        let low = try parseHex4()
                        guard (0xDC00...0xDFFF).contains(low) else { throw fail("invalid low surrogate") }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(scalar) {
                        throw fail("lone low surrogate")
                    }
                    guard let u = Unicode.Scalar(scalar) else { throw fail("invalid unicode escape") }
                    out.append(contentsOf: Array(String(Character(u)).utf8))
                default:
                    throw fail("invalid escape")
                }
            case 0x00..<0x20:
                throw fail("control character in string")
            default:
                out.append(b)
                index += 1
            }
        }
        throw fail("unterminated string")
    }

    mutating func parseHex4() throws(JSONSyntaxError) -> UInt32 {
        guard index + 4 <= bytes.count else { throw fail("short unicode escape") }
        var v: UInt32 = 0
        for _ in 0..<4 {
            let c = bytes[index]
            let d: UInt32
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): d = UInt32(c - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): d = UInt32(c - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): d = UInt32(c - UInt8(ascii: "A") + 10)
            default: throw fail("invalid hex digit")
            }
            v = v << 4 | d
            index += 1
        }
        return v
    }

    mutating func parseNumber() throws(JSONSyntaxError) -> JSONValue {
        let start = index
        var isInteger = true
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count, isDigit(bytes[index]) else { throw fail("invalid number") }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
            if index < bytes.count, isDigit(bytes[index]) { throw fail("leading zero in number") }
        } else {
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            guard index < bytes.count, isDigit(bytes[index]) else { throw fail("digit expected after '.'") }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            isInteger = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                index += 1
            }
            guard index < bytes.count, isDigit(bytes[index]) else { throw fail("digit expected in exponent") }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        let text = String(decoding: bytes[start..<index], as: UTF8.self)
        if isInteger, let i = Int64(text) { return .int(i) }
        guard let d = Double(text), d.isFinite else { throw fail("number out of range") }
        return .double(d)
    }

    func isDigit(_ b: UInt8) -> Bool { b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9") }
}
