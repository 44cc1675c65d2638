import Foundation

/// A media URL as the sender wrote it, and the URL that is fetched. One normalization for the device library, the
/// server's preflight and re-hosting, `richpush send` and the console (which asks the server): the scheme and the
/// host in lower case, a default port dropped, an empty path as `/`, an international name in its ASCII form; the
/// path and the query keep their percent-encoding exactly as written, so a signed URL stays signed. The rules and
/// the standards they follow are in docs/payload-format.md §7.
///
/// ```swift
/// let media = try MediaURL("HTTPS://CDN.Example.com:443/a%2Fb.jpg?sig=x%2B")
/// media.fetched      // "https://cdn.example.com/a%2Fb.jpg?sig=x%2B"
/// media.isRewritten  // true
/// ```
public struct MediaURL: Sendable, Hashable, CustomStringConvertible {
    /// The longest URL taken, in UTF-8 bytes, as written and as fetched. A push payload carries it (4,096 bytes
    /// for an APNs alert, 2,048 for an FCM topic message), so a longer one could not be sent anyway.
    public static let maxLength = 2048

    /// The URL as the sender wrote it.
    public let written: String
    /// `http` or `https`.
    public let scheme: String
    /// The host as fetched: an ASCII name in lower case (its trailing dot kept, when written), an IPv4 address, or
    /// an IPv6 address in brackets.
    public let host: String
    /// The port when it is not the scheme's default.
    public let port: Int?
    /// The path and query as sent in the request (`/` for an empty path); never a fragment.
    public let target: String
    /// The whole URL as fetched.
    public let fetched: String
    /// ``fetched`` as a Foundation URL (it reads it back unchanged).
    public let url: URL

    /// Reads a media URL, or names the rule it breaks.
    public init(_ written: String) throws(Problem) {
        self.written = written
        guard written.utf8.count <= Self.maxLength else {
            throw Problem(.tooLong, "the URL is \(written.utf8.count) bytes; at most \(Self.maxLength) are taken")
        }
        let s = try Self.trimmedAndChecked(written)
        guard let colon = s.firstIndex(of: ":"), let first = s.first, first.isASCII, first.properties.isAlphabetic,
            s[..<colon].allSatisfy(Self.isSchemeCharacter)
        else {
            throw Problem(.url, "not an absolute URL: it needs a scheme, as in https://cdn.example.com/photo.jpg")
        }
        let scheme = String(String.UnicodeScalarView(s[..<colon])).lowercased()
        guard scheme == "https" || scheme == "http" else {
            throw Problem(.scheme, "the scheme '\(scheme.prefix(32))' cannot be fetched; use https")
        }
        var rest = s[s.index(after: colon)...]
        guard rest.starts(with: "//".unicodeScalars) else {
            throw Problem(.url, "not an absolute URL: \(scheme): must be followed by // and the host")
        }
        rest = rest.dropFirst(2)
        let end = rest.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? rest.endIndex
        let authority = rest[..<end]
        if authority.contains("@") {
            throw Problem(
                .userInfo,
                "the URL carries user information (user:password@): a name or password does not belong in a URL sent to every device"
            )
        }
        var hostPart = authority
        var portPart: Substring.UnicodeScalarView?
        if authority.first == "[", let close = authority.firstIndex(of: "]") {
            hostPart = authority[...close]
            let after = authority[authority.index(after: close)...]
            if let c = after.first {
                guard c == ":" else { throw Problem(.host, "only a port may follow an IPv6 address's ]") }
                portPart = after.dropFirst()
            }
        } else if authority.first != "[", let c = authority.lastIndex(of: ":") {
            hostPart = authority[..<c]
            portPart = authority[authority.index(after: c)...]
        }
        guard !hostPart.isEmpty else { throw Problem(.emptyHost, "the URL has no host") }
        let port = try Self.port(portPart, scheme: scheme)
        let host = try Self.parseHost(hostPart)
        let target = Self.target(rest[end...])
        let fetched = "\(scheme)://\(host)\(port.map { ":\($0)" } ?? "")\(target)"
        guard fetched.utf8.count <= Self.maxLength else {
            throw Problem(
                .tooLong,
                "the URL is \(fetched.utf8.count) bytes as fetched; at most \(Self.maxLength) are taken"
            )
        }
        // Every form made here is one Foundation reads back as it is; this holds it (the fuzzer tries to break it).
        guard let url = URL(string: fetched), url.absoluteString == fetched else {
            throw Problem(.url, "the URL cannot be read as a URL")
        }
        self.scheme = scheme
        self.host = host
        self.port = port
        self.target = target
        self.fetched = fetched
        self.url = url
    }

    /// True when the fetched form differs from the written one.
    public var isRewritten: Bool { fetched != written }

    /// The port connected to.
    public var effectivePort: Int { port ?? (scheme == "https" ? 443 : 80) }

    /// The host without brackets and without a trailing dot: what TLS names (RFC 6066 §3), a certificate is checked
    /// against, the address rules judge, and two URLs are compared by.
    public var hostName: String {
        var h = Substring(host)
        if h.hasPrefix("[") { h = h.dropFirst().dropLast() }
        if h.hasSuffix(".") { h = h.dropLast() }
        return String(h)
    }

    /// The host as a resolver is asked for it: without brackets, a trailing dot kept (an absolute name: no search
    /// domain is tried).
    public var resolvedName: String { host.hasPrefix("[") ? hostName : host }

    /// `host[:port]` as fetched: the request's `Host` header.
    public var authority: String { host + (port.map { ":\($0)" } ?? "") }

    /// Equal for two spellings of one URL, a trailing dot or not: the key duplicates and verdicts are found by.
    public var comparisonKey: String {
        "\(scheme)://\(host.hasPrefix("[") ? host : hostName)\(port.map { ":\($0)" } ?? "")\(target)"
    }

    public var description: String { fetched }

    // MARK: - The parts

    /// Leading and trailing spaces, line breaks and control characters are removed (the URL standard removes C0
    /// controls and spaces; a cell of a spreadsheet often ends in a line break); inside, they are refused, and so
    /// is a backslash, which browsers read as `/` and other parsers as a character.
    private static func trimmedAndChecked(_ written: String) throws(Problem) -> Substring.UnicodeScalarView {
        func blank(_ c: Unicode.Scalar) -> Bool { c.value <= 0x20 || c.value == 0x7F || c.properties.isWhitespace }
        var s = Substring(written).unicodeScalars
        while let c = s.first, blank(c) { s.removeFirst() }
        while let c = s.last, blank(c) { s.removeLast() }
        for (i, c) in s.enumerated() {
            if c.value < 0x20 || (0x7F...0x9F).contains(c.value) {
                throw Problem(.characters, "a control character (\(Problem.name(c))) at character \(i + 1)")
            }
            if c.properties.isWhitespace {
                throw Problem(.characters, "a space (\(Problem.name(c))) at character \(i + 1): write it as %20")
            }
            if c == "\\" {
                throw Problem(.characters, "a backslash at character \(i + 1): write / or %5C")
            }
        }
        return s
    }

    private static func isSchemeCharacter(_ c: Unicode.Scalar) -> Bool {
        c.isASCII && (c.properties.isAlphabetic || ("0"..."9").contains(c) || c == "+" || c == "-" || c == ".")
    }

    /// Digits only, 1 to 65535; the scheme's default port is dropped (RFC 3986 §6.2.3), an empty one too.
    private static func port(_ text: Substring.UnicodeScalarView?, scheme: String) throws(Problem) -> Int? {
        guard let text, !text.isEmpty else { return nil }
        let shown = String(String.UnicodeScalarView(text)).prefix(16)
        guard text.allSatisfy({ ("0"..."9").contains($0) }) else {
            throw Problem(.port, "the port '\(shown)' is not a number")
        }
        let digits = text.drop { $0 == "0" }
        guard digits.count <= 5, let n = Int(String(String.UnicodeScalarView(digits))), (1...65_535).contains(n)
        else {
            throw Problem(.port, "the port '\(shown)' is not 1 to 65535")
        }
        return n == (scheme == "https" ? 443 : 80) ? nil : n
    }

    /// The path and query as written, without the fragment (never sent: RFC 3986 §3.5); dot segments removed
    /// (RFC 3986 §5.2.4, as browsers and HTTP clients do before sending); what cannot travel in a request as it is
    /// (non-ASCII, `"<>[]^`{|}`, a `%` not followed by two hex digits) percent-encoded as UTF-8. Every `%XX` written
    /// stays as it is, in the case it was written.
    private static func target(_ tail: Substring.UnicodeScalarView) -> String {
        var t = tail
        if let hash = t.firstIndex(of: "#") { t = t[..<hash] }
        let q = t.firstIndex(of: "?")
        let path = removingDotSegments(encoded(q.map { t[..<$0] } ?? t))
        return path + (q.map { encoded(t[$0...]) } ?? "")
    }

    private static func encoded(_ part: Substring.UnicodeScalarView) -> String {
        let bytes = Array(String(String.UnicodeScalarView(part)).utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        let hex = Array("0123456789ABCDEF".utf8)
        for (i, b) in bytes.enumerated() {
            let keep: Bool
            if b == UInt8(ascii: "%") {
                keep = i + 2 < bytes.count && hexValue(bytes[i + 1]) != nil && hexValue(bytes[i + 2]) != nil
            } else {
                keep = b < 0x80 && allowed[Int(b)]
            }
            if keep {
                out.append(b)
            } else {
                out += [UInt8(ascii: "%"), hex[Int(b >> 4)], hex[Int(b & 15)]]
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// RFC 3986's characters of a path and a query: unreserved, sub-delims, `:`, `@`, `/`, `?`.
    private static let allowed: [Bool] = (0..<128).map { b in
        let c = Unicode.Scalar(UInt8(b))
        return c.properties.isAlphabetic && c.isASCII || ("0"..."9").contains(c)
            || "-._~!$&'()*+,;=:@/?".unicodeScalars.contains(c)
    }

    /// RFC 3986 §5.2.4 on a path that is empty or starts with `/`; an empty path comes back as `/`.
    private static func removingDotSegments(_ path: String) -> String {
        let segments = path.split(separator: "/", omittingEmptySubsequences: false).dropFirst()
        var out: [Substring] = []
        for (i, segment) in segments.enumerated() {
            let last = i == segments.count - 1
            switch segment {
            case ".":
                if last { out.append("") }
            case "..":
                if !out.isEmpty { out.removeLast() }
                if last { out.append("") }
            default:
                out.append(segment)
            }
        }
        return "/" + out.joined(separator: "/")
    }
}
