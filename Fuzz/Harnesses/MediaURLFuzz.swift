// libFuzzer harness: raw bytes as a media URL, through the one normalization the device, the server's preflight and
// `richpush send` share (MediaURL), with the properties the fetchers rely on checked on every URL it accepts; and
// the same bytes through Punycode on its own, both ways. Built by Scripts/fuzz-device, run with Fuzz/urls.dict.
import Foundation
import RichPushCore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzMediaURL(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    if let url = try? MediaURL(text) { check(url) }
    // Punycode both ways, on the text's code points as one label.
    let scalars = Array(text.unicodeScalars.prefix(Punycode.maxScalars))
    if let encoded = Punycode.encode(scalars) {
        precondition(encoded.utf8.allSatisfy { $0 < 0x80 }, "Punycode is ASCII")
        precondition(Punycode.decode(Substring(encoded)) == scalars, "Punycode decodes to what it encoded")
    }
    if let decoded = Punycode.decode(Substring(text)), let again = Punycode.encode(decoded) {
        precondition(Punycode.decode(Substring(again)) == decoded, "re-encoded Punycode decodes the same")
    }
    return 0
}

/// What every accepted URL must be: the form the fetchers send, a fixed point of the normalization.
func check(_ url: MediaURL) {
    let fetched = url.fetched
    precondition(fetched.utf8.count <= MediaURL.maxLength, "within the bound")
    precondition(fetched.unicodeScalars.allSatisfy(\.isASCII), "ASCII only")
    precondition(url.scheme == "http" || url.scheme == "https", "http or https")
    precondition(fetched.hasPrefix("\(url.scheme)://\(url.host)"), "scheme and host lead")
    precondition(!url.host.unicodeScalars.contains { ("A"..."Z").contains($0) }, "the host is in lower case")
    precondition(!url.host.isEmpty && !url.authority.contains("@"), "a host, no user information")
    precondition(url.target.hasPrefix("/") && !fetched.contains("#"), "a path, no fragment")
    precondition(!fetched.contains(" ") && !fetched.contains("\\"), "no space, no backslash")
    if let port = url.port { precondition((1...65_535).contains(port), "a port in range") }
    precondition(url.port != (url.scheme == "https" ? 443 : 80), "no default port")
    precondition(URL(string: fetched)?.absoluteString == fetched, "Foundation reads it back unchanged")
    guard let again = try? MediaURL(fetched) else { preconditionFailure("the fetched form is accepted: \(fetched)") }
    precondition(again.fetched == fetched, "normalizing twice changes nothing: \(fetched) → \(again.fetched)")
    precondition(again.comparisonKey == url.comparisonKey, "one comparison key")
    precondition(!url.hostName.hasSuffix(".") && !url.hostName.hasPrefix("["), "the name compared has no dot, no [")
}
