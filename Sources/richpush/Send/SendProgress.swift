import Foundation
import NIOConcurrencyHelpers

/// What `richpush send` writes while it runs: outcome lines on standard output, and progress on standard error,
/// as a bar redrawn in place on a terminal or as a plain line every few seconds otherwise.
final class SendConsole: Sendable {
    enum Progress: String, Sendable {
        case auto, bar, lines, none
    }

    let progress: Progress
    let interval: TimeInterval
    /// True while a bar is drawn on the terminal's last line (cleared before any other text).
    private let barShown = NIOLockedValueBox(false)

    /// `auto` draws a bar when standard error is a terminal, else plain lines.
    init(progress: Progress, interval: TimeInterval?) {
        let resolved: Progress = progress == .auto ? (isatty(STDERR_FILENO) == 1 ? .bar : .lines) : progress
        self.progress = resolved
        self.interval = interval ?? (resolved == .bar ? 0.1 : 2)
    }

    /// A line on standard output (or error), below the bar.
    func say(_ text: String, error: Bool = false) {
        barShown.withLockedValue { shown in
            if shown {
                FileHandle.standardError.write(Data("\r\u{1B}[2K".utf8))
                shown = false
            }
            (error ? FileHandle.standardError : FileHandle.standardOutput).write(Data((text + "\n").utf8))
        }
    }

    /// Draws progress every `interval` until cancelled, then once more (the final figures).
    func follow(_ tally: Tally, total: Int?, started: Date) async {
        guard progress != .none else { return }
        while !Task.isCancelled {
            try? await Task.sleep(nanoseconds: UInt64(interval * 1e9))
            if Task.isCancelled { break }
            draw(tally.snapshot, total: total, started: started)
        }
        guard progress == .bar else { return }
        draw(tally.snapshot, total: total, started: started)
        barShown.withLockedValue { shown in
            if shown { FileHandle.standardError.write(Data("\n".utf8)) }
            shown = false
        }
    }

    func draw(_ c: Tally.Counts, total: Int?, started: Date) {
        let elapsed = max(Date().timeIntervalSince(started), 0.001)
        let done = c.done
        let rate = Double(done) / elapsed
        let notDelivered = done - c[.delivered] - c[.skipped]
        var eta = ""
        if let total, total > done, rate > 0 { eta = Self.duration(Double(total - done) / rate) }
        switch progress {
        case .bar:
            let width = 30
            let fraction = total.map { $0 > 0 ? min(1, max(0, Double(done) / Double($0))) : 1 } ?? 0
            let filled = min(width, max(0, Int(fraction * Double(width))))
            let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
            let count = total.map { "\(Self.number(done))/\(Self.number($0))" } ?? Self.number(done)
            let percent = total != nil ? String(format: " %3.0f%%", fraction * 100) : ""
            let text =
                "[\(bar)]\(percent) \(count)  \(Self.number(Int(rate)))/s  ETA \(eta.isEmpty ? "-" : eta)  delivered \(Self.number(c[.delivered]))  not \(Self.number(notDelivered))"
            barShown.withLockedValue { shown in
                FileHandle.standardError.write(Data(("\r\u{1B}[2K" + text).utf8))
                shown = true
            }
        case .lines:
            let of =
                total.map {
                    " of \(Self.number($0)) (\(Int(min(100, max(0, Double(done) * 100 / Double(max($0, 1))))))%)"
                } ?? ""
            say(
                "progress: \(Self.number(done))\(of), \(Self.number(Int(rate)))/s\(eta.isEmpty ? "" : ", ETA \(eta)"); \(Self.number(c[.delivered])) delivered, \(Self.number(notDelivered)) not delivered",
                error: true
            )
        case .auto, .none:
            break
        }
    }

    static func number(_ n: Int) -> String {
        let digits = String(n.magnitude)
        var out = ""
        for (i, ch) in digits.enumerated() {
            if i > 0 && (digits.count - i) % 3 == 0 { out.append(",") }
            out.append(ch)
        }
        return (n < 0 ? "-" : "") + out
    }

    static func duration(_ seconds: Double) -> String {
        guard seconds.isFinite, seconds < 360_000 else { return "?" }
        let s = Int(seconds.rounded(.up))
        return s >= 3600
            ? String(format: "%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60) : String(format: "%d:%02d", s / 60, s % 60)
    }
}
