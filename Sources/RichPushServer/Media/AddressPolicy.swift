import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An IP address, v4 or v6, as bytes.
public enum IPAddress: Sendable, Hashable, CustomStringConvertible {
    case v4(UInt32)
    case v6([UInt8])

    /// Parses a host the way browsers and URL libraries do, so that every spelling that reaches an address is
    /// recognised: dotted IPv4 with decimal, octal (`0177.0.0.1`) or hex (`0x7f.1`) parts, fewer than four parts
    /// (`127.1`), a single number (`2130706433`, `0x7f000001`), and IPv6 with or without brackets, including
    /// IPv4-mapped forms (`::ffff:127.0.0.1`). nil when the host is a name.
    public init?(host: String) {
        var h = host
        if h.hasPrefix("[") && h.hasSuffix("]") { h = String(h.dropFirst().dropLast()) }
        if h.contains(":") {
            // A zone id (`fe80::1%eth0`) only goes with link-local addresses: drop it, the address decides.
            if let percent = h.firstIndex(of: "%") { h = String(h[..<percent]) }
            var a = in6_addr()
            guard inet_pton(AF_INET6, h, &a) == 1 else { return nil }
            self = .v6(withUnsafeBytes(of: &a) { Array($0) })
            return
        }
        guard let v4 = Self.parseIPv4(h) else { return nil }
        self = .v4(v4)
    }

    /// WHATWG URL IPv4 parsing: nil when the host is not an IPv4 address in any spelling.
    static func parseIPv4(_ host: String) -> UInt32? {
        var parts = host.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        if parts.last == "" && parts.count > 1 { parts.removeLast() }
        guard (1...4).contains(parts.count), let last = parts.last, Self.number(last) != nil else { return nil }
        var numbers: [UInt64] = []
        for p in parts {
            guard let n = Self.number(p) else { return nil }
            numbers.append(n)
        }
        for n in numbers.dropLast() where n > 255 { return nil }
        let lastLimit = UInt64(1) << (8 * UInt64(5 - numbers.count))
        guard numbers.last! < lastLimit else { return nil }
        var value = numbers.last!
        for (i, n) in numbers.dropLast().enumerated() { value += n << (8 * UInt64(3 - i)) }
        return UInt32(value)
    }

    static func number(_ part: String) -> UInt64? {
        guard !part.isEmpty else { return nil }
        var s = Substring(part)
        var radix = 10
        if s.count >= 2, s.hasPrefix("0x") || s.hasPrefix("0X") {
            s = s.dropFirst(2)
            radix = 16
            if s.isEmpty { return 0 }
        } else if s.count >= 2, s.hasPrefix("0") {
            s = s.dropFirst()
            radix = 8
        }
        guard s.count <= 20 else { return nil }
        return UInt64(s, radix: radix)
    }

    public var description: String {
        switch self {
        case .v4(let v): return "\(v >> 24).\((v >> 16) & 255).\((v >> 8) & 255).\(v & 255)"
        case .v6(var bytes):
            var out = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
            _ = bytes.withUnsafeMutableBytes { inet_ntop(AF_INET6, $0.baseAddress, &out, socklen_t(out.count)) }
            return String(cString: out)
        }
    }
}

/// Which addresses a fetch of a user-supplied URL may connect to. Everything public is allowed; loopback,
/// private, shared (CGNAT), link-local, multicast, unspecified, reserved and documentation ranges and cloud
/// metadata endpoints are refused, in every IPv4 and IPv6 spelling, including IPv4 inside IPv6 (mapped,
/// compatible, NAT64, 6to4) and Teredo. Sandbox mode allows everything.
public struct AddressPolicy: Sendable {
    public enum Verdict: Sendable, Hashable {
        case allowed
        /// A stable reason: loopback, private, shared, link-local, metadata, multicast, unspecified, reserved,
        /// documentation, tunnel.
        case refused(String)
    }

    /// Allow every address (the sandbox: media servers on loopback).
    public var allowAll: Bool
    /// Endpoints allowed in spite of the rules ("10.0.0.7" or "10.0.0.7:8443"), for an operator's own media hosts.
    public var exceptions: Set<String>
    /// Refuse names known to point inside (localhost, metadata services) before looking them up; off only to
    /// test that what the lookup returns is refused by itself.
    public var nameRules = true

    public init(allowAll: Bool = false, exceptions: Set<String> = []) {
        self.allowAll = allowAll
        self.exceptions = exceptions
    }

    /// Host names refused before any lookup (cloud metadata services).
    static let metadataNames: Set<String> = [
        "metadata.google.internal", "metadata", "metadata.goog", "instance-data", "instance-data.ec2.internal",
        "metadata.azure.internal",
    ]

    public func check(hostName: String) -> Verdict {
        if allowAll || !nameRules { return .allowed }
        var h = hostName.lowercased()
        if h.hasSuffix(".") { h.removeLast() }
        if Self.metadataNames.contains(h) { return .refused("metadata") }
        if h == "localhost" || h.hasSuffix(".localhost") { return .refused("loopback") }
        return .allowed
    }

    public func check(_ address: IPAddress, port: Int? = nil) -> Verdict {
        if allowAll { return .allowed }
        if exceptions.contains(address.description) { return .allowed }
        if let port,
            exceptions.contains(address.description + ":\(port)")
                || exceptions.contains("[\(address.description)]:\(port)")
        {
            return .allowed
        }
        return Self.classify(address)
    }

    public static func classify(_ address: IPAddress) -> Verdict {
        switch address {
        case .v4(let a): return classify(v4: a)
        case .v6(let b): return classify(v6: b)
        }
    }

    static func classify(v4 a: UInt32) -> Verdict {
        func within(_ base: UInt32, _ bits: UInt32) -> Bool { bits == 0 || (a >> (32 - bits)) == (base >> (32 - bits)) }
        let ip = { (x: UInt32, y: UInt32, z: UInt32, w: UInt32) in x << 24 | y << 16 | z << 8 | w }
        if a == ip(169, 254, 169, 254) || a == ip(100, 100, 100, 200) || a == ip(192, 0, 0, 192) {
            return .refused("metadata")
        }
        if within(ip(0, 0, 0, 0), 8) { return .refused("unspecified") }
        if within(ip(127, 0, 0, 0), 8) { return .refused("loopback") }
        if within(ip(10, 0, 0, 0), 8) || within(ip(172, 16, 0, 0), 12) || within(ip(192, 168, 0, 0), 16) {
            return .refused("private")
        }
        if within(ip(100, 64, 0, 0), 10) { return .refused("shared") }
        if within(ip(169, 254, 0, 0), 16) { return .refused("link-local") }
        if within(ip(224, 0, 0, 0), 4) { return .refused("multicast") }
        if within(ip(240, 0, 0, 0), 4) { return .refused("reserved") }  // includes 255.255.255.255
        if within(ip(192, 0, 0, 0), 24) || within(ip(198, 18, 0, 0), 15) || within(ip(192, 88, 99, 0), 24) {
            return .refused("reserved")
        }
        if within(ip(192, 0, 2, 0), 24) || within(ip(198, 51, 100, 0), 24) || within(ip(203, 0, 113, 0), 24) {
            return .refused("documentation")
        }
        return .allowed
    }

    static func classify(v6 b: [UInt8]) -> Verdict {
        func prefix(_ p: [UInt8], bits: Int) -> Bool {
            for i in 0..<bits {
                let byte = i / 8
                let bit = 7 - i % 8
                if (b[byte] >> bit) & 1 != (p[byte] >> bit) & 1 { return false }
            }
            return true
        }
        func v4(at offset: Int) -> UInt32 {
            UInt32(b[offset]) << 24 | UInt32(b[offset + 1]) << 16 | UInt32(b[offset + 2]) << 8 | UInt32(b[offset + 3])
        }
        let zero = [UInt8](repeating: 0, count: 16)
        if b == zero { return .refused("unspecified") }
        if b == zero.dropLast() + [1] { return .refused("loopback") }
        // IPv4 inside IPv6: the embedded address decides.
        // ::ffff:a.b.c.d
        if b[0..<10].allSatisfy({ $0 == 0 }) && b[10] == 0xff && b[11] == 0xff { return classify(v4: v4(at: 12)) }
        // ::a.b.c.d (deprecated compatible form)
        if b[0..<12].allSatisfy({ $0 == 0 }) { return classify(v4: v4(at: 12)) }
        if prefix([0, 0x64, 0xff, 0x9b] + [UInt8](repeating: 0, count: 12), bits: 96) {
            return classify(v4: v4(at: 12))
        }  // NAT64 64:ff9b::/96
        if prefix([0, 0x64, 0xff, 0x9b, 0, 1] + [UInt8](repeating: 0, count: 10), bits: 48) {
            return .refused("private")
        }  // local NAT64
        if prefix([0x20, 0x02] + [UInt8](repeating: 0, count: 14), bits: 16) {
            return classify(v4: v4(at: 2)) == .allowed ? .allowed : .refused("tunnel")
        }  // 6to4
        // Teredo hides its address
        if prefix([0x20, 0x01, 0, 0] + [UInt8](repeating: 0, count: 12), bits: 32) { return .refused("tunnel") }
        if b == [0xfd, 0, 0x0e, 0xc2] + [UInt8](repeating: 0, count: 10) + [0x02, 0x54] {
            return .refused("metadata")
        }  // fd00:ec2::254
        if prefix([0xfc] + [UInt8](repeating: 0, count: 15), bits: 7) { return .refused("private") }  // fc00::/7
        if prefix([0xfe, 0x80] + [UInt8](repeating: 0, count: 14), bits: 10) { return .refused("link-local") }
        // site-local (deprecated)
        if prefix([0xfe, 0xc0] + [UInt8](repeating: 0, count: 14), bits: 10) { return .refused("private") }
        if b[0] == 0xff { return .refused("multicast") }
        if prefix([0x20, 0x01, 0x0d, 0xb8] + [UInt8](repeating: 0, count: 12), bits: 32) {
            return .refused("documentation")
        }
        // discard 100::/64
        if prefix([0x01, 0] + [UInt8](repeating: 0, count: 14), bits: 64) { return .refused("reserved") }
        return .allowed
    }
}
