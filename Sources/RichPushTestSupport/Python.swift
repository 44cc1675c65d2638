import Foundation

/// Runs a Python script with `python3` from PATH (Scripts/test puts the project's `.venv/bin` first), feeding it
/// standard input, for the checks the tests trust to an independent implementation.
public enum Python {
    public struct Result: Sendable {
        public var status: Int32
        public var output: Data
    }

    public static func run(_ script: String, stdin: String = "") throws -> Result {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = ["python3", "-c", script]
        let input = Pipe()
        let output = Pipe()
        p.standardInput = input
        p.standardOutput = output
        try p.run()
        input.fileHandleForWriting.write(Data(stdin.utf8))
        try input.fileHandleForWriting.close()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return Result(status: p.terminationStatus, output: data)
    }
}
