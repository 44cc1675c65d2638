import Foundation
import RichPushAPNs
import RichPushCore
import RichPushFCM
import RichPushServer

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A send through a running RichPush server: the server validates, preflights, fans out and retries; this
/// follows the notification until every delivery has ended, then writes each target's outcome.
struct ServerSend {
    let command: SendCommand
    let message: JSONValue
    let sendFields: [String: JSONValue]

    /// The audience from the options, or nil to leave the message's own (or its targets) to the server.
    func audience() throws -> JSONValue? {
        let s = command.server
        let t = command.targets
        if t.tokens != nil {
            throw SendFailure.usage(
                "--tokens is for direct sends; through a server, register the devices and use --tag, or send straight to APNs or FCM"
            )
        }
        var given: [(String, JSONValue)] = []
        if s.all { given.append(("--all", ["all": true])) }
        if let tag = s.tag { given.append(("--tag", ["tag": .string(tag)])) }
        if let user = s.user { given.append(("--user", ["user": .string(user)])) }
        if let topic = t.topic { given.append(("--topic", ["fcm_topic": .string(topic)])) }
        if let condition = t.condition { given.append(("--condition", ["fcm_condition": .string(condition)])) }
        if !t.token.isEmpty { given.append(("--token", ["tokens": .array(t.token.map(JSONValue.string))])) }
        if let text = s.audience {
            guard let a = try? JSONValue.parse(Data(text.utf8)), case .object = a else {
                throw SendFailure.usage("--audience is a JSON object, such as '{\"tag\":\"beta\"}'")
            }
            given.append(("--audience", a))
        }
        guard given.count <= 1 else {
            throw SendFailure.usage("give one audience (\(given.map(\.0).joined(separator: ", ")) given)")
        }
        if let (option, a) = given.first {
            if sendFields["audience"] != nil {
                throw SendFailure.usage("\(option) and the message's \"audience\" both give an audience: keep one")
            }
            return a
        }
        return nil
    }

    func run() async throws -> Int32 {
        let (base, key, app, body) = try checkedRequest()
        let http = HTTPClient(base: base.hasSuffix("/") ? String(base.dropLast()) : base)
        let session = try SendSession(output: command.output, printEach: !command.targets.token.isEmpty)
        let notifications = "/v1/apps/\(app)/notifications"
        let s = command.server

        let (status, answer): (Int, JSONValue)
        do {
            (status, answer) = try await http.call(
                "POST",
                s.update.map { notifications + "/\($0)/updates" } ?? notifications,
                key: key,
                .object(body),
                idempotencyKey: s.idempotencyKey ?? UUID().uuidString
            )
        } catch {
            printError("error: cannot reach \(base): \(error.localizedDescription)")
            return 1
        }
        for w in answer["warnings"]?.arrayValue ?? [] { printError(Self.issueLine(w, severity: "warning")) }
        guard status == 202, let id = answer["id"]?.stringValue else { return Self.refused(status, answer) }
        if !command.output.json {
            if let version = answer["version"]?.intValue {
                let superseded = answer["superseded"]?.intValue ?? 0
                session.console.say(
                    "accepted as \(id), version \(version) (\(superseded) of the version before superseded)"
                )
            } else {
                session.console.say("accepted as \(id)")
            }
        }
        let signals = session.catchSignals()
        let last = await follow(http, notifications + "/\(id)", key: key, base: base, session: session)
        await readReport(http, notifications + "/\(id)", key: key, base: base, total: last["total"], session: session)
        signals.cancel()
        if session.stop.isSet && !command.output.json {
            session.console.say(
                "stopped following \(id); the server goes on sending (GET \(notifications)/\(id) follows it)"
            )
        }
        var extra: [String: JSONValue] = ["id": .string(id)]
        if let version = answer["version"] { extra["version"] = version }
        return session.finish(interrupted: session.stop.isSet, extra: extra)
    }

    /// The options checked (the server's address, the key, the app, an update's id) and the body to send.
    func checkedRequest() throws -> (base: String, key: String, app: String, body: [String: JSONValue]) {
        let s = command.server
        try command.output.checked()
        guard let base = s.server, let url = URL(string: base), url.scheme == "http" || url.scheme == "https",
            let host = url.host, !host.isEmpty
        else {
            throw SendFailure.usage("--server is the server's base URL, such as https://push.example.com")
        }
        if url.scheme == "http" && !ServerConfiguration.isLoopback(host) {
            throw SendFailure.usage(
                "--server must be https:// off this machine (the API key would cross the network in the clear); http:// is for 127.0.0.1, ::1 and localhost"
            )
        }
        let key = try Self.apiKey(s)
        guard let app = s.app, !app.isEmpty, app.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" || $0 == "-" })
        else {
            throw SendFailure.usage("--server needs --app (the app's id, app_…)")
        }
        guard case .object(var body) = message else { throw SendFailure.invalid("a message is a JSON object") }
        for (k, v) in sendFields { body[k] = v }
        let audience = try audience()
        if let a = audience { body["audience"] = a }
        if let root = s.update {
            // An update goes where its first version went: an audience would be another send.
            guard !root.isEmpty, root.unicodeScalars.allSatisfy({ $0.isASCII && $0.value > 0x20 && $0 != "/" }) else {
                throw SendFailure.usage("--update is a notification's id, as its send answered")
            }
            // (The server names any other field an update does not take: send_at, spread_seconds, …)
            if audience != nil {
                throw SendFailure.usage("--update sends to the devices the first version went to: give no audience")
            }
        }
        return (base, key, app, body)
    }

    /// A send the server did not accept: what it said, and the exit status (2: for the user to fix; 1: may pass).
    static func refused(_ status: Int, _ answer: JSONValue) -> Int32 {
        let e = answer["error"]
        printError("error: the server answered \(status): \(e?["message"]?.stringValue ?? answer.jsonString)")
        for issue in e?["issues"]?.arrayValue ?? [] { printError(Self.issueLine(issue, severity: "error")) }
        if (300..<400).contains(status) {
            printError("  redirects are not followed (the key goes nowhere but --server): give the final address")
        }
        if status == 401 {
            printError(
                "  the API key was refused: check RICHPUSH_API_KEY or --key-file (keys are shown once, when made)"
            )
        }
        if status == 403 {
            printError("  the key may not send for this app: check --app, and that the key has scope send")
        }
        // A redirect, like a refusal, is for the user to fix (the address given); 429 and 5xx may pass.
        return status >= 300 && status < 500 && status != 429 ? 2 : 1

    }

    /// Follows the notification until it is over (``isOver(_:)``), drawing the progress (Ctrl-C stops following;
    /// the server goes on); the last answer.
    func follow(_ http: HTTPClient, _ path: String, key: String, base: String, session: SendSession) async -> JSONValue
    {
        var last: JSONValue = .null
        var total: Int?
        let progress = Task { [session] in
            while !Task.isCancelled {
                try? await Task.sleep(nanoseconds: UInt64(session.console.interval * 1e9))
                if Task.isCancelled { break }
                if let c = Self.pendingCounts(session.followed) {
                    session.console.draw(c.counts, total: c.total, started: session.started)
                }
            }
        }
        while !session.stop.isSet {
            do { last = try await http.call("GET", path + "?limit=1", key: key).1 } catch {
                printError("warning: \(base): \(error.localizedDescription); trying again")
            }
            session.followed = last
            total = last["total"]?.intValue.map { Self.clamped($0) }
            if total != nil && Self.isOver(last) { break }
            try? await Task.sleep(nanoseconds: 250_000_000)
        }
        progress.cancel()
        _ = await progress.value
        return last
    }

    /// Whether a notification's answer says it is over: none of its deliveries queued or leased, and its fan-out
    /// (a registry audience's) not still adding deliveries. Until that fan-out's first chunk commits, the answer
    /// has no deliveries at all.
    static func isOver(_ answer: JSONValue) -> Bool {
        let counts = answer["counts"]?.objectValue ?? [:]
        return counts["queued"] == nil && counts["leased"] == nil && answer["fanning_out"] != true
    }

    /// Every delivery, a page at a time, into the report and the lines. A page must start past the one before, and
    /// there are no more pages than the total calls for: a server answering otherwise is not followed on.
    func readReport(
        _ http: HTTPClient,
        _ path: String,
        key: String,
        base: String,
        total: JSONValue?,
        session: SendSession
    ) async {
        var after: Int64?
        var pages = 0
        let pageLimit = Self.clamped(total?.intValue) / 1000 + 2
        repeat {
            let page: JSONValue
            do {
                page = try await http.call("GET", path + "?limit=1000" + (after.map { "&after=\($0)" } ?? ""), key: key)
                    .1
            } catch {
                printError("error: \(base): \(error.localizedDescription); the report stops here")
                break
            }
            for d in page["deliveries"]?.arrayValue ?? [] { session.record(Self.outcome(d)) }
            pages += 1
            guard let next = page["next_after"]?.intValue else { break }
            if let after, next <= after {
                printError(
                    "error: \(base) answered a page that does not move past the one before (next_after \(next)); the report stops here"
                )
                break
            }
            if pages >= pageLimit {
                printError("error: \(base) answered more pages than its total calls for; the report stops here")
                break
            }
            after = next
        } while true
    }

    /// The app's key: from `--key-file` (its first line), else from `RICHPUSH_API_KEY`. Never from the arguments.
    static func apiKey(_ s: ServerOptions) throws -> String {
        if s.key != nil {
            throw SendFailure.usage(
                "--key is not taken: a key in the arguments is seen by every user of this machine (ps) and kept in the shell's history; set RICHPUSH_API_KEY or give --key-file FILE"
            )
        }
        if let path = s.keyFile {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw SendFailure.usage("--key-file \(path): cannot read it")
            }
            let text = String(decoding: data.prefix(4096), as: UTF8.self)
            let line = text.split(whereSeparator: \.isNewline).first.map { $0.trimmingCharacters(in: .whitespaces) }
            guard let line, !line.isEmpty else { throw SendFailure.usage("--key-file \(path): the file is empty") }
            return line
        }
        if let key = ProcessInfo.processInfo.environment["RICHPUSH_API_KEY"]?.trimmingCharacters(in: .whitespaces),
            !key.isEmpty
        {
            return key
        }
        throw SendFailure.usage(
            "--server needs the app's API key (scope send): set RICHPUSH_API_KEY or give --key-file FILE"
        )
    }

    /// A count from the server, held to 0...10¹² (sums of them must not overflow, nor a bar be drawn backwards).
    static func clamped(_ n: Int64?) -> Int { Int(min(max(n ?? 0, 0), 1_000_000_000_000)) }

    static func pendingCounts(_ answer: JSONValue) -> (counts: Tally.Counts, total: Int)? {
        guard let total = answer["total"]?.intValue else { return nil }
        var c = Tally.Counts()
        for (state, n) in answer["counts"]?.objectValue ?? [:] {
            if let s = TargetOutcome.State(rawValue: state) { c.byState[s] = clamped(n.intValue) }
        }
        return (c, clamped(total))
    }

    /// A delivery as the server lists it, as an outcome; the reason's meaning added where it is a provider's.
    static func outcome(_ d: JSONValue) -> TargetOutcome {
        let stateName = d["state"]?.stringValue ?? ""
        let state = TargetOutcome.State(rawValue: stateName) ?? .pending
        let reason = d["reason"]?.stringValue
        return TargetOutcome(
            target: d["target"]?.stringValue ?? "",
            provider: d["provider"]?.stringValue ?? "",
            state: state,
            reason: reason,
            providerID: d["provider_id"]?.stringValue,
            attempts: clamped(d["attempts"]?.intValue),
            detail: reason.flatMap(advice)
        )
    }

    /// What a stored reason means: an APNs reason's or an FCM code's advice.
    static func advice(_ reason: String) -> String? { DeliveryReasons.meaning(reason) }

    static func issueLine(_ issue: JSONValue, severity: String) -> String {
        let path = issue["path"]?.stringValue.map { "\($0): " } ?? ""
        let rule = issue["rule"]?.stringValue.map { " [\($0)]" } ?? ""
        return "\(severity): \(path)\(issue["message"]?.stringValue ?? issue.jsonString)\(rule)"
    }
}
