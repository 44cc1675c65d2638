extension MediaURL {
    /// Why a media URL is refused: a stable rule (the same on the device, in the server's answers and in
    /// `richpush send`) and a sentence for people.
    public struct Problem: Error, Sendable, Hashable, CustomStringConvertible {
        public enum Rule: String, Sendable, CaseIterable {
            /// Not an absolute URL (no scheme, or no `//` and host after it).
            case url
            /// A scheme other than http and https.
            case scheme = "url-scheme"
            /// `user:password@` before the host.
            case userInfo = "url-user-info"
            /// Nothing between `//` and the path.
            case emptyHost = "url-empty-host"
            /// A host that is no name or address: a character a name cannot hold, an empty label, an IPv4 or IPv6
            /// address that does not parse, a zone, an international name IDNA refuses.
            case host = "url-host"
            /// A label over 63 octets or a name over 253 (in ASCII form).
            case hostTooLong = "url-host-too-long"
            /// A port that is not a number from 1 to 65535.
            case port = "url-port"
            /// Over ``MediaURL/maxLength`` bytes, as written or as fetched.
            case tooLong = "url-too-long"
            /// A control character, a space or a backslash inside the URL.
            case characters = "url-characters"
        }

        public let rule: Rule
        public let message: String

        public init(_ rule: Rule, _ message: String) {
            self.rule = rule
            self.message = message
        }

        /// The stable code: `url`, `url-scheme`, `url-user-info`…
        public var code: String { rule.rawValue }

        public var description: String { "\(message) [\(rule.rawValue)]" }

        /// A code point as people can read it in a message, whatever it is: `'ä' (U+00E4)`.
        static func name(_ c: Unicode.Scalar) -> String {
            let hex = String(c.value, radix: 16, uppercase: true)
            let code = "U+" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
            let printable =
                c.value > 0x20 && c.value != 0x7F && !(0x80...0x9F).contains(c.value)
                && !c.properties.isWhitespace && c.properties.generalCategory != .format
            return printable ? "'\(c)' (\(code))" : code
        }
    }
}
