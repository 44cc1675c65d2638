import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import RichPushCore

#if canImport(Glibc)
import Glibc
#endif

/// Turns a host name into addresses. The system resolver by default; tests give their own.
public protocol HostResolver: Sendable {
    func resolve(_ host: String, port: Int) async throws -> [IPAddress]
}

/// Why a fetch of a user-supplied URL failed; `rule` is stable (API answers and metrics).
public enum FetchFailure: Error, Sendable, Hashable, CustomStringConvertible {
    case invalidURL(String)
    /// The URL breaks a rule of ``MediaURL`` (the rule is its own: `url-user-info`, `url-host`…).
    case refusedURL(MediaURL.Problem)
    case scheme(String)
    case refusedAddress(host: String, address: String, reason: String)
    case dns(host: String)
    /// The lookup took longer than the resolver waits (the answer, when it comes, is kept for the next lookup).
    case dnsTimeout(host: String, seconds: Double)
    case connect(String)
    case timeout(seconds: Double)
    case redirectLimit(Int)
    case redirectInvalid(String)
    case tooLarge(limit: Int)
    case protocolError(String)

    public var rule: String {
        switch self {
        case .invalidURL: return "url"
        case .refusedURL(let p): return p.code
        case .scheme: return "scheme"
        case .refusedAddress: return "address-refused"
        case .dns, .dnsTimeout: return "dns-failed"
        case .connect: return "connect-failed"
        case .timeout: return "timeout"
        case .redirectLimit: return "redirect-limit"
        case .redirectInvalid: return "redirect-invalid"
        case .tooLarge: return "too-large"
        case .protocolError: return "http-error"
        }
    }

    public var description: String {
        switch self {
        case .invalidURL(let u): return "not a usable URL: \(u)"
        case .refusedURL(let p): return p.message
        case .scheme(let s):
            return "the scheme '\(s)' is not allowed (https\(s == "http" ? " only outside the sandbox" : ""))"
        case let .refusedAddress(host, address, reason): return "\(host) is \(address), a \(reason) address: refused"
        case .dns(let h): return "\(h) does not resolve"
        case let .dnsTimeout(h, s): return "\(h) did not resolve within \(s) s"
        case .connect(let e): return "could not connect: \(e)"
        case .timeout(let s): return "no complete answer within \(s) s"
        case .redirectLimit(let n): return "more than \(n) redirects"
        case .redirectInvalid(let l): return "a redirect to an unusable location: \(l)"
        case .tooLarge(let limit): return "larger than \(limit) bytes"
        case .protocolError(let e): return "the HTTP answer could not be read: \(e)"
        }
    }
}

/// Where a fetched body goes as it arrives (a file being written), so that no fetch holds a whole body in
/// memory. `restart()` comes before each answer's body: an attempt cut short at one address leaves nothing behind
/// when the next address answers.
public protocol FetchSink: AnyObject, Sendable {
    func restart() throws
    func append(_ buffer: ByteBuffer) throws
}

/// A fetched URL: the final status and headers, the first bytes of the body and its size (the whole body went
/// to the sink, when there was one).
public struct FetchedResource: Sendable {
    public var finalURL: URL
    public var status: Int
    public var contentType: String?
    public var contentLength: Int?
    /// The body's first bytes, as many as the sniffer wants (`MediaSniffer.preferredPrefixLength`).
    public var prefix: [UInt8]
    /// The body's size.
    public var size: Int
    /// The redirects followed, in order.
    public var redirects: [String]
    /// The address the final answer came from.
    public var address: String
}

/// Fetches user-supplied URLs without letting them reach inside the network: every host is resolved first and
/// each address checked by the ``AddressPolicy`` (every spelling of loopback, private, link-local, metadata…),
/// the connection goes to the checked address itself (no second lookup to rebind), and each redirect is checked
/// the same way. Bounded redirects, one deadline for the whole fetch (a slow drip ends with `timeout`), and a
/// byte cap decided by a closure once the first bytes are seen.
public final class SafeFetcher: Sendable {
    public struct Limits: Sendable {
        public var maxRedirects = 5
        public var connectTimeout: TimeAmount = .seconds(5)
        /// For the whole fetch, redirects included.
        public var deadline: TimeInterval = 10
        public var allowHTTP = false
        public init(maxRedirects: Int = 5, deadline: TimeInterval = 10, allowHTTP: Bool = false) {
            self.maxRedirects = maxRedirects
            self.deadline = deadline
            self.allowHTTP = allowHTTP
        }
    }

    public let policy: AddressPolicy
    public let limits: Limits
    let resolver: HostResolver
    let group: EventLoopGroup
    let tls: NIOSSLContext

    public init(
        policy: AddressPolicy,
        limits: Limits = .init(),
        resolver: HostResolver = SystemResolver(),
        group: EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        extraTrustRootsPEM: String? = nil
    ) throws {
        self.policy = policy
        self.limits = limits
        self.resolver = resolver
        self.group = group
        var config = TLSConfiguration.makeClientConfiguration()
        if let pem = extraTrustRootsPEM {
            config.additionalTrustRoots = [.certificates(try NIOSSLCertificate.fromPEMBytes(Array(pem.utf8)))]
        }
        tls = try NIOSSLContext(configuration: config)
    }

    /// GETs `url`, following redirects. `cap` gives the most bytes to read once the first bytes (up to 64) are
    /// known; more is `tooLarge`. A non-2xx final status is returned, not thrown.
    /// The body streams into `sink` when one is given; only its first bytes are held in memory either way.
    public func fetch(
        _ url: String,
        into sink: (any FetchSink)? = nil,
        cap: @escaping @Sendable (_ firstBytes: [UInt8]) -> Int
    ) async throws(FetchFailure) -> FetchedResource {
        let deadline = limits.deadline
        let start: MediaURL
        do { start = try MediaURL(url) } catch { throw .refusedURL(error) }
        do {
            return try await withThrowingTaskGroup(of: FetchedResource.self) { group in
                group.addTask { try await self.follow(start, sink: sink, cap: cap) }
                group.addTask {
                    try await Task.sleep(nanoseconds: UInt64(deadline * 1e9))
                    throw FetchFailure.timeout(seconds: deadline)
                }
                defer { group.cancelAll() }
                return try await group.next()!
            }
        } catch let f as FetchFailure {
            throw f
        } catch is CancellationError {
            throw .timeout(seconds: deadline)
        } catch {
            throw .protocolError("\(error)")
        }
    }

    func follow(
        _ start: MediaURL,
        sink: (any FetchSink)?,
        cap: @escaping @Sendable ([UInt8]) -> Int
    ) async throws -> FetchedResource {
        var url = start
        var redirects: [String] = []
        while true {
            var r = try await once(url, sink: sink, cap: cap)
            if (300...399).contains(r.status), r.status != 304 {
                guard redirects.count < limits.maxRedirects else {
                    throw FetchFailure.redirectLimit(limits.maxRedirects)
                }
                // The next URL is read as the first was: the same rules, the same normalized form.
                guard let location = r.redirectLocation,
                    let absolute = URL(string: location, relativeTo: url.url)?.absoluteURL.absoluteString
                else {
                    throw FetchFailure.redirectInvalid(r.redirectLocation ?? "(no Location)")
                }
                do { url = try MediaURL(absolute) } catch {
                    if error.rule == .scheme {
                        throw FetchFailure.scheme(absolute.prefix { $0 != ":" }.prefix(32).lowercased())
                    }
                    throw FetchFailure.redirectInvalid("\(location.prefix(200)): \(error.message)")
                }
                redirects.append(url.fetched)
                continue
            }
            r.resource.redirects = redirects
            return r.resource
        }
    }

    struct Answer {
        var resource: FetchedResource
        var redirectLocation: String?
        var status: Int { resource.status }
    }

    /// One request to one URL, at a checked address.
    func once(_ url: MediaURL, sink: (any FetchSink)?, cap: @escaping @Sendable ([UInt8]) -> Int) async throws -> Answer
    {
        let scheme = url.scheme
        guard scheme == "https" || (scheme == "http" && limits.allowHTTP) else { throw FetchFailure.scheme(scheme) }
        // The rules judge the name without its trailing dot; the resolver is asked for it as written (an absolute
        // name: no search domain is tried).
        let host = url.hostName
        let port = url.effectivePort
        // The host: an address in some spelling, or a name to resolve; every address is checked.
        let addresses: [IPAddress]
        let literal = IPAddress(host: host)
        if let literal {
            addresses = [literal]
        } else {
            if case .refused(let why) = policy.check(hostName: host) {
                throw FetchFailure.refusedAddress(host: host, address: host, reason: why)
            }
            addresses = try await resolver.resolve(url.resolvedName, port: port)
            guard !addresses.isEmpty else { throw FetchFailure.dns(host: url.resolvedName) }
        }
        // One refused address refuses the name: a name that answers both ways is not trusted with either.
        for a in addresses {
            if case .refused(let why) = policy.check(a, port: port) {
                throw FetchFailure.refusedAddress(host: host, address: a.description, reason: why)
            }
        }
        var lastError = "no address"
        for a in addresses {
            let socket: SocketAddress
            do {
                switch a {
                case .v4: socket = try SocketAddress(ipAddress: a.description, port: port)
                case .v6: socket = try SocketAddress(ipAddress: a.description, port: port)
                }
            } catch { continue }
            do {
                return try await request(
                    url,
                    literal: literal != nil,
                    socket: socket,
                    sink: sink,
                    cap: cap,
                    address: a.description
                )
            } catch let f as FetchFailure {
                throw f
            } catch is CancellationError {
                throw CancellationError()
            } catch {
                lastError = "\(error)"
            }
        }
        throw FetchFailure.connect(lastError)
    }

    func request(
        _ url: MediaURL,
        literal: Bool,
        socket: SocketAddress,
        sink: (any FetchSink)?,
        cap: @escaping @Sendable ([UInt8]) -> Int,
        address: String
    ) async throws -> Answer {
        let context = tls
        let useTLS = url.scheme == "https"
        // TLS names the host without a trailing dot (RFC 6066 §3), and the certificate is checked against that name.
        let serverName = url.hostName
        let channel = try await ClientBootstrap(group: group)
            .connectTimeout(limits.connectTimeout)
            .connect(to: socket) { channel in
                channel.eventLoop.makeCompletedFuture {
                    if useTLS {
                        try channel.pipeline.syncOperations.addHandler(
                            try NIOSSLClientHandler(context: context, serverHostname: literal ? nil : serverName)
                        )
                    }
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    return try NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>(
                        wrappingChannelSynchronously: channel
                    )
                }
            }
        // The path and query exactly as written (a signed URL's percent-encoding untouched).
        var reading = AnswerReading(finalURL: url.url, address: address, sink: sink, cap: cap)
        return try await channel.executeThenClose { inbound, outbound in
            var head = HTTPRequestHead(version: .http1_1, method: .GET, uri: url.target)
            head.headers = [
                "Host": url.authority, "User-Agent": "RichPush-Preflight/1", "Accept": "*/*",
                "Accept-Encoding": "identity", "Connection": "close",
            ]
            // Head and end in one write; a server that answers and closes as soon as it has the head may make the
            // write fail, and its answer is still there to read. Without an answer, the write's failure is the cause.
            var writeFailure: (any Error)?
            do { try await outbound.write(contentsOf: [.head(head), .end(nil)]) } catch { writeFailure = error }
            for try await part in inbound {
                switch part {
                case .head(let h): if let redirect = reading.head(h) { return redirect }
                case .body(let buffer): try reading.body(buffer)
                case .end: return try reading.end()
                }
            }
            if !reading.started, let writeFailure {
                throw FetchFailure.protocolError("the request could not be written: \(writeFailure)")
            }
            throw FetchFailure.protocolError("the connection closed before the answer ended")
        }
    }
}

/// What a fetch has read of one answer: its status and headers, the body's first bytes (for the sniffer), its size
/// so far against the cap its first bytes set, the body given to the sink as it comes.
struct AnswerReading {
    let finalURL: URL
    let address: String
    let sink: (any FetchSink)?
    let cap: @Sendable ([UInt8]) -> Int
    var status = 0
    var headers = HTTPHeaders()
    var prefix: [UInt8] = []
    var size = 0
    var limit: Int?
    /// Whether a body has begun (the sink restarted for it).
    var started = false

    /// The declared length, when it is a length (digits only, within `Int`).
    var contentLength: Int? { headers.first(name: "content-length").flatMap { Int($0) }.flatMap { $0 >= 0 ? $0 : nil } }

    /// Takes the head; a redirect is the answer at once.
    mutating func head(_ h: HTTPResponseHead) -> SafeFetcher.Answer? {
        status = Int(h.status.code)
        headers = h.headers
        guard (300...399).contains(status) else { return nil }
        return SafeFetcher.Answer(resource: resource(kept: false), redirectLocation: headers.first(name: "location"))
    }

    /// Takes a part of the body of a success (an error page is not kept), within the caps.
    mutating func body(_ buffer: ByteBuffer) throws {
        guard (200...299).contains(status) else { return }
        if !started {
            try sink?.restart()
            started = true
        }
        size += buffer.readableBytes
        if prefix.count < MediaSniffer.preferredPrefixLength {
            let more = min(buffer.readableBytes, MediaSniffer.preferredPrefixLength - prefix.count)
            prefix += buffer.getBytes(at: buffer.readerIndex, length: more) ?? []
        }
        if limit == nil && prefix.count >= 64 { limit = cap(Array(prefix.prefix(64))) }
        if let limit, size > limit { throw FetchFailure.tooLarge(limit: limit) }
        // A declared length over the cap ends the fetch before the rest is read.
        if let limit, let declared = contentLength, declared > limit { throw FetchFailure.tooLarge(limit: limit) }
        if size > MediaRules.largestAppleLimit { throw FetchFailure.tooLarge(limit: MediaRules.largestAppleLimit) }
        try sink?.append(buffer)
    }

    /// The answer, once it ended within its cap.
    func end() throws -> SafeFetcher.Answer {
        if let limit = limit ?? (prefix.isEmpty ? nil : cap(prefix)), size > limit {
            throw FetchFailure.tooLarge(limit: limit)
        }
        return SafeFetcher.Answer(resource: resource(kept: true), redirectLocation: nil)
    }

    /// What was read; a redirect keeps nothing of its answer.
    func resource(kept: Bool) -> FetchedResource {
        FetchedResource(
            finalURL: finalURL,
            status: status,
            contentType: kept ? headers.first(name: "content-type") : nil,
            contentLength: kept ? contentLength : nil,
            prefix: kept ? prefix : [],
            size: kept ? size : 0,
            redirects: [],
            address: address
        )
    }
}
