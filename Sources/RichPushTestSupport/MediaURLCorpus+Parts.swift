import Foundation
import RichPushCore
import RichPushMedia
import RichPushServer

/// How each part of RichPush is run over the table, and what it did in the table's terms: one definition, so that
/// the suites of the parts and the agreement test read the parts alike.
extension MediaURLCorpus {
    /// The device pipeline as an extension runs it (http allowed: the test servers are plain http). The idle time
    /// outlasts a resolver that retries a lost query (5 s, twice by default), so that a `.invalid` name always ends
    /// in the resolver's answer, never in the device's own timeout.
    public static func device(_ entries: [Entry]) async -> [(Observed, EnrichedNotification)] {
        let processor = RichNotificationProcessor(
            configuration: .init(fetch: FetchPolicy(allowInsecureHTTP: true, idleTimeout: 20))
        )
        var out: [(Observed, EnrichedNotification)] = []
        for e in entries {
            let payload: JSONValue = [
                "aps": ["alert": ["title": "T", "body": "B"], "mutable-content": 1],
                "rp": ["v": 1, "m": [["u": .string(e.url)]]],
            ]
            let n = await processor.process(payload: payload, deadline: Date().addingTimeInterval(25))
            out.append((Observed(device: n), n))
        }
        return out
    }

    /// The server's preflight as `richpush send --sandbox` runs it: the system resolver, every address and http
    /// allowed.
    public static func preflightService() throws -> MediaService {
        let fetcher = try SafeFetcher(
            policy: AddressPolicy(allowAll: true),
            limits: .init(deadline: 20, allowHTTP: true)
        )
        let store = try MediaStore(
            directory: FileManager.default.temporaryDirectory.appendingPathComponent("media-\(UUID().uuidString)")
        )
        return MediaService(store: store, fetcher: fetcher, publicBase: "https://push.example.com")
    }

    public static func preflight(_ entries: [Entry], with media: MediaService) async -> [(Observed, MediaCheck)] {
        var out: [(Observed, MediaCheck)] = []
        for e in entries {
            let r = await media.check(e.url)
            out.append((Observed(preflight: r), r))
        }
        return out
    }
}

extension MediaURLCorpus.Observed {
    /// The device's report of a notification with one URL.
    public init(device n: EnrichedNotification) {
        if let a = n.attachments.first {
            self.init("attached", fetched: a.fetchedURL ?? a.sourceURL)
        } else if let s = n.report.skipped.first {
            self.init(
                s.reason.code == "network" ? "unreachable" : "failed:\(s.reason.code)",
                fetched: s.fetched ?? s.url
            )
        } else if let p = n.report.payloadProblems.first(where: { $0.path.hasPrefix("rp.m") }) {
            self.init("refused", rule: p.code)
        } else {
            self.init("nothing")
        }
    }

    /// The preflight's answer for one URL.
    public init(preflight r: MediaCheck) {
        guard let f = r.failure else {
            self.init("attached", fetched: r.fetched ?? r.url)
            return
        }
        if ["dns-failed", "connect-failed"].contains(f.rule) {
            self.init("unreachable", fetched: r.fetched ?? r.url)
        } else if f.rule == "url" || f.rule.hasPrefix("url-") {
            self.init("refused", rule: f.rule)
        } else {
            self.init("failed:\(f.rule)", fetched: r.fetched ?? r.url)
        }
    }
}
