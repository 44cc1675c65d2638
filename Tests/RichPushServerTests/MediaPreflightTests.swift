import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import RichPushCharts
import RichPushCore
import RichPushSandbox
import RichPushTestSupport
import Testing

@testable import RichPushServer

/// Every spelling of an address a fetch must not reach.
@Suite struct AddressPolicyTests {
    static func verdict(_ host: String) -> String {
        guard let a = IPAddress(host: host) else { return "name" }
        switch AddressPolicy().check(a) {
        case .allowed: return "allowed"
        case .refused(let why): return why
        }
    }

    @Test(arguments: [
        // IPv4 loopback in every spelling a URL parser accepts.
        ("127.0.0.1", "loopback"), ("127.1", "loopback"), ("127.0.1", "loopback"), ("2130706433", "loopback"),
        ("0x7f000001", "loopback"),
        ("0X7F000001", "loopback"), ("0177.0.0.1", "loopback"), ("0x7f.0.0.1", "loopback"), ("0x7f.1", "loopback"),
        ("017700000001", "loopback"),
        ("127.0.0.1.", "loopback"), ("127.255.255.254", "loopback"),
        // Private, shared, link-local, metadata, multicast, unspecified, reserved, documentation.
        ("10.0.0.1", "private"), ("10.255.255.255", "private"), ("172.16.0.1", "private"),
        ("172.31.255.255", "private"), ("192.168.0.1", "private"),
        ("0xa.0.0.1", "private"), ("167772161", "private"), ("100.64.0.1", "shared"), ("169.254.1.1", "link-local"),
        ("169.254.169.254", "metadata"), ("2852039166", "metadata"), ("0xa9fea9fe", "metadata"),
        ("0251.0376.0251.0376", "metadata"), ("100.100.100.200", "metadata"),
        ("224.0.0.1", "multicast"), ("239.255.255.250", "multicast"), ("0.0.0.0", "unspecified"), ("0", "unspecified"),
        ("0.1.2.3", "unspecified"),
        ("255.255.255.255", "reserved"), ("240.0.0.1", "reserved"), ("198.18.0.1", "benchmarking"),
        ("192.0.2.1", "documentation"),
        // IPv6, bracketed or not, and IPv4 inside IPv6.
        ("::1", "loopback"), ("[::1]", "loopback"), ("0:0:0:0:0:0:0:1", "loopback"), ("::", "unspecified"),
        ("[::]", "unspecified"),
        ("::ffff:127.0.0.1", "loopback"), ("[::ffff:7f00:1]", "loopback"), ("::ffff:10.0.0.1", "private"),
        ("::ffff:169.254.169.254", "metadata"),
        ("::127.0.0.1", "loopback"), ("64:ff9b::a9fe:a9fe", "metadata"), ("64:ff9b::7f00:1", "loopback"),
        ("2002:7f00:1::1", "tunnel"), ("2002:a00:1::", "tunnel"),
        ("2001::1", "tunnel"), ("fe80::1", "link-local"), ("fe80::1%eth0", "link-local"),
        ("[fe80::1%25eth0]", "link-local"), ("fc00::1", "private"),
        ("fd12:3456::1", "private"), ("fd00:ec2::254", "metadata"), ("ff02::1", "multicast"), ("fec0::1", "private"),
        ("2001:db8::1", "documentation"),
        // Public addresses pass.
        ("93.184.216.34", "allowed"), ("8.8.8.8", "allowed"), ("172.32.0.1", "allowed"), ("172.15.255.255", "allowed"),
        ("192.169.0.1", "allowed"),
        ("100.128.0.1", "allowed"), ("2606:4700:4700::1111", "allowed"), ("64:ff9b::808:808", "allowed"),
        ("64:ff9b::8.8.8.8", "allowed"),
        // Names are not addresses.
        ("example.com", "name"), ("1.2.3.4.5", "name"), ("0x7g.1.1.1", "name"), ("127.0.0.1.example.com", "name"),
    ])
    func everySpelling(_ host: String, _ expected: String) {
        #expect(Self.verdict(host) == expected, "\(host)")
    }

    /// Every block of the IANA IPv4 and IPv6 Special-Purpose Address Registries (RFC 6890), each at an address
    /// inside it, with its reason; the addresses just outside the ones that border public space pass.
    @Test(arguments: [
        // IPv4 registry.
        ("0.255.255.255", "unspecified"), ("192.0.0.1", "reserved"), ("192.0.0.8", "reserved"),
        ("192.0.0.9", "reserved"), ("192.0.0.10", "reserved"), ("192.0.0.170", "reserved"),
        ("192.0.0.171", "reserved"), ("192.0.0.255", "reserved"), ("192.31.196.1", "anycast"),
        ("192.52.193.1", "anycast"), ("192.88.99.1", "tunnel"), ("192.175.48.1", "anycast"),
        ("198.19.255.255", "benchmarking"), ("198.51.100.7", "documentation"), ("203.0.113.200", "documentation"),
        ("100.127.255.255", "shared"), ("169.254.255.255", "link-local"), ("255.255.255.255", "reserved"),
        ("192.0.1.0", "allowed"), ("192.31.195.255", "allowed"), ("198.20.0.0", "allowed"),
        ("198.17.255.255", "allowed"),
        ("100.63.255.255", "allowed"), ("223.255.255.255", "allowed"), ("1.1.1.1", "allowed"),
        // IPv6 registry: mapped and SIIT's translated form, whatever they embed; NAT64's well-known prefix by the
        // IPv4 address it embeds; local-use NAT64; discard; the dummy prefix; the IETF protocol block and all of
        // its parts; documentation; 6to4; AS112; SRv6; unique local and link local.
        ("::ffff:8.8.8.8", "ipv4-mapped"), ("::ffff:0:0", "unspecified"), ("::ffff:1.1.1.1", "ipv4-mapped"),
        ("::ffff:0:8.8.8.8", "ipv4-translated"), ("::ffff:0:7f00:1", "loopback"), ("::ffff:0:a00:1", "private"),
        ("::8.8.8.8", "ipv4-compatible"), ("::2", "unspecified"),
        ("64:ff9b::c0a8:1", "private"), ("64:ff9b::198.18.0.1", "benchmarking"), ("64:ff9b::1.1.1.1", "allowed"),
        ("64:ff9b:1::1", "translation"), ("64:ff9b:1:ffff:ffff:ffff:ffff:ffff", "translation"),
        ("64:ff9b:2::1", "reserved"), ("100::1", "discard"), ("100::ffff:ffff:ffff:ffff", "discard"),
        ("100:0:0:1::1", "reserved"), ("2001::1", "tunnel"), ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "tunnel"),
        ("2001:1::1", "reserved"), ("2001:1::2", "reserved"), ("2001:1::3", "reserved"), ("2001:2::1", "benchmarking"),
        ("2001:2:0:ffff::1", "benchmarking"), ("2001:3::1", "anycast"), ("2001:4:112::1", "anycast"),
        ("2001:10::1", "orchid"), ("2001:1f::1", "orchid"), ("2001:20::1", "orchid"), ("2001:2f:ffff::1", "orchid"),
        ("2001:30::1", "reserved"), ("2001:1ff::1", "reserved"), ("2001:db8:ffff::1", "documentation"),
        ("3fff::1", "documentation"), ("3fff:fff:ffff::1", "documentation"), ("2002:808:808::1", "tunnel"),
        ("2620:4f:8000::1", "anycast"), ("5f00::1", "segment-routing"), ("fdff:ffff::1", "private"),
        ("febf:ffff::1", "link-local"), ("ff0e::1", "multicast"),
        // Outside global unicast (2000::/3): reserved by the IETF.
        ("4000::1", "reserved"), ("1000::1", "reserved"), ("e000::1", "reserved"),
        // Public neighbours.
        ("2001:200::1", "allowed"), ("2001:db9::1", "allowed"), ("4000:0::", "reserved"), ("3fff:1000::1", "allowed"),
        ("2620:4f:8001::1", "allowed"), ("2003::1", "allowed"), ("2a00:1450:4001::200e", "allowed"),
    ])
    func everySpecialPurposeBlock(_ host: String, _ expected: String) {
        #expect(Self.verdict(host) == expected, "\(host)")
    }

    /// The tables hold what they say: every block's literal parses, holds its own first address, and that address
    /// is refused (with the block's reason, or a more specific block's listed before it: a typo in a prefix would
    /// make a block that matches nothing).
    @Test func everyBlockRefusesItsOwnAddress() {
        for table in [AddressPolicy.v4Blocks, AddressPolicy.v6Blocks] {
            for block in table {
                #expect(block.bytes.count == 4 || block.bytes.count == 16, "\(block.name)")
                #expect(block.bits > 0 && block.bits <= block.bytes.count * 8, "\(block.name)")
                #expect(block.contains(block.bytes), "\(block.name)")
                let address: IPAddress =
                    block.bytes.count == 4
                    ? .v4(block.bytes.reduce(0) { $0 << 8 | UInt32($1) }) : .v6(block.bytes)
                let first = table.first { $0.contains(block.bytes) }
                #expect(AddressPolicy.classify(address) == first.map { .refused($0.reason) }, "\(block.name)")
            }
        }
    }

    @Test func namesAndExceptions() {
        let p = AddressPolicy()
        #expect(p.check(hostName: "localhost") == .refused("loopback"))
        #expect(p.check(hostName: "LOCALHOST.") == .refused("loopback"))
        #expect(p.check(hostName: "api.localhost") == .refused("loopback"))
        #expect(p.check(hostName: "metadata.google.internal") == .refused("metadata"))
        #expect(p.check(hostName: "cdn.example.com") == .allowed)
        let excepted = AddressPolicy(exceptions: ["10.0.0.7", "127.0.0.1:8443"])
        #expect(excepted.check(.v4(0x0A00_0007)) == .allowed)
        #expect(excepted.check(.v4(0x7F00_0001), port: 8443) == .allowed)
        #expect(excepted.check(.v4(0x7F00_0001), port: 8444) == .refused("loopback"))
        #expect(AddressPolicy(allowAll: true).check(.v4(0x7F00_0001)) == .allowed)
    }
}

/// Names that resolve where the test says.
struct FixedResolver: HostResolver {
    var answers: [String: [IPAddress]]
    func resolve(_ host: String, port: Int) async throws -> [IPAddress] {
        guard let a = answers[host] else { throw FetchFailure.dns(host: host) }
        return a
    }
}

/// Preflight against real HTTP servers on 127.0.0.1: the test server's own endpoint is the only exception to
/// the address rules, so every redirect elsewhere on the machine is refused like anything internal.
@Suite struct MediaPreflightTests {
    static let jpeg = MediaSamples.jpeg(marker: 0xE0) + Array(repeating: 7, count: 4000)
    static let png = ChartRenderer.render(ChartSpec(kind: .line, series: [.init(values: [1, 3, 2])])).png

    static func service(
        routes: [String: MediaRoute],
        deadline: TimeInterval = 15,
        recordRequests: Bool = false
    ) async throws -> (MediaService, String, MediaTestServer) {
        let server = MediaTestServer(routes: routes, recordRequests: recordRequests)
        let port = try await server.start()
        let resolver = FixedResolver(answers: [
            "media.test": [.v4(0x7F00_0001)], "evil.test": [IPAddress(host: "10.0.0.5")!],
            "split.test": [IPAddress(host: "8.8.8.8")!, IPAddress(host: "127.0.0.1")!],
            "meta.test": [IPAddress(host: "::ffff:169.254.169.254")!],
        ])
        let fetcher = try SafeFetcher(
            policy: AddressPolicy(exceptions: ["127.0.0.1:\(port)"]),
            limits: .init(deadline: deadline, allowHTTP: true),
            resolver: resolver
        )
        let store = try MediaStore(
            directory: FileManager.default.temporaryDirectory.appendingPathComponent("media-\(UUID().uuidString)")
        )
        return (
            MediaService(store: store, fetcher: fetcher, publicBase: "https://push.example.com"),
            "http://127.0.0.1:\(port)", server
        )
    }

    @Test func refusals() async throws {
        let big = MediaSamples.jpeg(marker: 0xE0) + Array(repeating: 1, count: 11_000_000)
        let (media, base, server) = try await Self.service(routes: [
            "/missing.jpg": .bytes(Array("no".utf8), contentType: "text/plain", status: 404),
            "/page.jpg": .bytes(
                Array("<!doctype html><html><body>Sign in</body></html>".utf8),
                contentType: "text/html"
            ),
            "/photo.heic": .bytes(
                MediaSamples.ftyp("heic", ["mif1", "heic"]) + Array(repeating: 0, count: 100),
                contentType: "image/heic"
            ),
            "/photo.webp": .bytes(
                MediaSamples.riff("WEBP") + Array(repeating: 0, count: 100),
                contentType: "image/webp"
            ),
            "/huge.jpg": .bytes(big, contentType: "image/jpeg"),
            "/huge-unannounced.jpg": .bytes(big, contentType: "image/jpeg", sendLength: false),
            "/loop": .redirect(to: "/loop"),
            "/to-other-port": .redirect(to: "http://127.0.0.1:1/a.jpg"),
            "/to-metadata": .redirect(to: "http://169.254.169.254/latest/meta-data/"),
            "/to-hex-loopback": .redirect(to: "http://0x7f000001/a.jpg"),
            "/to-ipv6-loopback": .redirect(to: "http://[::1]/a.jpg"),
            "/to-private-name": .redirect(to: "http://evil.test/a.jpg"),
            "/to-ftp": .redirect(to: "ftp://files.example.com/a.jpg"),
        ])
        func rule(_ url: String) async -> String? {
            let r = await media.check(url)
            if r.failure == nil { Issue.record("\(url) passed: \(r.json)") }
            return r.failure?.rule
        }
        #expect(await rule("\(base)/missing.jpg") == "http-status")
        #expect(await rule("\(base)/page.jpg") == "not-media")
        #expect(await rule("\(base)/photo.heic") == "ios-unsupported-type")
        #expect(await rule("\(base)/photo.webp") == "ios-unsupported-type")
        #expect(await rule("\(base)/huge.jpg") == "too-large")
        #expect(await rule("\(base)/huge-unannounced.jpg") == "too-large")
        // A slow drip ends at the deadline, whatever it has sent.
        let (slow, slowBase, slowServer) = try await Self.service(
            routes: ["/drip.jpg": .drip(total: 200_000, chunk: 100, interval: 0.05, contentType: "image/jpeg")],
            deadline: 1.5
        )
        let started = Date()
        #expect(await slow.check("\(slowBase)/drip.jpg").failure?.rule == "timeout")
        // The drip would take 100 s; the bound leaves room for a loaded machine (the whole suite shares two cores).
        #expect(Date().timeIntervalSince(started) < 15)
        try? await slowServer.shutdown()
        #expect(await rule("\(base)/loop") == "redirect-limit")
        #expect(await rule("\(base)/to-ftp") == "scheme")
        for path in ["/to-other-port", "/to-metadata", "/to-hex-loopback", "/to-ipv6-loopback", "/to-private-name"] {
            #expect(await rule(base + path) == "address-refused", "\(path)")
        }
        // Direct URLs in other spellings, and names resolving inside, are refused before any connection.
        for url in [
            "http://2130706433/a.jpg", "http://0177.0.0.1/a.jpg", "http://[::ffff:127.0.0.1]/a.jpg",
            "http://[fe80::1]/a.jpg", "http://10.1.2.3/a.jpg",
            "http://localhost/a.jpg", "http://metadata.google.internal/computeMetadata/v1/", "http://evil.test/a.jpg",
            "http://split.test/a.jpg", "http://meta.test/a.jpg",
        ] {
            #expect(await rule(url) == "address-refused", "\(url)")
        }
        #expect(await media.check("http://nowhere.test/a.jpg").failure?.rule == "dns-failed")
        let refused = await media.check("http://169.254.169.254/latest/meta-data/")
        #expect(refused.failure?.message.contains("metadata") == true)
        try? await server.shutdown()
    }

    @Test func acceptancesAndWhatNeedsRehosting() async throws {
        let (media, base, server) = try await Self.service(routes: [
            "/a.jpg": .bytes(Self.jpeg, contentType: "image/jpeg"),
            "/photo": .bytes(Self.jpeg, contentType: "application/octet-stream"),
            "/chart.jpg": .bytes(Self.png, contentType: "image/png"),
            "/lying.png": .bytes(Self.png, contentType: "image/jpeg"),
            "/hop1": .redirect(to: "/hop2"), "/hop2": .redirect(to: "http://media.test:PORT/a.jpg"),
            "/clip.mp3": .bytes(MediaSamples.id3(then: MediaSamples.mp3Raw), contentType: "audio/mpeg"),
            "/big-for-android.jpg": .bytes(
                MediaSamples.jpeg(marker: 0xE0) + Array(repeating: 1, count: 2_000_000),
                contentType: "image/jpeg"
            ),
        ])
        let ok = await media.check("\(base)/a.jpg")
        #expect(ok.isOK, "\(ok.json)")
        #expect(
            ok.isOK && ok.type == .jpeg && ok.bytes == Self.jpeg.count && ok.rehostReason == nil
                && ok.android == .accepted(.jpeg)
        )
        #expect(await media.check("\(base)/photo").rehostReason == "no-extension")
        #expect(await media.check("\(base)/chart.jpg").rehostReason == "extension-mismatch")
        #expect(await media.check("\(base)/lying.png").rehostReason == "content-type-mismatch")
        let audio = await media.check("\(base)/clip.mp3")
        #expect(audio.isOK && audio.type == .mp3 && audio.android == nil)
        let large = await media.check("\(base)/big-for-android.jpg")
        #expect(
            large.isOK
                && large.android
                    == .refused(.tooLarge(kind: .image, size: large.bytes ?? 0, limit: MediaRules.androidImageLimit))
        )
        try? await server.shutdown()
    }

    /// What the system resolver answers is checked by address: with the name rules off, `localhost` goes through
    /// getaddrinfo and is refused for the loopback address it resolves to, before any connection.
    @Test func namesResolvedByTheSystemAreCheckedByAddress() async throws {
        var policy = AddressPolicy()
        policy.nameRules = false
        let fetcher = try SafeFetcher(policy: policy, limits: .init(deadline: 5, allowHTTP: true))
        do {
            _ = try await fetcher.fetch("http://localhost:9/a.jpg") { _ in 1 << 20 }
            Issue.record("localhost was fetched")
        } catch {
            #expect(error.rule == "address-refused", "\(error)")
            #expect(error.description.contains("loopback"))
        }
        let resolved = try await SystemResolver().resolve("localhost", port: 80)
        #expect(!resolved.isEmpty && resolved.allSatisfy { AddressPolicy.classify($0) == .refused("loopback") })
    }

    @Test func redirectsAreFollowedAndEachHopChecked() async throws {
        let server = MediaTestServer(routes: [
            "/a.jpg": .bytes(Self.jpeg, contentType: "image/jpeg"), "/hop1": .redirect(to: "/hop2"),
            "/hop2": .redirect(to: "/a.jpg"),
        ])
        let port = try await server.start()
        // A generous deadline: the test is about hops, and the default 10 s was missed once beside a release build.
        let fetcher = try SafeFetcher(
            policy: AddressPolicy(exceptions: ["127.0.0.1:\(port)"]),
            limits: .init(deadline: 120, allowHTTP: true),
            resolver: FixedResolver(answers: [:])
        )
        let r = try await fetcher.fetch("http://127.0.0.1:\(port)/hop1") { _ in 1 << 20 }
        #expect(
            r.status == 200 && r.prefix == Array(Self.jpeg.prefix(MediaSniffer.preferredPrefixLength))
                && r.size == Self.jpeg.count && r.redirects.count == 2 && r.address == "127.0.0.1"
        )
        // Outside the sandbox, http is refused.
        let strict = try SafeFetcher(policy: AddressPolicy(exceptions: ["127.0.0.1:\(port)"]))
        await #expect(throws: FetchFailure.scheme("http")) {
            _ = try await strict.fetch("http://127.0.0.1:\(port)/a.jpg") { _ in 1 << 20 }
        }
        try? await server.shutdown()
    }
}

/// Hosting over the API: upload, serving with ETag, Range and HEAD, preflight on send (reject, drop, re-host),
/// and the server-rendered chart.
@Suite struct MediaHostingTests {
    static let admin = "admin-secret-key-0001"

    static func api(
        routes: [String: MediaRoute],
        recordRequests: Bool = false
    ) async throws -> (RichPushAPI, String, MediaTestServer, SQLiteDeliveryQueue, SQLiteServerStore) {
        let (media, base, server) = try await MediaPreflightTests.service(
            routes: routes,
            recordRequests: recordRequests
        )
        let backend = try SQLiteBackend(
            path: FileManager.default.temporaryDirectory.appendingPathComponent("media-api-\(UUID().uuidString).sqlite")
                .path
        )
        let (queue, store) = (backend.sqliteQueue, backend.sqliteStore)
        var api = RichPushAPI(
            backend: backend,
            adminKey: admin,
            validation: .init(allowInsecureMedia: true, requireTargets: false)
        )
        api.media = media
        return (api, base, server, queue, store)
    }

    static func call(
        _ client: any TestClientProtocol,
        _ method: HTTPRequest.Method,
        _ uri: String,
        key: String? = admin,
        headers extra: HTTPFields = [:],
        body: ByteBuffer? = nil
    ) async throws -> (Int, HTTPFields, [UInt8]) {
        var headers = extra
        if let key { headers[.authorization] = "Bearer \(key)" }
        return try await client.execute(uri: uri, method: method, headers: headers, body: body) { r in
            (Int(r.status.code), r.headers, Array(r.body.readableBytesView))
        }
    }

    @Test func uploadedMediaIsServedImmutableWithRangesAndHead() async throws {
        let (api, _, server, _, _) = try await Self.api(routes: [:])
        let jpeg = MediaPreflightTests.jpeg
        try await Application(router: api.router()).test(.router) { client in
            let (s, _, body) = try await Self.call(client, .post, "/v1/media", body: ByteBuffer(bytes: jpeg))
            let answer = try JSONValue.parse(body)
            #expect(s == 201 && answer["type"] == "jpeg" && answer["ios"] == "ok", "\(answer)")
            let url = try #require(answer["url"]?.stringValue)
            let path = String(url.dropFirst("https://push.example.com".count))
            #expect(path.hasPrefix("/media/") && path.hasSuffix(".jpg"))
            let (g, h, bytes) = try await Self.call(client, .get, path, key: nil)
            #expect(g == 200 && bytes == jpeg)
            #expect(
                h[.contentType] == "image/jpeg" && h[.cacheControl] == "public, max-age=31536000, immutable"
                    && h[.acceptRanges] == "bytes"
            )
            let etag = try #require(h[.eTag])
            #expect(etag.hasPrefix("\"") && etag.count == 66)
            let (notModified, _, _) = try await Self.call(client, .get, path, key: nil, headers: [.ifNoneMatch: etag])
            #expect(notModified == 304)
            let (partial, ph, part) = try await Self.call(
                client,
                .get,
                path,
                key: nil,
                headers: [.range: "bytes=10-19"]
            )
            #expect(partial == 206 && part == Array(jpeg[10...19]) && ph[.contentRange] == "bytes 10-19/\(jpeg.count)")
            let (_, _, tail) = try await Self.call(client, .get, path, key: nil, headers: [.range: "bytes=-5"])
            #expect(tail == Array(jpeg.suffix(5)))
            let (unsatisfiable, uh, _) = try await Self.call(
                client,
                .get,
                path,
                key: nil,
                headers: [.range: "bytes=999999-"]
            )
            #expect(unsatisfiable == 416 && uh[.contentRange] == "bytes */\(jpeg.count)")
            let (stale, _, whole) = try await Self.call(
                client,
                .get,
                path,
                key: nil,
                headers: [.range: "bytes=0-3", .ifRange: "\"other\""]
            )
            #expect(stale == 200 && whole == jpeg)
            let (headStatus, hh, headBody) = try await Self.call(client, .head, path, key: nil)
            #expect(headStatus == 200 && headBody.isEmpty && hh[.contentLength] == String(jpeg.count))
            #expect(
                try await Self.call(client, .get, "/media/" + String(repeating: "0", count: 64) + ".jpg", key: nil).0
                    == 404
            )
            #expect(try await Self.call(client, .get, "/media/..%2F..%2Fetc%2Fpasswd", key: nil).0 == 404)
            #expect(try await Self.call(client, .post, "/v1/media", key: nil, body: ByteBuffer(bytes: jpeg)).0 == 401)
            #expect(try await Self.call(client, .post, "/v1/media", body: ByteBuffer(string: "<html></html>")).0 == 422)
        }
        try? await server.shutdown()
    }

    /// Media the memory cache does not hold (too large for it, or evicted) is read from disk by the router when the
    /// fast path is not in place (as here, with no socket): streamed in chunks, with the same bytes, ranges and
    /// HEAD as from memory; HEAD and 304 read nothing, and serving puts nothing into memory to stay.
    @Test func mediaNotInTheCacheIsReadFromDiskWithRangesAndHead() async throws {
        let (api, _, server, _, _) = try await Self.api(routes: [:])
        let store = try #require(api.media?.store)
        // 3 MB of a PNG's start and noise: more than one chunk of the stream, stored but dropped from the cache.
        var filling = MediaPreflightTests.png
        var r = SeededRandom(seed: 7)
        while filling.count < 3 << 20 { filling.append(UInt8(truncatingIfNeeded: r.next())) }
        let bytes = filling
        let item = try store.put(bytes, type: .png)
        store.cache.remove(item.name)
        let path = "/media/" + item.name
        try await Application(router: api.router()).test(.router) { client in
            let (g, h, body) = try await Self.call(client, .get, path, key: nil)
            #expect(g == 200 && body == bytes && h[.contentLength] == String(bytes.count))
            #expect(h[.contentType] == "image/png" && h[.eTag] != nil && h[.acceptRanges] == "bytes")
            #expect(h[HTTPField.Name("Content-Security-Policy")!] == "sandbox; default-src 'none'")
            let (partial, ph, part) = try await Self.call(
                client,
                .get,
                path,
                key: nil,
                headers: [.range: "bytes=100000-2200000"]
            )
            #expect(partial == 206 && part == Array(bytes[100_000...2_200_000]))
            #expect(ph[.contentRange] == "bytes 100000-2200000/\(bytes.count)")
            let (headStatus, hh, headBody) = try await Self.call(client, .head, path, key: nil)
            #expect(headStatus == 200 && headBody.isEmpty && hh[.contentLength] == String(bytes.count))
            let (notModified, _, nothing) = try await Self.call(
                client,
                .get,
                path,
                key: nil,
                headers: [.ifNoneMatch: try #require(h[.eTag])]
            )
            #expect(notModified == 304 && nothing.isEmpty)
        }
        #expect(store.cached(item.name) == nil && store.cache.used == 0)
        try? await server.shutdown()
    }

    @Test func sendsArePreflightedRejectedDroppedOrRehosted() async throws {
        let (api, base, server, _, store) = try await Self.api(routes: [
            "/missing.jpg": .bytes(Array("no".utf8), contentType: "text/plain", status: 404),
            "/photo": .bytes(MediaPreflightTests.jpeg, contentType: "application/octet-stream"),
        ])
        try await Application(router: api.router()).test(.router) { client in
            let (_, _, createdBody) = try await Self.call(
                client,
                .post,
                "/v1/apps",
                body: ByteBuffer(bytes: (["name": "Shop", "bundle_id": "com.example.app"] as JSONValue).serialized())
            )
            let created = try JSONValue.parse(createdBody)
            let app = try #require(created["app"]?["id"]?.stringValue)
            let key = try #require(created["api_key"]?.stringValue)
            func send(_ m: JSONValue) async throws -> (Int, JSONValue) {
                let (s, _, b) = try await Self.call(
                    client,
                    .post,
                    "/v1/apps/\(app)/notifications",
                    key: key,
                    body: ByteBuffer(bytes: m.serialized())
                )
                return (s, try JSONValue.parse(b))
            }
            let target: JSONValue = ["fcm_tokens": ["fcm-1"]]
            let (rejected, why) = try await send([
                "title": "x", "media": .string("\(base)/missing.jpg"), "audience": target,
            ])
            #expect(rejected == 422 && why["error"]?["code"] == "media-refused")
            #expect(
                why["error"]?["issues"]?.arrayValue?.first?["path"] == "media[0].url"
                    && why["error"]?["issues"]?.arrayValue?.first?["rule"] == "http-status"
            )
            let (dropped, dropBody) = try await send([
                "title": "x", "media": .string("\(base)/missing.jpg"), "audience": target, "media_check": "drop",
            ])
            #expect(dropped == 202)
            let droppedMessage = try #require(try await store.notification(id: dropBody["id"]!.stringValue!)?.message)
            #expect(droppedMessage["media"] == nil)
            // A URL without an extension is re-hosted and the stored message points at the hosted copy.
            let (moved, movedBody) = try await send([
                "title": "x", "media": .string("\(base)/photo"), "audience": target,
            ])
            #expect(moved == 202 && movedBody["warnings"]?.arrayValue?.contains { $0["rule"] == "rehosted" } == true)
            let stored = try #require(try await store.message(id: movedBody["id"]!.stringValue!))
            let hosted = try #require(stored.media.first?.url)
            #expect(hosted.hasPrefix("https://push.example.com/media/") && hosted.hasSuffix(".jpg"))
            let (g, _, bytes) = try await Self.call(
                client,
                .get,
                String(hosted.dropFirst("https://push.example.com".count)),
                key: nil
            )
            #expect(g == 200 && bytes == MediaPreflightTests.jpeg)
            // The chart gets a PNG from the device's renderer, used as the FCM image.
            let chart: JSONValue = ["type": "line", "values": [1, 4, 2, 8], "title": "Sales"]
            let (charted, chartBody) = try await send(["title": "x", "chart": chart, "audience": target])
            #expect(charted == 202)
            let withChart = try #require(try await store.message(id: chartBody["id"]!.stringValue!))
            let chartURL = try #require(withChart.chartImageURL)
            let (_, _, png) = try await Self.call(
                client,
                .get,
                String(chartURL.dropFirst("https://push.example.com".count)),
                key: nil
            )
            #expect(png == ChartRenderer.render(try #require(withChart.chart)).png)
            let fcm = FCMRenderer(projectID: "p").render(withChart, to: .token("fcm-1")).body
            #expect(fcm["message"]?["android"]?["notification"]?["image"] == .string(chartURL))
            // The check route answers per URL.
            let (c, _, checkBody) = try await Self.call(
                client,
                .post,
                "/v1/media/check",
                key: key,
                body: ByteBuffer(
                    bytes: (["media": [.string("\(base)/photo"), .string("\(base)/missing.jpg")]] as JSONValue)
                        .serialized()
                )
            )
            let results = try JSONValue.parse(checkBody)
            #expect(
                c == 200 && results["ok"] == false && results["results"]?.arrayValue?.map { $0["ok"] } == [true, false]
            )
        }
        try? await server.shutdown()
    }
}

/// The answers a media server gives are input from outside: a seeded run of random answers (status, type, length
/// told or not, bodies that are media or noise, empty, cut off, over the limit, behind redirects) through the
/// streaming preflight. Each ends in a verdict; what passes has the size that was served, and a body kept for
/// re-hosting is exactly the bytes served; nothing is left in the store's upload folder.
@Suite struct PreflightRandomAnswerTests {
    @Test func randomAnswersEndInAVerdictAndKeepExactlyTheBytesServed() async throws {
        var rng = SeededRandom(seed: 0x5EED_0012)
        let heads: [[UInt8]] = [
            MediaSamples.jpeg(marker: 0xE0), MediaSamples.png, MediaSamples.gif89, MediaSamples.ftyp("isom", ["mp41"]),
            MediaSamples.riff("WEBP"), MediaSamples.riff("WAVE"), Array("<html>".utf8), Array("{\"a\":1}".utf8), [],
        ]
        let types: [String?] = [
            nil, "image/jpeg", "image/png", "video/mp4", "text/html", "application/octet-stream", "image/*;;", "\u{7F}",
        ]
        var routes: [String: MediaRoute] = [:]
        var served: [String: [UInt8]] = [:]
        for i in 0..<120 {
            let head = heads.randomElement(using: &rng)!
            let tailSize = [0, 1, 63, 1023, 4097, 70_000, 300_000].randomElement(using: &rng)!
            let body = head + (0..<tailSize).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let status = [200, 200, 200, 200, 204, 206, 404, 500, 302].randomElement(using: &rng)!
            let path = "/r\(i)" + (["", ".jpg", ".png", ".mp4", ".gif"].randomElement(using: &rng)!)
            switch Int.random(in: 0..<10, using: &rng) {
            case 0:
                routes[path] = .reset(
                    declared: body.count + 100,
                    sent: Array(body.prefix(body.count / 2)),
                    contentType: types.randomElement(using: &rng)!
                )
            case 1:
                routes[path] = .redirect(to: path + "-target")
                routes[path + "-target"] = .bytes(body, contentType: types.randomElement(using: &rng)!)
                served[path] = body
            default:
                routes[path] = .bytes(
                    body,
                    contentType: types.randomElement(using: &rng)!,
                    status: status,
                    sendLength: Bool.random(using: &rng)
                )
                if status == 200 || status == 206 { served[path] = body }
            }
        }
        let (media, base, server) = try await MediaPreflightTests.service(routes: routes)
        var verdicts: [String: Int] = [:]
        for path in routes.keys.sorted() where !path.hasSuffix("-target") {
            let r = await media.check(base + path, keepBody: true)
            verdicts[r.failure?.rule ?? "ok", default: 0] += 1
            guard r.isOK else {
                #expect(r.upload == nil, "\(path): a refused answer keeps no file")
                continue
            }
            let body = try #require(served[path], "\(path) passed without a body served: \(r.json)")
            #expect(r.bytes == body.count, "\(path)")
            let upload = try #require(r.upload, "\(path): the bytes were not kept")
            #expect(upload.size == body.count)
            let item = try media.store.finish(upload, type: try #require(r.type))
            let stored = try Data(contentsOf: URL(fileURLWithPath: try #require(media.store.file(item.name)).path))
            #expect(Array(stored) == body, "\(path): the kept file is not the bytes served")
        }
        try? await server.shutdown()
        let left =
            (try? FileManager.default.contentsOfDirectory(
                atPath: media.store.directory.appendingPathComponent("up").path
            )) ?? []
        #expect(left.isEmpty, "upload files left behind: \(left)")
        #expect(verdicts["ok", default: 0] > 10 && verdicts.count > 4, "\(verdicts)")
        print("preflight random answers: \(verdicts.sorted { $0.key < $1.key })")
    }
}
