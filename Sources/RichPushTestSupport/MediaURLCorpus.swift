import Foundation
import RichPushCore
import RichPushSandbox

/// The shared table of media URL spellings (`Tests/Corpus/media-urls.json`): the device pipeline, the server's
/// preflight and `richpush send` each run it and must come out as it says, and so agree with each other.
public struct MediaURLCorpus: Sendable {
    public enum Outcome: String, Sendable {
        /// Fetched in the form the entry's `fetched` gives, and attached.
        case attached
        /// Fetched in that form; the name does not resolve (a `.invalid` name).
        case unreachable
        /// Refused before any fetch, with the entry's `rule`.
        case refused
    }

    /// The parts that run the table.
    public enum Part: String, Sendable { case device, preflight, send }

    public struct Entry: Sendable {
        public var url: String
        public var outcome: Outcome
        public var fetched: String?
        public var rule: String?
        public var note: String
        /// What the device pipeline does instead when it runs on Linux (a limit of Foundation there, named in the
        /// table), if anything.
        public var deviceOnLinux: Outcome?

        /// What every part must observe for this entry (on Apple platforms).
        public var expected: Observed {
            Observed(outcome.rawValue, fetched: outcome == .refused ? nil : fetched, rule: rule)
        }

        /// What this part must observe here.
        public func expected(_ part: Part) -> Observed {
            #if os(Linux)
            if part == .device, let other = deviceOnLinux {
                return Observed(other.rawValue, fetched: other == .refused ? nil : fetched, rule: rule)
            }
            #endif
            return expected
        }
    }

    /// What one part did with one URL: `attached`, `unreachable`, `refused`, or `failed:<reason>` for anything else.
    public struct Observed: Sendable, Hashable, CustomStringConvertible {
        public var outcome: String
        public var fetched: String?
        public var rule: String?

        public init(_ outcome: String, fetched: String? = nil, rule: String? = nil) {
            self.outcome = outcome
            self.fetched = fetched
            self.rule = rule
        }

        public var description: String { [outcome, fetched, rule].compactMap { $0 }.joined(separator: " ") }
    }

    /// The entries with their placeholders still in (`{port}`…).
    public let raw: [Entry]

    public static let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../../Tests/Corpus/media-urls.json").standardized

    public init() throws {
        let json = try JSONValue.parse(try Data(contentsOf: Self.file))
        raw = (json["entries"]?.arrayValue ?? []).compactMap { e in
            guard let url = e["url"]?.stringValue, let outcome = e["outcome"]?.stringValue.flatMap(Outcome.init)
            else { return nil }
            return Entry(
                url: url,
                outcome: outcome,
                fetched: e["fetched"]?.stringValue,
                rule: e["rule"]?.stringValue,
                note: e["note"]?.stringValue ?? "",
                deviceOnLinux: e["device_on_linux"]?["outcome"]?.stringValue.flatMap(Outcome.init)
            )
        }
    }

    /// The entries for servers at these ports.
    public func entries(port: Int, port6: Int) -> [Entry] {
        let values = [
            "{port}": String(port), "{port6}": String(port6), "{label64}": String(repeating: "a", count: 64),
            "{long}": String(repeating: "a", count: 2100), "{wide}": String(repeating: "ü", count: 700),
        ]
        func fill(_ s: String) -> String { values.reduce(s) { $0.replacingOccurrences(of: $1.key, with: $1.value) } }
        return raw.map { e in
            var e = e
            e.url = fill(e.url)
            e.fetched = e.fetched.map(fill)
            return e
        }
    }

    /// Every difference between what a part observed and the table, one line each (empty: they agree).
    public func differences(_ observed: [Observed], in entries: [Entry], part: Part) -> [String] {
        zip(entries, observed).compactMap { e, o in
            let expected = e.expected(part)
            return o == expected
                ? nil : "\(part): \(e.url.prefix(120).debugDescription) (\(e.note)): \(o), expected \(expected)"
        }
    }

    /// The request targets (path and query) the attached entries are fetched with.
    public func targets(in entries: [Entry]) -> [String] {
        entries.filter { $0.outcome == .attached }.compactMap { e in
            e.fetched.flatMap { try? MediaURL($0).target }
        }
    }

    /// The media servers the attached entries point at: one on 127.0.0.1, one on ::1, each serving a JPEG at every
    /// path the table fetches, and keeping every request's target.
    public final class Servers: Sendable {
        public let v4: MediaTestServer
        public let v6: MediaTestServer
        public let port: Int
        public let port6: Int

        public static func start(_ corpus: MediaURLCorpus) async throws -> Servers {
            let jpeg = MediaSamples.jpeg(marker: 0xE0) + [UInt8](repeating: 7, count: 4000)
            var routes: [String: MediaRoute] = [:]
            for target in corpus.targets(in: corpus.entries(port: 1, port6: 1)) {
                let path = String(target.prefix { $0 != "?" })
                routes[path] = .bytes(jpeg, contentType: "image/jpeg")
            }
            let v4 = MediaTestServer(routes: routes, recordRequests: true)
            let v6 = MediaTestServer(routes: routes, recordRequests: true)
            let port = try await v4.start()
            let port6 = try await v6.start(host: "::1")
            return Servers(v4: v4, v6: v6, port: port, port6: port6)
        }

        init(v4: MediaTestServer, v6: MediaTestServer, port: Int, port6: Int) {
            (self.v4, self.v6, self.port, self.port6) = (v4, v6, port, port6)
        }

        /// Every request target both servers received.
        public var targets: [String] { v4.targets + v6.targets }

        public func shutdown() async {
            try? await v4.shutdown()
            try? await v6.shutdown()
        }
    }
}
