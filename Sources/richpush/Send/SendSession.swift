import Foundation
import NIOConcurrencyHelpers
import RichPushCore

/// What one run of `richpush send` keeps while it sends: the tally, the report file, the lines printed, the
/// signals caught; and at the end the summary and the exit status.
final class SendSession: Sendable {
    let console: SendConsole
    let tally = Tally()
    let writer: ReportWriter?
    let reportPath: String?
    let stop = StopSignal()
    let started = Date()
    /// Every outcome printed (a few targets given on the command line), or only those not delivered, up to a limit.
    let printEach: Bool
    let json: Bool
    static let printLimit = 20
    static let jsonLimit = 1000
    private let shown = NIOLockedValueBox((printed: 0, outcomes: [JSONValue]()))
    private let followedAnswer = NIOLockedValueBox<JSONValue>(.null)
    private let retried = NIOLockedValueBox<Set<String>>([])

    /// The server's last answer about the notification followed (`--server`), for the progress display.
    var followed: JSONValue {
        get { followedAnswer.withLockedValue { $0 } }
        set { followedAnswer.withLockedValue { $0 = newValue } }
    }

    init(output: OutputOptions, printEach: Bool) throws {
        // A few targets named on the command line each get their own line: no progress unless asked for.
        let asked = SendConsole.Progress(rawValue: output.progress) ?? .auto
        console = SendConsole(progress: asked == .auto && printEach ? .none : asked, interval: output.progressInterval)
        reportPath = output.report
        writer = try output.report.map {
            try ReportWriter(
                path: $0,
                format: output.reportFormat.flatMap(ReportWriter.Format.init(rawValue:)) ?? .guess($0)
            )
        }
        self.printEach = printEach
        json = output.json
    }

    func record(_ o: TargetOutcome) {
        tally.add(o)
        writer?.write(o)
        let print = shown.withLockedValue { s -> Bool in
            if json {
                if s.outcomes.count < Self.jsonLimit { s.outcomes.append(o.json) }
                return false
            }
            guard printEach || (o.state != .delivered && o.state != .skipped) else { return false }
            s.printed += 1
            return printEach || s.printed <= Self.printLimit
        }
        if print { console.say(o.line) }
    }

    /// The first retry for each reason is said (a send that cannot connect retries for minutes by the policy).
    func retrying(reason: String, detail: String?, wait: TimeInterval) {
        guard !json, retried.withLockedValue({ $0.insert(reason).inserted }) else { return }
        console.say(
            "retrying after \(reason)\(detail.map { " (\($0))" } ?? ""): next attempt in \(String(format: "%.1f", max(0, wait))) s; further retries for this reason are not shown",
            error: true
        )
    }

    /// SIGINT and SIGTERM: the first stops the send (sends in flight end and are recorded); the second writes
    /// what the report holds and quits at once. Cancel the returned task when the send is over.
    func catchSignals() -> Task<Void, Never> {
        let signals = StopSignals()
        return Task {
            var count = 0
            for await _ in signals.stream {
                count += 1
                if count == 1 {
                    stop.set()
                    console.say(
                        "stopping: no new sends; waiting for those in flight (Ctrl-C again to quit at once)",
                        error: true
                    )
                } else {
                    writer?.flush()
                    console.say(
                        "quit: the report lacks the sends that were in flight and the targets not yet read",
                        error: true
                    )
                    exit(130)
                }
            }
            signals.cancel()
        }
    }

    /// Writes the report out (on an error, before the summary).
    func close() { writer?.flush() }

    /// Prints the summary (lines, or one JSON object, with `extra`'s fields: a server send's notification id) and
    /// returns the exit status: 0 when every target was delivered, else 1.
    func finish(interrupted: Bool, extra: [String: JSONValue] = [:]) -> Int32 {
        writer?.flush()
        let c = tally.snapshot
        let seconds = Date().timeIntervalSince(started)
        let allDelivered = c.targets > 0 && c[.delivered] == c.targets
        let reasons = c.reasons.sorted { $0.value.count > $1.value.count }
        if json {
            var o: [String: JSONValue] = [
                "targets": .int(Int64(c.targets)), "seconds": .double((seconds * 1000).rounded() / 1000),
                "rate": .double(Double(Int(Double(c.targets) / max(seconds, 0.001)))),
                "interrupted": .bool(interrupted),
            ]
            for s in TargetOutcome.State.allCases { o[s.rawValue] = .int(Int64(c[s])) }
            o["reasons"] = .array(
                reasons.map { r in
                    var e: [String: JSONValue] = ["reason": .string(r.key), "count": .int(Int64(r.value.count))]
                    if let d = r.value.detail { e["detail"] = .string(d) }
                    return .object(e)
                }
            )
            let listed = shown.withLockedValue { $0.outcomes }
            o["outcomes"] = .array(listed)
            if listed.count < c.done { o["outcomes_truncated"] = true }
            if let reportPath { o["report"] = .string(reportPath) }
            o.merge(extra) { kept, _ in kept }
            FileHandle.standardOutput.write(Data((JSONValue.object(o).prettyPrinted() + "\n").utf8))
        } else {
            let printed = shown.withLockedValue { $0.printed }
            if !printEach && printed > Self.printLimit {
                console.say(
                    "… and \(SendConsole.number(printed - Self.printLimit)) more not delivered"
                        + (reportPath.map { ": every outcome is in \($0)" } ?? " (--report FILE lists every outcome)")
                )
            }
            var parts = ["\(SendConsole.number(c[.delivered])) delivered"]
            for s in [TargetOutcome.State.failed, .pruned, .expired, .notSent] where c[s] > 0 {
                parts.append(
                    "\(SendConsole.number(c[s])) \(s == .pruned ? "pruned (token gone)" : s.rawValue.replacingOccurrences(of: "_", with: " "))"
                )
            }
            let repeats = c[.skipped] > 0 ? "; \(SendConsole.number(c[.skipped])) repeated token(s) skipped" : ""
            // A rate says something of many targets over a second or more; of one target it is noise ("0/s").
            let rate =
                c.targets >= 100 && seconds >= 1
                ? " (\(SendConsole.number(Int(Double(c.targets) / seconds)))/s)" : ""
            console.say(
                "\(interrupted ? "stopped: " : "")\(SendConsole.number(c.targets)) target(s): \(parts.joined(separator: ", ")) in \(String(format: "%.2f", seconds)) s\(rate)\(repeats)"
            )
            for (reason, v) in reasons.prefix(10) {
                console.say("  \(SendConsole.number(v.count)) \(reason)" + (v.detail.map { ": \($0)" } ?? ""))
            }
            if let reportPath { console.say("report: \(reportPath)") }
        }
        return allDelivered ? 0 : 1
    }
}
