import Foundation
import RichPushTestSupport
import Testing

@testable import RichPushCore

/// The one media URL normalization: the shared table read without a network, Punycode against RFC 3492's own
/// samples, the host parsers, and the properties the fetchers rely on.
@Suite struct MediaURLTests {
    static let corpus = Result { try MediaURLCorpus() }

    @Test func theTableHasEveryKindOfSpelling() throws {
        let entries = try Self.corpus.get().raw
        #expect(entries.count >= 30)
        for outcome in [MediaURLCorpus.Outcome.attached, .unreachable, .refused] {
            #expect(entries.contains { $0.outcome == outcome })
        }
        let rules = Set(entries.compactMap(\.rule))
        for rule in MediaURL.Problem.Rule.allCases { #expect(rules.contains(rule.rawValue), "no entry for \(rule)") }
    }

    /// Every entry of the shared table, normalized without a fetch: refused with its rule, or in its fetched form.
    @Test func everySpellingOfTheTableNormalizesAsItSays() throws {
        let corpus = try Self.corpus.get()
        let entries = corpus.entries(port: 8080, port6: 8443)
        let observed = entries.map { e -> MediaURLCorpus.Observed in
            do throws(MediaURL.Problem) {
                let u = try MediaURL(e.url)
                return .init(e.outcome == .refused ? "accepted" : e.outcome.rawValue, fetched: u.fetched)
            } catch {
                return .init("refused", rule: error.code)
            }
        }
        let differences = corpus.differences(observed, in: entries, part: .preflight)
        #expect(differences.isEmpty, "\(differences.joined(separator: "\n"))")
    }

    /// What the fetchers rely on: the fetched form is ASCII, within the bound, read back unchanged by Foundation,
    /// normalizes to itself, and has no user information, fragment or default port.
    @Test func theFetchedFormIsAFixedPoint() throws {
        for e in try Self.corpus.get().entries(port: 8080, port6: 8443) where e.outcome != .refused {
            let u = try MediaURL(e.url)
            #expect(u.fetched.unicodeScalars.allSatisfy { $0.isASCII })
            #expect(u.fetched.utf8.count <= MediaURL.maxLength)
            #expect(URL(string: u.fetched)?.absoluteString == u.fetched)
            #expect(try MediaURL(u.fetched).fetched == u.fetched, "\(e.url)")
            // The server finds its own hosted media by the key of a URL read once (not of its fetched form read again).
            #expect(try MediaURL(u.fetched).comparisonKey == u.comparisonKey, "\(e.url)")
            #expect(!u.fetched.contains("#") && !u.fetched.contains("@"))
            #expect(u.fetched.hasPrefix(u.scheme + "://" + u.host))
            #expect(u.port != (u.scheme == "https" ? 443 : 80))
        }
    }

    /// Where Foundation does IDNA itself (it does on Apple platforms from iOS 17, and on this Linux toolchain), its
    /// ASCII name is ours.
    @Test func foundationAgreesWhereItEncodesNames() throws {
        var compared = 0
        for e in try Self.corpus.get().entries(port: 8080, port6: 8443) where e.outcome != .refused {
            let trimmed = e.url.trimmingCharacters(in: .whitespacesAndNewlines)
            guard let host = URL(string: trimmed)?.host(percentEncoded: false), host.contains("xn--") else { continue }
            #expect(try MediaURL(e.url).resolvedName == host.lowercased(), "\(e.url)")
            compared += 1
        }
        print("IDNA names compared with Foundation's: \(compared)")
    }

    @Test func aTrailingDotIsKeptForTheFetchAndDroppedForComparisons() throws {
        let u = try MediaURL("https://CDN.Example.com./a.jpg")
        #expect(u.fetched == "https://cdn.example.com./a.jpg")
        #expect(u.hostName == "cdn.example.com" && u.resolvedName == "cdn.example.com.")
        #expect(u.authority == "cdn.example.com.")
        let plain = try MediaURL("https://cdn.example.com/a.jpg")
        #expect(u.comparisonKey == plain.comparisonKey)
        let v6 = try MediaURL("https://[2001:DB8:0:0:0:0:0:1]:8443/a.jpg")
        #expect(v6.host == "[2001:db8::1]" && v6.hostName == "2001:db8::1" && v6.resolvedName == "2001:db8::1")
        #expect(v6.authority == "[2001:db8::1]:8443" && v6.effectivePort == 8443)
        #expect(try MediaURL("http://127.0.0.1./x").host == "127.0.0.1")
    }

    @Test(arguments: [
        ("::1", "::1"), ("0:0:0:0:0:0:0:0", "::"), ("1:0:0:0:0:0:0:0", "1::"), ("1:0:0:1:0:0:0:1", "1:0:0:1::1"),
        ("2001:DB8::0:1", "2001:db8::1"), ("1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8"),
        ("::ffff:192.0.2.1", "::ffff:c000:201"),
        ("1:0:1:0:1:0:1:0", "1:0:1:0:1:0:1:0"), ("0001:02:003::", "1:2:3::"),
        ("1:2:3:4:5:6:1.2.3.4", "1:2:3:4:5:6:102:304"),
    ])
    func ipv6AddressesAreWrittenAsRFC5952Says(_ text: String, _ expected: String) throws {
        let pieces = try #require(IPv6.parse(text))
        #expect(IPv6.serialize(pieces) == expected)
    }

    @Test(arguments: [
        "", ":", ":::", "1:2:3:4:5:6:7:8:9", "1::2::3", "12345::", "1:", ":1", "g::", "::1.2.3", "::1.2.3.4.5",
        "::256.1.1.1", "::01.1.1.1", "1:2:3:4:5:6:7:1.2.3.4", "fe80::1%eth0",
    ])
    func ipv6TextThatIsNoAddressIsRefused(_ text: String) {
        #expect(IPv6.parse(text) == nil, "\(text)")
    }

    @Test(arguments: [
        ("127.0.0.1", "127.0.0.1"), ("0x7f.1", "127.0.0.1"), ("2130706433", "127.0.0.1"), ("0177.0.0.1", "127.0.0.1"),
        ("0x7F000001", "127.0.0.1"), ("1.2.3", "1.2.0.3"), ("0", "0.0.0.0"), ("0x", "0.0.0.0"),
        ("255.255.255.255.", "255.255.255.255"),
    ])
    func ipv4InEverySpellingIsWrittenInDecimal(_ text: String, _ expected: String) throws {
        #expect(IPv4.endsInNumber(text))
        #expect(IPv4.parse(text).map(IPv4.serialize) == expected)
    }

    @Test(arguments: ["1.2.3.4.5", "256.1.1.1", "1.2.3.256.", "4294967296", "0x100000000", "1.0x1g", "09", "-0.1.1.1"])
    func ipv4TextThatIsNoAddressIsRefused(_ text: String) {
        #expect(IPv4.parse(text) == nil, "\(text)")
    }

    /// RFC 3492 §7.1's sample strings, both ways.
    @Test(arguments: [
        ("ليهمابتكلموشعربي؟", "egbpdaj6bu4bxfgehfvwxn"), ("他们为什么不说中文", "ihqwcrb4cv8a8dqg056pqjye"),
        ("他們爲什麽不說中文", "ihqwctvzc91f659drss3x8bo0yb"), ("Pročprostěnemluvíčesky", "Proprostnemluvesky-uyb24dma41a"),
        ("למההםפשוטלאמדבריםעברית", "4dbcagdahymbxekheh6e0a7fei0b"),
        ("почемужеонинеговорятпорусски", "b1abfaaepdrnnbgefbadotcwatmq2g4l"),
        ("なぜみんな日本語を話してくれないのか", "n8jok5ay5dzabd5bym9f0cm5685rrjetr6pdxa"),
        ("3年B組金八先生", "3B-ww4c5e180e575a65lsy2b"),
        ("安室奈美恵-with-SUPER-MONKEYS", "-with-SUPER-MONKEYS-pc58ag80a8qai00g7n9n"),
        ("MajiでKoiする5秒前", "MajiKoi5-783gue6qz075azm5e"), ("-> $1.00 <-", "-> $1.00 <--"), ("bücher", "bcher-kva"),
    ])
    func punycodeMatchesTheRFCSamples(_ unicode: String, _ encoded: String) throws {
        #expect(Punycode.encode(Array(unicode.unicodeScalars)) == encoded)
        let decoded = try #require(Punycode.decode(Substring(encoded)))
        #expect(String(String.UnicodeScalarView(decoded)) == unicode)
    }

    /// Punycode is bounded and never traps: too long, not Punycode, or numbers past 32 bits come back nil.
    @Test func punycodeRefusesWhatItCannotRepresent() {
        #expect(Punycode.encode(Array(repeating: "ä", count: Punycode.maxScalars + 1)) == nil)
        #expect(Punycode.encode(Array(repeating: "ä", count: Punycode.maxScalars)) != nil)
        for bad in ["ü", "-abc", "a-b-ü", "9", "99999999999999999999", "-", "a-!", "a-\u{7F}"] {
            #expect(Punycode.decode(Substring(bad)) == nil, "\(bad)")
        }
        #expect(Punycode.decode(Substring(String(repeating: "a", count: 5000))) == nil)
        // The largest scalar goes both ways.
        #expect(Punycode.encode(["\u{10FFFF}"]).flatMap { Punycode.decode(Substring($0)) } == ["\u{10FFFF}"])
    }

    /// Many random labels: encode, decode, the same code points.
    @Test func punycodeRoundTripsRandomLabels() {
        var random = SeededRandom(seed: 37)
        let pools: [ClosedRange<UInt32>] = [
            0x61...0x7A, 0xE0...0x17F, 0x400...0x4FF, 0x3040...0x30FF, 0x4E00...0x9FFF,
            0x1F300...0x1F64F, 0x10000...0x10FFFF,
        ]
        for _ in 0..<2000 {
            let count = Int.random(in: 1...40, using: &random)
            var scalars: [Unicode.Scalar] = []
            while scalars.count < count {
                let pool = pools[Int.random(in: 0..<pools.count, using: &random)]
                if let s = Unicode.Scalar(UInt32.random(in: pool, using: &random)) { scalars.append(s) }
            }
            guard let encoded = Punycode.encode(scalars) else {
                Issue.record("\(scalars) did not encode")
                continue
            }
            #expect(encoded.utf8.allSatisfy { $0 < 0x80 })
            #expect(Punycode.decode(Substring(encoded)) == scalars)
        }
    }

    /// The decoder and the validator read URLs with the same rules: a refused media URL names its rule, two spellings
    /// of one URL are fetched once, and the fetched form is kept beside the written one.
    @Test func theDeviceDecoderUsesTheSameRules() {
        let payload: JSONValue = [
            "rp": [
                "v": 1,
                "m": [
                    ["u": "HTTPS://CDN.Example.com:443/a.jpg"], ["u": "https://cdn.example.com./a.jpg"],
                    ["u": "https://user:pw@cdn.example.com/b.jpg"], ["u": "ftp://cdn.example.com/c.jpg"],
                    ["u": "https://bücher.example/d.jpg"],
                ],
            ]
        ]
        let c = ReceivedPayloadDecoder.decode(payload)
        #expect(c.media.map(\.url) == ["HTTPS://CDN.Example.com:443/a.jpg", "https://bücher.example/d.jpg"])
        #expect(c.media.map(\.fetched) == ["https://cdn.example.com/a.jpg", "https://xn--bcher-kva.example/d.jpg"])
        #expect(c.problems.map(\.code) == ["url-user-info", "url-scheme"])
        #expect(c.problems.map(\.path) == ["rp.m[2]", "rp.m[3]"])
        #expect(c.problems.allSatisfy { $0.message.contains("cdn.example.com") })
    }

    @Test func theValidatorUsesTheSameRules() throws {
        let validator = MessageValidator(options: .init(requireTargets: false))
        func rules(_ url: String) throws -> [String] {
            let report = validator.validate(json: ["title": "t", "media": .string(url)])
            return report.errors.filter { $0.path == "media[0].url" }.map(\.rule)
        }
        #expect(try rules("HTTPS://CDN.EXAMPLE.COM/a.jpg").isEmpty)
        #expect(try rules("https://bücher.example/a.jpg").isEmpty)
        #expect(try rules("https://u:p@cdn.example.com/a.jpg") == ["url-user-info"])
        #expect(try rules("https://cdn.example.com/a b.jpg") == ["url-characters"])
        #expect(try rules("ftp://cdn.example.com/a.jpg") == ["url-scheme"])
        #expect(try rules("cdn.example.com/a.jpg") == ["url"])
        #expect(try rules("HTTP://cdn.example.com/a.jpg") == ["https-required"])
    }
}
