import Foundation

/// A domain name to its ASCII form, as the WHATWG URL standard's host parser asks (domain to ASCII:
/// https://url.spec.whatwg.org/#concept-domain-to-ascii, with UTS #46 processing,
/// https://www.unicode.org/reports/tr46/): mapped, split into labels, every Unicode label Punycode-encoded behind
/// `xn--`. Only the part of UTS #46 that host names need is here; docs/payload-format.md §7 says what is left out.
enum IDNA {
    /// The longest label and name DNS carries (RFC 1035 §2.3.4): octets, without the trailing dot.
    static let maxLabel = 63
    static let maxName = 253

    /// The name in lower case ASCII, with its trailing dot if it had one, or why it cannot be one.
    static func toASCII(_ domain: String) throws(MediaURL.Problem) -> String {
        let mapped = domain.unicodeScalars.allSatisfy(\.isASCII) ? domain.lowercased() : map(domain)
        if let bad = mapped.unicodeScalars.first(where: isForbidden) {
            throw MediaURL.Problem(.host, "\(MediaURL.Problem.name(bad)) cannot be part of a host name")
        }
        var labels = mapped.split(separator: ".", omittingEmptySubsequences: false)
        // One empty label at the end is the root: `cdn.example.com.` is an absolute name.
        let absolute = labels.count > 1 && labels.last == ""
        if absolute { labels.removeLast() }
        var out: [String] = []
        for label in labels {
            guard !label.isEmpty else {
                throw MediaURL.Problem(.host, "the host has an empty label (a leading dot or two dots in a row)")
            }
            out.append(try ascii(label))
        }
        let name = out.joined(separator: ".")
        guard name.utf8.count <= maxName else {
            throw MediaURL.Problem(.hostTooLong, "the host is \(name.utf8.count) octets; DNS names hold \(maxName)")
        }
        return absolute ? name + "." : name
    }

    /// One label in its ASCII form.
    private static func ascii(_ label: Substring) throws(MediaURL.Problem) -> String {
        if label.unicodeScalars.allSatisfy(\.isASCII) {
            if label.hasPrefix("xn--") { try checkALabel(label) }
            if let bad = label.unicodeScalars.first(where: { !isNameCharacter($0) }) {
                throw MediaURL.Problem(
                    .host,
                    "\(MediaURL.Problem.name(bad)) cannot be part of a host name (letters, digits, - and _)"
                )
            }
            guard label.utf8.count <= maxLabel else { throw tooLong(label.utf8.count) }
            return String(label)
        }
        try checkULabel(label.unicodeScalars)
        let scalars = Array(label.unicodeScalars)
        // Punycode never makes a label shorter than its code points: longer input cannot fit, and is not encoded.
        guard scalars.count <= maxLabel, let encoded = Punycode.encode(scalars) else { throw tooLong(scalars.count) }
        let a = "xn--" + encoded
        guard a.utf8.count <= maxLabel else { throw tooLong(a.utf8.count) }
        return a
    }

    private static func tooLong(_ n: Int) -> MediaURL.Problem {
        MediaURL.Problem(.hostTooLong, "a label of the host is \(n) octets in ASCII; DNS labels hold \(maxLabel)")
    }

    /// UTS #46 §4 step 1, the part host names need: the full stops of other scripts to `.`, the code points UTS #46
    /// ignores removed, compatibility forms (full-width letters, ligatures) to their plain form, lower case, and
    /// NFC (NFKC is). ß and ς stay as they are (nontransitional processing, as the URL standard asks).
    static func map(_ s: String) -> String {
        var pre = String.UnicodeScalarView()
        for c in s.unicodeScalars {
            switch c.value {
            case 0x3002, 0xFF0E, 0xFF61: pre.append(".")
            case 0x00AD, 0x034F, 0x180B...0x180D, 0x180F, 0x200B, 0x2060, 0xFE00...0xFE0F, 0xFEFF, 0xE0100...0xE01EF:
                continue
            default: pre.append(c)
            }
        }
        return String(pre).precomposedStringWithCompatibilityMapping.lowercased()
            .precomposedStringWithCompatibilityMapping
    }

    /// UTS #46 §4.1 validity, the criteria that apply to the URL standard's processing: no `xn--` in front, no code
    /// point a name cannot hold (controls, format characters, unassigned, private use, spaces, U+FFFD, and in ASCII
    /// anything but letters, digits, `-` and `_`) and no combining mark in front. The joiners (ZWJ, ZWNJ) are
    /// refused outright, the bidi rule (RFC 5893) is not checked.
    private static func checkULabel(_ label: Substring.UnicodeScalarView) throws(MediaURL.Problem) {
        if label.starts(with: "xn--".unicodeScalars) {
            throw MediaURL.Problem(.host, "an international label cannot start with xn--")
        }
        if let first = label.first,
            [.nonspacingMark, .spacingMark, .enclosingMark].contains(first.properties.generalCategory)
        {
            throw MediaURL.Problem(
                .host,
                "a label of the host starts with a combining mark (\(MediaURL.Problem.name(first)))"
            )
        }
        for c in label {
            // The ASCII in an international label follows the ASCII rule (a `+` would otherwise ride along into the
            // `xn--` form); U+FFFD stands for bytes that were not text.
            if c.isASCII && !isNameCharacter(c) || c == "\u{FFFD}" {
                throw MediaURL.Problem(.host, "\(MediaURL.Problem.name(c)) cannot be part of a host name")
            }
            switch c.properties.generalCategory {
            case .control, .format, .surrogate, .privateUse, .unassigned, .spaceSeparator, .lineSeparator,
                .paragraphSeparator:
                throw MediaURL.Problem(.host, "\(MediaURL.Problem.name(c)) cannot be part of a host name")
            default: continue
            }
        }
    }

    /// A label already in `xn--` form must be one IDNA would make: valid Punycode of a valid Unicode label.
    private static func checkALabel(_ label: Substring) throws(MediaURL.Problem) {
        let body = label.dropFirst(4)
        guard let decoded = Punycode.decode(body), !decoded.isEmpty, !decoded.allSatisfy(\.isASCII) else {
            throw MediaURL.Problem(.host, "'\(label.prefix(63))' is not valid Punycode")
        }
        var view = String.UnicodeScalarView()
        view.append(contentsOf: decoded)
        let unicode = String(view)
        try checkULabel(view[...])
        guard map(unicode) == unicode, Punycode.encode(decoded) == String(body) else {
            throw MediaURL.Problem(.host, "'\(label.prefix(63))' is not the form IDNA gives its name")
        }
    }

    /// The URL standard's forbidden domain code points (https://url.spec.whatwg.org/#forbidden-domain-code-point).
    static func isForbidden(_ c: Unicode.Scalar) -> Bool {
        if c.value <= 0x20 || c.value == 0x7F { return true }
        return "#%/:<>?@[\\]^|".unicodeScalars.contains(c)
    }

    /// What a label of a name that DNS resolves is made of (RFC 1123 §2.1's letters, digits and hyphen, and the
    /// underscore real names carry).
    static func isNameCharacter(_ c: Unicode.Scalar) -> Bool {
        switch c {
        case "a"..."z", "0"..."9", "-", "_": return true
        default: return false
        }
    }
}
