import Foundation

/// Runs a Python script with `python3` from PATH (Scripts/test puts the project's `.venv/bin` first), feeding it
/// standard input, for the checks the tests trust to an independent implementation.
public enum Python {
    public struct Result: Sendable {
        public var status: Int32
        public var output: Data
    }

    public static func run(_ script: String, stdin: String = "") async throws -> Result {
        let run = try await ChildProcess.run(
            URL(fileURLWithPath: "/usr/bin/env"),
            ["python3", "-c", script],
            stdin: Data(stdin.utf8)
        )
        return Result(status: run.status, output: run.stdout)
    }
}
