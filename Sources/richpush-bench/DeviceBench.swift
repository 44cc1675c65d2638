import ArgumentParser
import Foundation
import RichPushCore
import RichPushMedia
import RichPushSandbox
import RichPushTestSupport

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

struct DeviceBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "device",
        abstract:
            "The service-extension pipeline: overhead beyond the transfer for a 1 MB JPEG on loopback, and peak memory staging 10 MB vs a tiny image."
    )

    @Option(help: "Timed runs.")
    var runs = 60

    func run() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("richpush-device-bench-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let files = ["one.jpg": 1_000_000, "ten.jpg": 9_900_000, "tiny.jpg": 2_000]
        for (name, size) in files {
            try Data(MediaSamples.file(MediaSamples.jpeg(marker: 0xE1), size: size)).write(
                to: dir.appendingPathComponent(name)
            )
        }
        try Data(MediaSamples.file(MediaSamples.ftyp("mp42", ["isom"]), size: 49_000_000)).write(
            to: dir.appendingPathComponent("video.mp4")
        )
        // The server runs in its own process so that its buffers never count against the pipeline's memory.
        let server = try MediaServerProcess(directory: dir)
        defer { server.stop() }
        let base = "http://127.0.0.1:\(server.port)"

        // Transfer alone: the same URL read into memory by URLSession, no pipeline.
        let session = URLSession(configuration: .ephemeral)
        var transfer: [Double] = []
        for i in 0..<(runs + 5) {
            let t0 = Measure.now()
            let (data, _) = try await session.data(from: URL(string: base + "/one.jpg")!)
            precondition(data.count == 1_000_000)
            if i >= 5 { transfer.append(Measure.milliseconds(t0, Measure.now())) }
        }
        var config = RichNotificationProcessor.Configuration(fetch: FetchPolicy(allowInsecureHTTP: true))
        config.stagingBase = dir
        let processor = RichNotificationProcessor(configuration: config)
        let payload: JSONValue = [
            "aps": ["alert": "x", "mutable-content": 1], "rp": ["v": 1, "m": [["u": .string(base + "/one.jpg")]]],
        ]
        var pipeline: [Double] = []
        for i in 0..<(runs + 5) {
            let t0 = Measure.now()
            let n = await processor.process(payload: payload)
            let t1 = Measure.now()
            precondition(n.attachments.count == 1 && n.attachments[0].bytes == 1_000_000, "\(n.report.skipped)")
            if i >= 5 { pipeline.append(Measure.milliseconds(t0, t1)) }
            try? FileManager.default.removeItem(at: n.attachments[0].file.deletingLastPathComponent())
        }
        let p = Measure.median(pipeline)
        let t = Measure.median(transfer)
        print("device pipeline: 1 MB JPEG on loopback, \(runs) runs")
        print(
            String(
                format: "  payload → staged attachment: median %.2f ms (p90 %.2f)",
                p,
                Measure.percentile(pipeline, 0.9)
            )
        )
        print(String(format: "  transfer alone (URLSession into memory): median %.2f ms", t))
        print(String(format: "  overhead beyond the transfer: %.2f ms", p - t))

        let tiny = try Measure.runSelf(["device-memory-probe", base + "/tiny.jpg", dir.path]).trimmingCharacters(
            in: .whitespacesAndNewlines
        )
        let ten = try Measure.runSelf(["device-memory-probe", base + "/ten.jpg", dir.path]).trimmingCharacters(
            in: .whitespacesAndNewlines
        )
        guard let tinyPeak = Int(tiny.split(separator: " ").first ?? ""),
            let tenPeak = Int(ten.split(separator: " ").first ?? "")
        else {
            print("  memory probe failed: \(tiny) / \(ten)")
            throw ExitCode(1)
        }
        print(
            "  peak memory, whole process, staging a 2 KB image: \(Measure.mb(tinyPeak)); a 9.9 MB image: \(Measure.mb(tenPeak))"
        )
        print("  difference: \(Measure.mb(tenPeak - tinyPeak))")
        let video = try Measure.runSelf(["device-memory-probe", base + "/video.mp4", dir.path]).trimmingCharacters(
            in: .whitespacesAndNewlines
        )
        if let videoPeak = Int(video.split(separator: " ").first ?? "") {
            print(
                "  a 49 MB MP4: \(Measure.mb(videoPeak)), \(Measure.mb(videoPeak - tinyPeak)) more than the tiny image"
            )
        }
    }
}

/// Hidden: processes one URL in a fresh process and prints its peak resident memory in bytes.
struct DeviceMemoryProbe: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "device-memory-probe", shouldDisplay: false)

    @Argument var url: String
    @Argument var directory: String

    func run() async throws {
        var config = RichNotificationProcessor.Configuration(fetch: FetchPolicy(allowInsecureHTTP: true))
        config.stagingBase = URL(fileURLWithPath: directory)
        let payload: JSONValue = [
            "aps": ["alert": "x", "mutable-content": 1], "rp": ["v": 1, "m": [["u": .string(url)]]],
        ]
        let n = await RichNotificationProcessor(configuration: config).process(payload: payload)
        guard n.attachments.count == 1 else {
            print("0 failed: \(n.report.skipped)")
            return
        }
        try? FileManager.default.removeItem(at: n.attachments[0].file.deletingLastPathComponent())
        print("\(Measure.peakResidentBytes()) bytes")
    }
}

/// Hidden: serves a folder over HTTP on loopback until its standard input closes; prints the port first.
struct ServeMedia: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "serve-media", shouldDisplay: false)

    @Argument var directory: String

    func run() async throws {
        let names = try FileManager.default.contentsOfDirectory(atPath: directory)
        var routes: [String: MediaRoute] = [:]
        for name in names { routes["/" + name] = .file(path: directory + "/" + name, contentType: "image/jpeg") }
        let server = MediaTestServer(routes: routes)
        let port = try await server.start()
        FileHandle.standardOutput.write(Data("\(port)\n".utf8))
        _ = FileHandle.standardInput.readDataToEndOfFile()
        try await server.shutdown()
    }
}

/// `serve-media` in a child process.
final class MediaServerProcess {
    let helper: HelperProcess
    let port: Int

    init(directory: URL) throws {
        helper = try HelperProcess(["serve-media", directory.path])
        guard let p = Int(helper.readyLine) else { throw ExitCode(1) }
        port = p
    }

    func stop() { helper.stop() }
}
