import Foundation
import HTTPTypes

/// A range of addresses written as CIDR (`10.0.0.0/8`, `2001:db8::/32`) or a single address.
public struct AddressRange: Sendable, Hashable, CustomStringConvertible {
    public let base: IPAddress
    public let bits: Int

    /// nil when the text is not an address with an optional prefix length within the address's size.
    public init?(_ text: String) {
        let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let first = parts.first, !first.isEmpty, first.utf8.count <= 64,
            let address = IPAddress(literal: String(first))
        else { return nil }
        let size = address.bitCount
        var bits = size
        if parts.count == 2 {
            // Digits only, and at most three of them, before the conversion.
            guard (1...3).contains(parts[1].utf8.count), parts[1].utf8.allSatisfy({ (48...57).contains($0) }),
                let n = Int(parts[1]), n <= size
            else { return nil }
            bits = n
        }
        base = address
        self.bits = bits
    }

    public func contains(_ address: IPAddress) -> Bool {
        let (a, b) = (address.bytes, base.bytes)
        guard a.count == b.count else { return false }
        var left = bits
        for i in 0..<a.count where left > 0 {
            let take = min(8, left)
            let mask = UInt8(truncatingIfNeeded: 0xFF << (8 - take))
            if a[i] & mask != b[i] & mask { return false }
            left -= take
        }
        return true
    }

    public var description: String { "\(base)/\(bits)" }
}

extension IPAddress {
    /// Only the literal forms a proxy writes: dotted-quad IPv4 with four decimal parts, or IPv6 (in brackets or
    /// not, a port after brackets dropped). Unlike ``init(host:)`` no URL spellings: a header is not a URL.
    init?(literal text: String) {
        var t = Substring(text.trimmingCharacters(in: .whitespaces))
        if t.hasPrefix("[") {
            guard let close = t.firstIndex(of: "]") else { return nil }
            t = t[t.index(after: t.startIndex)..<close]
        } else if t.filter({ $0 == ":" }).count == 1 {
            // IPv4 with a port (`192.0.2.1:4711`).
            t = t[..<t.firstIndex(of: ":")!]
        }
        guard !t.isEmpty, t.utf8.count <= 45 else { return nil }
        if t.contains(":") {
            guard let a = IPAddress(host: String(t)), case .v6 = a else { return nil }
            self = a
            return
        }
        let parts = t.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        var value: UInt32 = 0
        for p in parts {
            guard (1...3).contains(p.utf8.count), p.utf8.allSatisfy({ (48...57).contains($0) }), let n = UInt32(p),
                n <= 255
            else { return nil }
            value = value << 8 | n
        }
        self = .v4(value)
    }

    var bytes: [UInt8] {
        switch self {
        case .v4(let v): return [UInt8(v >> 24), UInt8((v >> 16) & 255), UInt8((v >> 8) & 255), UInt8(v & 255)]
        case .v6(let b): return b
        }
    }

    var bitCount: Int {
        if case .v4 = self { return 32 }
        return 128
    }

    /// An IPv4 address a dual-stack listener reports as `::ffff:a.b.c.d`, as IPv4.
    var unmapped: IPAddress {
        guard case .v6(let b) = self, b[0..<10].allSatisfy({ $0 == 0 }), b[10] == 0xFF, b[11] == 0xFF else {
            return self
        }
        return .v4(UInt32(b[12]) << 24 | UInt32(b[13]) << 16 | UInt32(b[14]) << 8 | UInt32(b[15]))
    }

    /// What requests are counted under: an IPv4 address, or an IPv6 address's /64 (one subscriber's network:
    /// a client holds the whole /64 and could otherwise take a new address, and a new bucket, per request).
    var clientKey: String {
        switch unmapped {
        case .v4: return unmapped.description
        case .v6(let b): return IPAddress.v6(Array(b[0..<8]) + [UInt8](repeating: 0, count: 8)).description + "/64"
        }
    }
}

/// Which client a request comes from. Its peer's address, unless the peer is one of the operator's proxies
/// (`trusted_proxies`): then the address the proxies say they forwarded for, read from the right of
/// `X-Forwarded-For` (or RFC 7239's `Forwarded: for=`), skipping every hop that is itself a trusted proxy. The first
/// address from the right that is not a trusted proxy is the client: what lies left of it was written by the
/// client and proves nothing. A header that does not parse leaves the last trusted hop as the client.
public struct TrustedProxies: Sendable, Equatable {
    public var ranges: [AddressRange]

    public init(_ ranges: [AddressRange] = []) { self.ranges = ranges }

    /// Reads `["10.0.0.0/8", "192.0.2.7"]`; the problem names the entry that is not an address or a range.
    public static func parse(_ entries: [String]) -> (TrustedProxies?, String?) {
        var ranges: [AddressRange] = []
        for e in entries {
            guard let r = AddressRange(e) else {
                return (nil, "\"\(e.prefix(64))\" is not an address or a range such as 10.0.0.0/8")
            }
            ranges.append(r)
        }
        return (TrustedProxies(ranges), nil)
    }

    func trusts(_ address: IPAddress) -> Bool {
        let a = address.unmapped
        return ranges.contains { $0.contains(a) || $0.contains(address) }
    }

    /// Hops at most read from the headers (a proxy chain is a few hops; a longer list is someone's padding).
    static let maxHops = 16

    /// The client's key (``IPAddress/clientKey``) for a request from `peer` with these headers.
    public func clientKey(peer: IPAddress?, headers: HTTPFields) -> String {
        guard let peer else { return "unknown" }
        guard !ranges.isEmpty, trusts(peer) else { return peer.clientKey }
        var hops = Self.forwardedFor(headers)
        var client = peer
        while let hop = hops.popLast() {
            guard let address = hop else { break }
            client = address
            if !trusts(address) { break }
        }
        return client.clientKey
    }

    /// The addresses a request says it was forwarded for, left to right (nil for a hop that is not an address:
    /// `unknown`, an obfuscated name); from `Forwarded` when present, else `X-Forwarded-For`. At most
    /// ``maxHops`` from the right are read.
    static func forwardedFor(_ headers: HTTPFields) -> [IPAddress?] {
        let forwarded = headers[values: .forwarded]
        if !forwarded.isEmpty {
            var hops: [IPAddress?] = []
            for value in forwarded.suffix(Self.maxHops) {
                for element in value.split(separator: ",").suffix(Self.maxHops) {
                    var found: IPAddress?? = nil
                    for pair in element.split(separator: ";") {
                        let kv = pair.split(separator: "=", maxSplits: 1)
                        guard kv.count == 2, kv[0].trimmingCharacters(in: .whitespaces).lowercased() == "for" else {
                            continue
                        }
                        var v = kv[1].trimmingCharacters(in: .whitespaces)
                        if v.hasPrefix("\""), v.hasSuffix("\""), v.count >= 2 { v = String(v.dropFirst().dropLast()) }
                        found = .some(IPAddress(literal: v))
                    }
                    if let found { hops.append(found) }
                }
            }
            return Array(hops.suffix(Self.maxHops))
        }
        let values = headers[values: .xForwardedFor]
        let hops = values.suffix(Self.maxHops).flatMap { $0.split(separator: ",").suffix(Self.maxHops) }
        return hops.suffix(Self.maxHops).map { IPAddress(literal: String($0)) }
    }
}

extension HTTPField.Name {
    static let forwarded = HTTPField.Name("Forwarded")!
    static let xForwardedFor = HTTPField.Name("X-Forwarded-For")!
}
