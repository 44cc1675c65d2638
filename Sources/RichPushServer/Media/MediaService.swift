import Crypto
import Foundation
import Logging
import NIOConcurrencyHelpers
import RichPushCharts
import RichPushCore

/// What the server found when it fetched one piece of media.
public struct MediaCheck: Sendable {
    /// The URL as the sender wrote it.
    public var url: String
    /// The URL fetched (``MediaURL/fetched``), when it differs from `url`.
    public var fetched: String?
    /// Why it cannot be sent: a stable rule and a sentence.
    public var failure: (rule: String, message: String)?
    public var type: MediaType?
    public var bytes: Int?
    public var ios: MediaVerdict?
    public var android: MediaVerdict?
    /// Why the URL should be re-hosted (no extension, an extension or Content-Type that lies), if it should.
    public var rehostReason: String?
    /// The hosted URL when the media was re-hosted.
    public var hostedURL: String?
    /// The bytes in a file of the store's, kept for re-hosting (never cached; discarded when not re-hosted).
    var upload: MediaStore.Upload?

    public var isOK: Bool { failure == nil }

    public var json: JSONValue {
        var o: [String: JSONValue] = ["url": .string(url), "ok": .bool(isOK)]
        if let f = fetched { o["fetched"] = .string(f) }
        if let f = failure {
            o["rule"] = .string(f.rule)
            o["message"] = .string(f.message)
        }
        if let t = type {
            o["type"] = .string(t.rawValue)
            o["mime_type"] = .string(t.mimeType)
        }
        if let b = bytes { o["bytes"] = .int(Int64(b)) }
        func verdict(_ v: MediaVerdict?) -> JSONValue {
            switch v {
            case .accepted?: return "ok"
            case .refused(let r)?: return ["rule": .string(r.code), "message": .string(r.description)]
            case nil: return .null
            }
        }
        o["ios"] = verdict(ios)
        o["android"] = verdict(android)
        if let r = rehostReason { o["rehost_reason"] = .string(r) }
        if let h = hostedURL { o["hosted_url"] = .string(h) }
        return .object(o)
    }
}

/// Preflight, hosting and server-side charts. Before a push with media goes out, each URL is fetched once through
/// the ``SafeFetcher`` and judged from its bytes by the core's rules (Apple's types and limits, Android's);
/// media whose URL has no usable extension or lies about its type is re-hosted at a content-addressed URL on
/// this server; a chart gets a PNG rendered by the same renderer as the device, for FCM/Android and the web.
public final class MediaService: Sendable {
    /// What to do with media that fails the check.
    public enum OnFailure: String, Sendable { case reject, drop, off }
    /// When to re-host: when needed (the URL hides or misstates the type), always (spike shaping), never.
    public enum Rehost: String, Sendable { case auto, always, never }

    public let store: MediaStore
    let fetcher: SafeFetcher
    private let base: NIOLockedValueBox<(url: String, hostedPrefix: String)>
    /// Recent verdicts by URL, each with the moment it stops being trusted: a bounded LRU, so a flood of new URLs
    /// pushes out old verdicts one at a time.
    private let checks = NIOLockedValueBox(LRU<(MediaCheck, until: Date)>(capacity: 10_000))
    private let charts = NIOLockedValueBox<[String: MediaStore.Item]>([:])
    private let parsedURLs = NIOLockedValueBox(LRU<MediaURL>(capacity: MediaService.parsedKept))
    /// How long a successful check is trusted for later sends of the same URL.
    let checkLifetime: TimeInterval
    /// How long a failed check is answered again without fetching (a URL asked for again and again while it
    /// fails costs one fetch in this time, not one each).
    let failureLifetime: TimeInterval
    let logger: Logger

    public init(
        store: MediaStore,
        fetcher: SafeFetcher,
        publicBase: String,
        checkLifetime: TimeInterval = 600,
        failureLifetime: TimeInterval = 30,
        logger: Logger = Logger(label: "richpush.media")
    ) {
        self.logger = logger
        self.store = store
        self.fetcher = fetcher
        base = NIOLockedValueBox((publicBase, Self.hostedPrefix(of: publicBase)))
        self.checkLifetime = checkLifetime
        self.failureLifetime = failureLifetime
    }

    /// The address devices reach this server at (known once it listens).
    public var publicBase: String {
        get { base.withLockedValue { $0.url } }
        set { base.withLockedValue { $0 = (newValue, Self.hostedPrefix(of: newValue)) } }
    }

    /// What the comparison key of every URL of this server's hosted media begins with (worked out once: it was
    /// parsed again for every URL of every request: 14.6 % of a PostgreSQL node's CPU under `cluster.sh`).
    static func hostedPrefix(of publicBase: String) -> String {
        let key = (try? MediaURL(publicBase))?.comparisonKey ?? publicBase
        return (key.hasSuffix("/") ? String(key.dropLast()) : key) + "/media/"
    }

    public func url(for item: MediaStore.Item) -> String { publicBase + "/media/" + item.name }

    /// The stored name behind a URL on this server, if it is one (in any spelling of it).
    func hostedName(_ url: String) -> String? { hostedName(key: (try? parsed(url))?.comparisonKey ?? url) }

    /// The stored name behind a URL already read, if it is one of this server's.
    func hostedName(of target: MediaURL) -> String? { hostedName(key: target.comparisonKey) }

    private func hostedName(key: String) -> String? {
        let prefix = base.withLockedValue { $0.hostedPrefix }
        guard key.hasPrefix(prefix) else { return nil }
        let name = String(key.dropFirst(prefix.count))
        return MediaStore.parse(name) != nil ? name : nil
    }

    /// A media URL as ``MediaURL`` reads it, remembered by its written form: a send's URL is read by its quota
    /// count, its check and its keeping, and the same URL by request after request (a campaign's picture). Reading
    /// one (its Foundation URL above all) was about a fifth of a PostgreSQL node's CPU under `cluster.sh`. The
    /// ``parsedKept`` most recently used are kept, so a flood of distinct URLs costs bounded memory.
    func parsed(_ url: String) throws(MediaURL.Problem) -> MediaURL {
        if let hit = parsedURLs.withLockedValue({ $0.get(url) }) { return hit }
        let read = try MediaURL(url)
        parsedURLs.withLockedValue { $0.set(url, read) }
        return read
    }

    static let parsedKept = 1024

    /// Checks one URL (a kind hint picks the limit for bytes that do not say what they are); `keepBody` keeps the
    /// bytes for re-hosting.
    public func check(_ url: String, kind: MediaKind? = nil, keepBody: Bool = false) async -> MediaCheck {
        await check(url, kind: kind, rehost: keepBody ? .always : .never)
    }

    /// The kept verdict under `key` (a URL's ``MediaURL/comparisonKey``) when it answers without a fetch: a failure
    /// always; a success unless its bytes are wanted to re-host it (always, or when the verdict gave a reason to).
    func keptVerdict(_ key: String, rehost: Rehost) -> MediaCheck? {
        guard let (hit, until) = checks.withLockedValue({ $0.get(key) }), Date() < until else { return nil }
        let bytesWanted = hit.isOK && (rehost == .always || (rehost == .auto && hit.rehostReason != nil))
        return bytesWanted ? nil : hit
    }

    /// Whether checking `url` fetches it from another server: not for a URL ``MediaURL`` refuses (never fetched),
    /// this server's own hosted media (read from its store, content-addressed), nor a URL whose kept verdict
    /// answers. What a fetch quota counts.
    func needsFetch(_ url: String, rehost: Rehost) -> Bool {
        guard let target = try? parsed(url) else { return false }
        return hostedName(of: target) == nil && keptVerdict(target.comparisonKey, rehost: rehost) == nil
    }

    /// How many of a message's media a ``prepare(_:onFailure:rehost:)`` fetches from other servers.
    public func fetchesNeeded(_ message: PushMessage, onFailure: OnFailure, rehost: Rehost) -> Int {
        guard onFailure != .off || rehost == .always else { return 0 }
        return message.media.filter { needsFetch($0.url, rehost: rehost) }.count
    }

    /// Checks one URL, keeping the bytes when `rehost` may want them. The URL is read by ``MediaURL`` first: one it
    /// refuses is answered with its rule and never fetched; another is fetched in its normalized form, and two
    /// spellings of one URL share a verdict.
    func check(_ url: String, kind: MediaKind?, rehost: Rehost) async -> MediaCheck {
        var result = MediaCheck(url: url)
        let target: MediaURL
        do { target = try parsed(url) } catch {
            result.failure = (error.code, error.message)
            return result
        }
        if target.isRewritten { result.fetched = target.fetched }
        if let name = hostedName(of: target), await store.materialize(name), let (buffer, type) = store.get(name) {
            result.type = type
            result.bytes = buffer.readableBytes
            judge(&result)
            return result
        }
        let key = target.comparisonKey
        // A success is enough when the bytes are not wanted; a failure is the answer either way.
        if var hit = keptVerdict(key, rehost: rehost) {
            (hit.url, hit.fetched) = (result.url, result.fetched)
            return hit
        }
        let keepBody = rehost != .never
        // Whatever the verdict, it is kept (read at the return, whichever return it is).
        defer { remember(result, for: key) }
        // Bytes that may be re-hosted stream into a file of the store's, never into memory.
        var upload: MediaStore.Upload?
        if keepBody {
            do { upload = try store.beginUpload() } catch {
                logger.warning(
                    "media preflight: no file to keep the bytes in, so they cannot be re-hosted",
                    metadata: ["error": "\(error)"]
                )
            }
        }
        do {
            let fetched = try await fetcher.fetch(target.fetched, into: upload) { first in
                if let t = MediaSniffer.sniff(first), let k = t.kind { return MediaRules.appleLimit(for: k) }
                return kind.map(MediaRules.appleLimit(for:)) ?? MediaRules.appleImageLimit
            }
            read(fetched, target: target, into: &result)
            // Only what may be sent is kept: a type or size Apple refuses is never re-hosted.
            if result.isOK { result.upload = upload } else { upload?.discard() }
        } catch {
            upload?.discard()
            result.failure = (error.rule, error.description)
        }
        return result
    }

    /// The verdict on what a fetch brought: a success with a body, its type read from the bytes (media, not a
    /// page), within the limits, and whether its name or declared type hides that type (then it is re-hosted).
    private func read(_ fetched: FetchedResource, target: MediaURL, into result: inout MediaCheck) {
        guard (200...299).contains(fetched.status) else {
            result.failure = ("http-status", "the server answered \(fetched.status)")
            return
        }
        guard fetched.size > 0 else {
            result.failure = ("empty", "the answer has no body")
            return
        }
        result.bytes = fetched.size
        guard let type = MediaSniffer.sniff(fetched.prefix) else {
            let declared = fetched.contentType?.lowercased() ?? ""
            let looksHTML = declared.contains("html") || fetched.prefix.prefix(1) == [UInt8(ascii: "<")]
            result.failure =
                looksHTML
                ? ("not-media", "the URL gives a web page, not media")
                : ("unknown-type", "the bytes are not a recognisable image, audio or video file")
            return
        }
        result.type = type
        if [.html, .xml, .json, .pdf].contains(type) {
            result.failure = ("not-media", "the URL gives \(type.displayName), not media")
            return
        }
        judge(&result)
        // A URL that hides or misstates the type is re-hosted where the name says the truth.
        let finalURL = fetched.finalURL.absoluteString
        if let byName = MediaType(urlString: finalURL) ?? MediaType(urlString: target.fetched) {
            if byName != type { result.rehostReason = "extension-mismatch" }
        } else {
            result.rehostReason = "no-extension"
        }
        if result.rehostReason == nil, let declared = fetched.contentType.flatMap(MediaType.init(mimeType:)),
            declared != type
        {
            result.rehostReason = "content-type-mismatch"
        }
    }

    /// Keeps a verdict: a success for `checkLifetime`, a failure for `failureLifetime`.
    private func remember(_ result: MediaCheck, for url: String) {
        var kept = result
        kept.upload = nil
        let until = Date().addingTimeInterval(result.isOK ? checkLifetime : failureLifetime)
        checks.withLockedValue { $0.set(url, (kept, until)) }
    }

    /// Apple's and Android's verdicts; Apple refusing is a failure (the device would drop the media).
    func judge(_ r: inout MediaCheck) {
        guard let type = r.type else { return }
        r.ios = MediaRules.appleDecision(type: type, size: r.bytes)
        if type.kind == .image { r.android = MediaRules.androidDecision(type: type, size: r.bytes) }
        if case .refused(let why)? = r.ios { r.failure = ("ios-" + why.code, why.description) }
    }

    /// Checks, re-hosts and charts a message before it is accepted. Returns the problems (errors under
    /// `reject`) and what was changed or dropped (warnings).
    public func prepare(
        _ message: inout PushMessage,
        onFailure: OnFailure,
        rehost: Rehost
    ) async -> (errors: [ValidationIssue], warnings: [ValidationIssue]) {
        var (errors, warnings) = await checkMedia(&message, onFailure: onFailure, rehost: rehost)
        if let spec = message.chart, message.chartImageURL == nil {
            do { message.chartImageURL = url(for: try await chartImage(spec)) } catch {
                // Android and the web go without the picture; the sender learns why.
                warnings.append(
                    .init(
                        path: "chart",
                        rule: "chart-image-failed",
                        message: "the chart's PNG for Android and the web could not be stored: \(error)",
                        severity: .warning
                    )
                )
            }
        }
        return (errors, warnings)
    }

    /// The media part of ``prepare(_:onFailure:rehost:)``: checks (and re-hosts) every media URL, and leaves the
    /// chart alone. `richpush send` calls it with `rehost: .never` for the server's verdicts without a server.
    /// A URL written in another spelling than its normalized one (``MediaURL``) is sent in the normalized form, so
    /// that every device and every provider's SDK fetches what the preflight fetched; a warning `url-normalized`
    /// names both.
    public func checkMedia(
        _ message: inout PushMessage,
        onFailure: OnFailure,
        rehost: Rehost
    ) async -> (errors: [ValidationIssue], warnings: [ValidationIssue]) {
        guard !message.media.isEmpty else { return ([], []) }
        guard onFailure != .off || rehost == .always else {
            var notes: [ValidationIssue] = []
            for i in message.media.indices {
                guard let u = try? parsed(message.media[i].url), u.isRewritten else { continue }
                notes.append(Self.normalized(at: i, written: u.written, fetched: u.fetched, checked: false))
                message.media[i].url = u.fetched
            }
            return ([], notes)
        }
        var errors: [ValidationIssue] = []
        var warnings: [ValidationIssue] = []
        let media = message.media
        let results = await withTaskGroup(of: (Int, MediaCheck).self) { group in
            for (i, m) in media.enumerated() {
                group.addTask { (i, await self.check(m.url, kind: m.kind, rehost: rehost)) }
            }
            var out = [MediaCheck?](repeating: nil, count: media.count)
            for await (i, r) in group { out[i] = r }
            return out.compactMap { $0 }
        }
        var kept: [PushMedia] = []
        for (i, (m, r)) in zip(media, results).enumerated() {
            let path = "media[\(i)].url"
            if let f = r.failure, onFailure != .off {
                let shown = r.fetched.map { "\(m.url) (fetched as \($0))" } ?? m.url
                let dropped = onFailure != .reject
                let issue = ValidationIssue(
                    path: path,
                    rule: f.rule,
                    message: "\(dropped ? "dropped " : "")\(shown): \(f.message)",
                    severity: dropped ? .warning : .error,
                    url: m.url,
                    fetched: r.fetched
                )
                if dropped { warnings.append(issue) } else { errors.append(issue) }
                continue
            }
            var m = m
            if let fetched = r.fetched {
                warnings.append(Self.normalized(at: i, written: m.url, fetched: fetched, checked: true))
                m.url = fetched
            }
            // Whatever is not re-hosted leaves no file behind (finish moves the one it uses).
            defer { r.upload?.discard() }
            if r.isOK, hostedName(m.url) == nil, let type = r.type, let upload = r.upload,
                rehost == .always || (rehost == .auto && r.rehostReason != nil)
            {
                warnings.append(await rehosted(&m, upload: upload, type: type, reason: r.rehostReason, path: path))
            }
            if case .refused(let why)? = r.android, m.kind == .image || r.type?.kind == .image {
                warnings.append(
                    .init(
                        path: path,
                        rule: "android-" + why.code,
                        message: "Android will not show it: \(why.description)",
                        severity: .warning
                    )
                )
            }
            kept.append(m)
        }
        message.media = kept
        return (errors, warnings)
    }

    /// The warning that a media URL is sent (and was fetched) in its normalized form.
    static func normalized(at i: Int, written: String, fetched: String, checked: Bool) -> ValidationIssue {
        ValidationIssue(
            path: "media[\(i)].url",
            rule: "url-normalized",
            message: "\(written) is \(checked ? "fetched and " : "")sent as \(fetched)",
            severity: .warning,
            url: written,
            fetched: fetched
        )
    }

    /// Moves checked bytes into the store and points the media at them; the warning says where (or why not).
    private func rehosted(
        _ m: inout PushMedia,
        upload: MediaStore.Upload,
        type: MediaType,
        reason: String?,
        path: String
    ) async -> ValidationIssue {
        do {
            let item = try store.finish(upload, type: type)
            try await store.publish(item, keepUntil: Date())
            let hosted = url(for: item)
            let note = ValidationIssue(
                path: path,
                rule: "rehosted",
                message: "\(m.url) is served from \(hosted)\(reason.map { " (\($0))" } ?? "")",
                severity: .warning
            )
            m.url = hosted
            m.mimeType = type.mimeType
            return note
        } catch {
            // Sent from its own address instead; the sender learns why it was not re-hosted.
            return .init(
                path: path,
                rule: "not-rehosted",
                message: "\(m.url) is sent as it is: \(error)",
                severity: .warning
            )
        }
    }

    /// Keeps the media a message references on this server until `until` (the last moment a device may fetch it).
    public func keep(_ message: PushMessage, until: Date) async throws {
        for url in message.media.map(\.url) + [message.chartImageURL].compactMap({ $0 }) {
            if let name = hostedName(url) { try await store.keepEverywhere(name, until: until) }
        }
    }

    /// The chart as a PNG on this server (rendered once per distinct spec).
    public func chartImage(_ spec: ChartSpec) async throws -> MediaStore.Item {
        let key = MediaStore.hex(SHA256.hash(data: spec.json.serialized()))
        // A chart rendered before is reused while its file is there (retention may have swept it since).
        if let hit = charts.withLockedValue({ $0[key] }), store.keep(hit.name, until: Date()) { return hit }
        let item = try store.put(ChartRenderer.render(spec).png, type: .png)
        try await store.publish(item, keepUntil: Date())
        charts.withLockedValue { all in
            if all.count > 10_000 { all.removeAll() }
            all[key] = item
        }
        return item
    }
}
