import Foundation
import RichPushCore
import RichPushTestSupport
import Testing

/// The shared table of media URL spellings through `richpush send` as a user runs it (one send per URL to the
/// sandbox), and the agreement of the three parts: the device pipeline, the server's preflight and `richpush send`
/// do the same with every spelling, and what the table says.
@Suite(.serialized) struct MediaURLAgreementTests {
    /// What a send of a message with one URL did, in the table's terms: the URL the APNs emulator received when it
    /// was sent, else the rule of the error printed for `media[0].url`.
    static func observe(_ run: CLITests.Run, sent: JSONValue?) -> MediaURLCorpus.Observed {
        if run.status == 0 {
            return .init("attached", fetched: sent?["rp"]?["m"]?.arrayValue?.first?["u"]?.stringValue)
        }
        let prefix = "error: media[0].url: "
        guard let line = run.stderr.split(separator: "\n").first(where: { $0.hasPrefix(prefix) }),
            line.hasSuffix("]"), let open = line.lastIndex(of: "[")
        else { return .init("failed:exit \(run.status)") }
        let rule = String(line[line.index(after: open)..<line.index(before: line.endIndex)])
        if rule == "url" || rule.hasPrefix("url-") { return .init("refused", rule: rule) }
        // "<as written> (fetched as <fetched>): <why> [rule]", or "<as written>: <why> [rule]" when they are one.
        let text = line.dropFirst(prefix.count)
        let fetched =
            text.range(of: " (fetched as ").map { String(text[$0.upperBound...].prefix { $0 != ")" }) }
            ?? text.components(separatedBy: ": ").first
        let outcome = rule == "dns-failed" || rule == "connect-failed" ? "unreachable" : "failed:\(rule)"
        return .init(outcome, fetched: fetched)
    }

    @Test func theDeviceThePreflightAndSendAgreeOnEverySpelling() async throws {
        let corpus = try MediaURLCorpus()
        let servers = try await MediaURLCorpus.Servers.start(corpus)
        let entries = corpus.entries(port: servers.port, port6: servers.port6)
        let f = try await SendTests.Fixture("urls")
        defer { Task { await f.stop() } }
        var send: [MediaURLCorpus.Observed] = []
        let started = Date()
        for (i, e) in entries.enumerated() {
            let message = JSONValue.object(["title": "t", "media": .string(e.url)]).serialized()
            let file = try f.write("m\(i).json", String(decoding: message, as: UTF8.self))
            let token = SendTests.apnsToken(3700 + i)
            let run = try await SendTests.run([
                "send", file, "--sandbox", f.sandboxDir, "--token", token, "--progress", "none",
            ])
            send.append(Self.observe(run, sent: f.sandbox.apns.recorded(token: token).last?.payloadJSON))
            // The sender is told what was fetched (and sent) when it is not what they wrote.
            if run.status == 0, let fetched = e.fetched, fetched != e.url {
                #expect(run.stderr.contains("sent as \(fetched) [url-normalized]"), "\(run.stderr)")
            }
        }
        print("richpush send over \(entries.count) URLs: \(Int(Date().timeIntervalSince(started))) s")
        let differences = corpus.differences(send, in: entries, part: .send)
        #expect(differences.isEmpty, "\(differences.joined(separator: "\n"))")

        let device = await MediaURLCorpus.device(entries).map(\.0)
        let preflight = await MediaURLCorpus.preflight(entries, with: try MediaURLCorpus.preflightService()).map(\.0)
        await servers.shutdown()
        var disagreements: [String] = []
        // Where the table names what the device does instead on this platform, the device is held to that.
        for (i, e) in entries.enumerated()
        where !((device[i] == preflight[i] || device[i] == e.expected(.device)) && preflight[i] == send[i]) {
            disagreements.append(
                "\(e.url.prefix(100).debugDescription): device \(device[i]), preflight \(preflight[i]), send \(send[i])"
            )
        }
        #expect(disagreements.isEmpty, "\(disagreements.joined(separator: "\n"))")
        #expect(device.count == entries.count && preflight.count == entries.count && send.count == entries.count)
    }
}
