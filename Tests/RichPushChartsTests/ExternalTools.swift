import Foundation
import Testing

/// Runs the independent checkers the chart tests trust: `pngcheck` and Python's zlib and Pillow.
/// `.ci/run` installs them; a missing one fails the test with the install command, never skips it.
enum ExternalTools {
    struct Result {
        var status: Int32
        var output: String
    }

    static func run(_ executable: String, _ arguments: [String]) throws -> Result {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = [executable] + arguments
        let pipe = Pipe()
        p.standardOutput = pipe
        p.standardError = pipe
        try p.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return Result(status: p.terminationStatus, output: String(decoding: data, as: UTF8.self))
    }

    static func python(_ script: String, _ arguments: [String] = []) throws -> Result {
        try run("python3", ["-c", script] + arguments)
    }

    static func requirePillow() throws {
        let r = try python("import PIL")
        try #require(r.status == 0, "Pillow is missing: python3 -m pip install Pillow (see .ci/run)")
    }

    static func requirePngcheck() throws {
        let r = try run("pngcheck", ["-h"])
        try #require(r.status != 127, "pngcheck is missing: apt-get install pngcheck (see .ci/run)")
    }

    static func temporaryDirectory() throws -> URL {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("richpush-charts-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        return dir
    }
}
