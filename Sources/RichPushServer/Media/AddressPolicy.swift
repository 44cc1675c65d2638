import Foundation
import RichPushCore

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

    /// WHATWG URL IPv4 parsing: nil when the host is not an IPv4 address in any spelling (the media URL
    /// normalization's own reading, so that a URL and the address policy never disagree on what a host is).
    static func parseIPv4(_ host: String) -> UInt32? { MediaURL.ipv4Address(host) }

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

/// Which addresses a fetch of a user-supplied URL (media, a Web Push endpoint) may connect to. Everything public is
/// allowed; every prefix of the IANA IPv4 and IPv6 Special-Purpose Address Registries (RFC 6890) is refused, and so
/// are multicast, the deprecated site-local and IPv4-compatible forms, SIIT's IPv4-translated form, everything of
/// IPv6 outside global unicast (`2000::/3`), and cloud metadata endpoints, in every IPv4 and IPv6 spelling. The one
/// special-purpose prefix that is not refused outright is NAT64's well-known prefix `64:ff9b::/96` (RFC 6052): on an
/// IPv6-only network every IPv4-only host is reached through it, so the IPv4 address it embeds decides (RFC 6052
/// forbids the prefix for non-global IPv4 addresses, and those are the ones refused). Sandbox mode allows everything.
/// The table, with its sources, is in docs/server.md ("Outbound addresses").
public struct AddressPolicy: Sendable {
    public enum Verdict: Sendable, Hashable {
        case allowed
        /// A stable reason: loopback, private, shared, link-local, metadata, multicast, unspecified, reserved,
        /// documentation, benchmarking, tunnel, anycast, discard, orchid, translation, ipv4-mapped, ipv4-translated,
        /// ipv4-compatible, segment-routing. An address that embeds a refused IPv4 address gives that address's
        /// reason.
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

    /// A refused block: its prefix, its length, the reason given, and what it is (for the docs and tests).
    struct Block: Sendable {
        var bytes: [UInt8]
        var bits: Int
        var reason: String
        var name: String

        init(_ text: String, _ reason: String, _ name: String) {
            let parts = text.split(separator: "/")
            // Our own literals: a malformed one is a programming error caught by the tests of every row.
            switch IPAddress(host: String(parts[0])) {
            case .v4(let v)?: bytes = withUnsafeBytes(of: v.bigEndian) { Array($0) }
            case .v6(let b)?: bytes = b
            case nil: bytes = []
            }
            bits = parts.count > 1 ? Int(parts[1]) ?? 0 : bytes.count * 8
            self.reason = reason
            self.name = name
        }

        func contains(_ b: [UInt8]) -> Bool {
            guard b.count == bytes.count, bits <= b.count * 8 else { return false }
            for i in 0..<bits where (b[i / 8] >> (7 - i % 8)) & 1 != (bytes[i / 8] >> (7 - i % 8)) & 1 { return false }
            return true
        }
    }

    /// IPv4, most specific first (the first match decides): the IANA IPv4 Special-Purpose Address Registry
    /// (https://www.iana.org/assignments/iana-ipv4-special-registry), multicast (RFC 5771) and metadata endpoints.
    static let v4Blocks: [Block] = [
        Block("169.254.169.254/32", "metadata", "cloud metadata service"),
        Block("100.100.100.200/32", "metadata", "cloud metadata service"),
        Block("192.0.0.192/32", "metadata", "cloud metadata service"),
        Block("0.0.0.0/8", "unspecified", "\"this network\" (RFC 791, RFC 1122)"),
        Block("10.0.0.0/8", "private", "private-use (RFC 1918)"),
        Block("100.64.0.0/10", "shared", "shared address space (RFC 6598)"),
        Block("127.0.0.0/8", "loopback", "loopback (RFC 1122)"),
        Block("169.254.0.0/16", "link-local", "link local (RFC 3927)"),
        Block("172.16.0.0/12", "private", "private-use (RFC 1918)"),
        // 192.0.0.0/29 DS-Lite, .8 dummy, .9 PCP anycast, .10 TURN anycast, .170 and .171 NAT64 discovery.
        Block("192.0.0.0/24", "reserved", "IETF protocol assignments (RFC 6890)"),
        Block("192.0.2.0/24", "documentation", "TEST-NET-1 (RFC 5737)"),
        Block("192.31.196.0/24", "anycast", "AS112-v4 (RFC 7535)"),
        Block("192.52.193.0/24", "anycast", "AMT (RFC 7450)"),
        Block("192.88.99.0/24", "tunnel", "deprecated 6to4 relay anycast (RFC 7526)"),
        Block("192.168.0.0/16", "private", "private-use (RFC 1918)"),
        Block("192.175.48.0/24", "anycast", "direct delegation AS112 service (RFC 7534)"),
        Block("198.18.0.0/15", "benchmarking", "benchmarking (RFC 2544)"),
        Block("198.51.100.0/24", "documentation", "TEST-NET-2 (RFC 5737)"),
        Block("203.0.113.0/24", "documentation", "TEST-NET-3 (RFC 5737)"),
        Block("224.0.0.0/4", "multicast", "multicast (RFC 5771)"),
        // Includes the limited broadcast 255.255.255.255/32 (RFC 8190, RFC 919).
        Block("240.0.0.0/4", "reserved", "reserved (RFC 1112)"),
    ]

    /// IPv6, most specific first: the IANA IPv6 Special-Purpose Address Registry
    /// (https://www.iana.org/assignments/iana-ipv6-special-registry) and the forms RFC 4291 and RFC 3879 deprecate.
    /// The IPv4-embedding forms are handled before this table (``classify(v6:)``); NAT64's `64:ff9b::/96` too.
    static let v6Blocks: [Block] = [
        Block("::/128", "unspecified", "unspecified address (RFC 4291)"),
        Block("::1/128", "loopback", "loopback address (RFC 4291)"),
        Block("64:ff9b:1::/48", "translation", "local-use IPv4/IPv6 translation (RFC 8215)"),
        Block("100::/64", "discard", "discard-only address block (RFC 6666)"),
        Block("100:0:0:1::/64", "reserved", "dummy IPv6 prefix (the IANA registry)"),
        Block("2001::/32", "tunnel", "Teredo (RFC 4380)"),
        Block("2001:2::/48", "benchmarking", "benchmarking (RFC 5180)"),
        Block("2001:3::/32", "anycast", "AMT (RFC 7450)"),
        Block("2001:4:112::/48", "anycast", "AS112-v6 (RFC 7535)"),
        Block("2001:10::/28", "orchid", "deprecated ORCHID (RFC 4843)"),
        Block("2001:20::/28", "orchid", "ORCHIDv2 (RFC 7343)"),
        Block("2001:30::/28", "reserved", "drone remote ID entity tags (RFC 9374)"),
        // The rest of it: PCP, TURN and DNS-SD SRP anycast (2001:1::1, ::2, ::3), and what is not yet assigned.
        Block("2001::/23", "reserved", "IETF protocol assignments (RFC 2928)"),
        Block("2001:db8::/32", "documentation", "documentation (RFC 3849)"),
        Block("2002::/16", "tunnel", "6to4 (RFC 3056)"),
        Block("2620:4f:8000::/48", "anycast", "direct delegation AS112 service (RFC 7534)"),
        Block("3fff::/20", "documentation", "documentation (RFC 9637)"),
        Block("5f00::/16", "segment-routing", "SRv6 SIDs (RFC 9602)"),
        Block("fd00:ec2::254/128", "metadata", "cloud metadata service"),
        Block("fc00::/7", "private", "unique-local (RFC 4193)"),
        Block("fe80::/10", "link-local", "link-local unicast (RFC 4291)"),
        Block("fec0::/10", "private", "deprecated site-local (RFC 3879)"),
        Block("ff00::/8", "multicast", "multicast (RFC 4291)"),
    ]

    static func classify(v4 a: UInt32) -> Verdict {
        let bytes = withUnsafeBytes(of: a.bigEndian) { Array($0) }
        if let block = v4Blocks.first(where: { $0.contains(bytes) }) { return .refused(block.reason) }
        return .allowed
    }

    static func classify(v6 b: [UInt8]) -> Verdict {
        guard b.count == 16 else { return .refused("reserved") }
        let v4 = UInt32(b[12]) << 24 | UInt32(b[13]) << 16 | UInt32(b[14]) << 8 | UInt32(b[15])
        /// An IPv4 address inside a refused form: the IPv4 address's own reason when it has one, else the form's.
        func embedding(_ form: String) -> Verdict {
            if case .refused(let why) = classify(v4: v4) { return .refused(why) }
            return .refused(form)
        }
        if b[0..<10].allSatisfy({ $0 == 0 }) && b[10] == 0xff && b[11] == 0xff {
            return embedding("ipv4-mapped")  // ::ffff:0:0/96 (RFC 4291 section 2.5.5.2; SIIT, RFC 2765)
        }
        if b[0..<8].allSatisfy({ $0 == 0 }) && b[8] == 0xff && b[9] == 0xff && b[10] == 0 && b[11] == 0 {
            return embedding("ipv4-translated")  // ::ffff:0:0:0/96 (SIIT, RFC 2765 section 2.1)
        }
        if b[0..<12].allSatisfy({ $0 == 0 }) && !(b[12..<15].allSatisfy { $0 == 0 } && b[15] <= 1) {
            return embedding("ipv4-compatible")  // ::/96 (RFC 4291 section 2.5.5.1, deprecated)
        }
        // 64:ff9b::/96 (RFC 6052): the embedded IPv4 address decides.
        if b[0..<4] == [0, 0x64, 0xff, 0x9b] && b[4..<12].allSatisfy({ $0 == 0 }) { return classify(v4: v4) }
        if let block = v6Blocks.first(where: { $0.contains(b) }) { return .refused(block.reason) }
        // Outside 2000::/3 nothing is global unicast (the IANA IPv6 Address Space registry).
        if b[0] & 0xe0 != 0x20 { return .refused("reserved") }
        return .allowed
    }
}
