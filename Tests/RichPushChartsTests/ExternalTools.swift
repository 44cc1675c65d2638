import Foundation
import RichPushTestSupport
import Testing

/// Runs the independent checkers the chart tests trust: `pngcheck` and Python's zlib and Pillow.
/// `.ci/run` installs them; a missing one fails the test with the install command, never skips it.
enum ExternalTools {
    struct Result {
        var status: Int32
        var output: String
    }

    static func run(_ executable: String, _ arguments: [String]) async throws -> Result {
        let run = try await ChildProcess.run(
            URL(fileURLWithPath: "/usr/bin/env"),
            [executable] + arguments,
            mergeErrors: true
        )
        return Result(status: run.status, output: run.output)
    }

    static func python(_ script: String, _ arguments: [String] = []) async throws -> Result {
        try await run("python3", ["-c", script] + arguments)
    }

    static func requirePillow() async throws {
        let r = try await python("import PIL")
        try #require(r.status == 0, "Pillow is missing: python3 -m pip install Pillow (see .ci/run)")
    }

    static func requirePngcheck() async throws {
        let r = try await run("pngcheck", ["-h"])
        try #require(r.status != 127, "pngcheck is missing: apt-get install pngcheck (see .ci/run)")
    }

    static func temporaryDirectory() throws -> URL {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("richpush-charts-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        return dir
    }
}
