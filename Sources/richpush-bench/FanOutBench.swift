import ArgumentParser
import Foundation
import RichPushServer

struct FanOutBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fanout",
        abstract: "Register N devices in the embedded SQLite registry, then fan one notification out to all of them into the durable queue: time and peak memory."
    )

    @Option(help: "Registered devices.") var devices = 1_000_000

    func run() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("richpush-fanout-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("server.sqlite").path
        do {
            let registry = try SQLiteDeviceRegistry(path: path)
            let t0 = Measure.now()
            var batch: [Device] = []
            batch.reserveCapacity(10_000)
            for i in 0..<devices {
                let ios = i % 3 != 0
                batch.append(Device(appID: "app", token: ios ? String(format: "%064x", i + 1) : "fcm-token-\(i)", platform: ios ? .ios : .android, userID: "user-\(i / 2)", tags: i % 10 == 0 ? ["vip"] : []))
                if batch.count == 10_000 {
                    try await registry.upsert(contentsOf: batch)
                    batch.removeAll(keepingCapacity: true)
                }
            }
            if !batch.isEmpty { try await registry.upsert(contentsOf: batch) }
            print(String(format: "fanout: registered %d devices in %.1f s", devices, Double(Measure.now() - t0) / 1e9))
        }
        let out = try Measure.runSelf(["fanout-probe", path]).trimmingCharacters(in: .whitespacesAndNewlines)
        print("  " + out)
    }
}

/// Hidden: opens the prepared database and fans out once, in a fresh process; prints time and memory.
struct FanOutProbe: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "fanout-probe", shouldDisplay: false)
    @Argument var path: String

    func run() async throws {
        let backend = try SQLiteBackend(path: path)
        let queue = backend.queue
        let before = Measure.residentBytes()
        let t0 = Measure.now()
        let n = try await backend.fanOut(notificationID: "broadcast", appID: "app", audience: .all, notBefore: Date(), expiresAt: nil, spread: 0)
        let seconds = Double(Measure.now() - t0) / 1e9
        let queued = try await queue.counts()[.queued] ?? 0
        print(String(format: "fan-out to %d devices: %.1f s (%.0f deliveries/s), %d queued; peak memory %@ (resident %@ before)", n, seconds, Double(n) / seconds, queued, Measure.mb(Measure.peakResidentBytes()), Measure.mb(before)))
    }
}
