import Foundation
import RichPushTestSupport

/// Wall-clock and memory readings for the benchmarks.
enum Measure {
    static func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

    /// CPU seconds (user and system) this process has used.
    static func cpuSeconds() -> Double {
        var u = rusage()
        getrusage(RUSAGE_SELF.rawValue, &u)
        return Double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + Double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6
    }

    /// CPU nanoseconds the calling thread has used: what a single-threaded loop costs, whatever else the machine
    /// runs (wall time doubles when another process takes half the cores).
    static func threadCPU() -> UInt64 {
        var t = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t)
        return UInt64(t.tv_sec) * 1_000_000_000 + UInt64(t.tv_nsec)
    }

    static func milliseconds(_ start: UInt64, _ end: UInt64) -> Double { Double(end - start) / 1_000_000 }

    static func median(_ values: [Double]) -> Double {
        let s = values.sorted()
        return s.isEmpty ? 0 : (s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2)
    }

    static func percentile(_ values: [Double], _ p: Double) -> Double {
        let s = values.sorted()
        guard !s.isEmpty else { return 0 }
        return s[min(s.count - 1, Int((Double(s.count - 1) * p).rounded()))]
    }

    /// The process's peak resident memory so far (VmHWM), in bytes; Linux only, 0 elsewhere.
    static func peakResidentBytes() -> Int { procStatus("VmHWM") }

    static func residentBytes() -> Int { procStatus("VmRSS") }

    private static func procStatus(_ key: String) -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
        for line in text.split(separator: "\n") where line.hasPrefix(key + ":") {
            let digits = line.split(separator: " ").dropFirst().first { Int($0) != nil }
            return (digits.flatMap { Int($0) } ?? 0) * 1024
        }
        return 0
    }

    /// Runs this executable again with `arguments` and returns its standard output.
    static func runSelf(_ arguments: [String]) throws -> String {
        let p = Spawn()
        p.executableURL = URL(fileURLWithPath: CommandLine.arguments[0]).standardizedFileURL
        if !FileManager.default.isExecutableFile(atPath: p.executableURL!.path) {
            p.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        }
        p.arguments = arguments
        let out = Pipe()
        p.standardOutput = .pipe(out)
        try p.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return String(decoding: data, as: UTF8.self)
    }

    static func runProcess(_ executable: String, _ arguments: [String]) throws -> (Int32, String) {
        let p = Spawn()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = [executable] + arguments
        let out = Pipe()
        p.standardOutput = .pipe(out)
        try p.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return (p.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    static func mb(_ bytes: Int) -> String { String(format: "%.2f MB", Double(bytes) / 1_000_000) }
}

/// This executable again, as a helper (a server the measured code must not share a process with). It prints
/// one line when ready and runs until its standard input closes.
final class HelperProcess {
    let process = Spawn()
    let input = Pipe()
    /// The helper's first line of output.
    let readyLine: String

    init(_ arguments: [String]) throws {
        process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        process.arguments = arguments
        let out = Pipe()
        process.standardOutput = .pipe(out)
        process.standardInput = .pipe(input)
        try process.run()
        var line = Data()
        while let byte = try out.fileHandleForReading.read(upToCount: 1), !byte.isEmpty, byte != Data("\n".utf8) {
            line += byte
        }
        readyLine = String(decoding: line, as: UTF8.self)
    }

    func stop() {
        try? input.fileHandleForWriting.close()
        process.waitUntilExit()
    }
}
