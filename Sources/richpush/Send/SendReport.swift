import Foundation
import NIOConcurrencyHelpers
import RichPushCore

/// The outcomes file (`--report`): CSV with a header row, or one JSON object per line. Written through a buffer,
/// so that a hundred thousand outcomes cost a few dozen writes.
final class ReportWriter: Sendable {
    enum Format: String, Sendable {
        case csv, jsonl

        /// `.csv` names CSV; anything else JSON lines.
        static func guess(_ path: String) -> Format { path.lowercased().hasSuffix(".csv") ? .csv : .jsonl }
    }

    static let columns = ["token", "provider", "state", "reason", "provider_id", "attempts", "detail"]

    let format: Format
    private let handle: FileHandle
    private let pending = NIOLockedValueBox<[UInt8]>([])

    init(path: String, format: Format) throws {
        guard FileManager.default.createFile(atPath: path, contents: nil), let h = FileHandle(forWritingAtPath: path)
        else {
            throw TokenFile.Problem(description: "cannot write the report to \(path)")
        }
        handle = h
        self.format = format
        if format == .csv { append(Array((Self.columns.joined(separator: ",") + "\n").utf8)) }
    }

    func write(_ o: TargetOutcome) {
        switch format {
        case .csv:
            var line: [UInt8] = []
            line.reserveCapacity(160)
            for (i, field) in [
                o.target, o.provider, o.state.rawValue, o.reason ?? "", o.providerID ?? "", String(o.attempts),
                o.detail ?? "",
            ].enumerated() {
                if i > 0 { line.append(UInt8(ascii: ",")) }
                Self.appendCSV(field, to: &line)
            }
            line.append(UInt8(ascii: "\n"))
            append(line)
        case .jsonl:
            append(o.json.serialized() + [UInt8(ascii: "\n")])
        }
    }

    private func append(_ bytes: [UInt8]) {
        let full = pending.withLockedValue { buffer -> [UInt8]? in
            buffer.append(contentsOf: bytes)
            guard buffer.count >= 1 << 16 else { return nil }
            defer { buffer.removeAll(keepingCapacity: true) }
            return buffer
        }
        if let full { handle.write(Data(full)) }
    }

    /// Writes what is buffered; the file is complete after this.
    func flush() {
        let rest = pending.withLockedValue { buffer -> [UInt8] in
            defer { buffer.removeAll() }
            return buffer
        }
        if !rest.isEmpty { handle.write(Data(rest)) }
        try? handle.synchronize()
    }

    /// A field as CSV writes it: quoted (quotes doubled) when it holds a comma, a quote or a line break.
    static func appendCSV(_ s: String, to out: inout [UInt8]) {
        let quote = UInt8(ascii: "\"")
        guard s.utf8.contains(where: { $0 == UInt8(ascii: ",") || $0 == quote || $0 == 0x0A || $0 == 0x0D }) else {
            out.append(contentsOf: s.utf8)
            return
        }
        out.append(quote)
        for b in s.utf8 {
            if b == quote { out.append(quote) }
            out.append(b)
        }
        out.append(quote)
    }
}

extension TargetOutcome {
    var json: JSONValue {
        var o: [String: JSONValue] = [
            "token": .string(target), "state": .string(state.rawValue), "attempts": .int(Int64(attempts)),
        ]
        if !provider.isEmpty { o["provider"] = .string(provider) }
        if let reason { o["reason"] = .string(reason) }
        if let providerID { o["provider_id"] = .string(providerID) }
        if let detail { o["detail"] = .string(detail) }
        return .object(o)
    }

    /// One line for the terminal.
    var line: String {
        let short = target.count > 24 ? String(target.prefix(12)) + "…" + String(target.suffix(8)) : target
        let provider = self.provider.isEmpty ? "" : "\(self.provider) "
        switch state {
        case .delivered:
            return "delivered \(provider)\(short)" + (providerID.map { " (\($0))" } ?? "")
        default:
            let why = [reason, detail].compactMap { $0 }.joined(separator: ": ")
            let tries = attempts > 1 ? " after \(attempts) attempts" : ""
            return "\(state.rawValue.replacingOccurrences(of: "_", with: " ")) \(provider)\(short)\(tries)"
                + (why.isEmpty ? "" : " — \(why)")
        }
    }
}

/// Counts by state and by reason, read by the progress display and the summary.
final class Tally: Sendable {
    struct Counts: Sendable {
        var byState: [TargetOutcome.State: Int] = [:]
        /// Not delivered, by reason: how many, and what the reason means.
        var reasons: [String: (count: Int, detail: String?)] = [:]
        var done: Int { byState.values.reduce(0, +) }
        /// Ended in a send (repeats in the file are not targets of their own).
        var targets: Int { done - (byState[.skipped] ?? 0) }
        subscript(_ s: TargetOutcome.State) -> Int { byState[s] ?? 0 }
    }

    private let counts = NIOLockedValueBox(Counts())

    func add(_ o: TargetOutcome) {
        counts.withLockedValue { c in
            c.byState[o.state, default: 0] += 1
            if o.state != .delivered && o.state != .skipped, let r = o.reason {
                c.reasons[r, default: (0, o.detail)].count += 1
            }
        }
    }

    var snapshot: Counts { counts.withLockedValue { $0 } }
}
