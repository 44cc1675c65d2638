import ArgumentParser
import Foundation
import RichPushServer

struct FanOutBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fanout",
        abstract:
            "Register N devices, then fan one notification out to all of them into the durable queue: time and peak memory.",
        discussion: """
            Embedded SQLite by default. With --database postgres://… the devices are written by the database itself
            (generate_series: registration is not what is measured) and the fan-out is the server's own path: a
            notification accepted for all devices, then its fan-out run inside the database in chunks.
            """
    )

    @Option(help: "Registered devices.") var devices = 1_000_000
    @Option(help: "A PostgreSQL database to use (its tables are emptied first).") var database: String?
    @Option(help: "Devices per fan-out transaction.") var chunk = 50_000

    func run() async throws {
        if let database {
            let backend = try await PostgresBackend.open(
                url: database,
                sealer: nil,
                nodeID: "bench",
                timeout: .seconds(600)
            )
            let db = backend.database
            let t0 = Measure.now()
            try await db.rows(
                "TRUNCATE devices, device_tags, device_topics, deliveries, notifications RESTART IDENTITY CASCADE"
            )
            // Two of three on APNs; every tenth tagged.
            try await db.rows(
                """
                INSERT INTO devices (app_id, token, platform, provider, user_id, updated_at)
                SELECT 'app', CASE WHEN i % 3 <> 0 THEN lpad(to_hex(i), 64, '0') ELSE 'fcm-token-' || i END,
                    CASE WHEN i % 3 <> 0 THEN 'ios' ELSE 'android' END, CASE WHEN i % 3 <> 0 THEN 'apns' ELSE 'fcm' END,
                    'user-' || (i / 2), now()
                FROM generate_series(1, \(devices)) AS i
                """
            )
            try await db.rows(
                "INSERT INTO device_tags (device_id, tag) SELECT id, 'vip' FROM devices WHERE id % 10 = 0"
            )
            try await db.rows("VACUUM ANALYZE devices")
            print(
                String(
                    format: "fanout: %d devices written in PostgreSQL in %.1f s",
                    devices,
                    Double(Measure.now() - t0) / 1e9
                )
            )
            await backend.close()
            let out = try Measure.runSelf(["fanout-probe", "--database", database, "--chunk", String(chunk)])
                .trimmingCharacters(in: .whitespacesAndNewlines)
            print("  " + out)
            return
        }
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("richpush-fanout-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("server.sqlite").path
        do {
            let registry = try SQLiteDeviceRegistry(path: path)
            let t0 = Measure.now()
            try await registerInBatches(registry, count: devices) { i in
                let ios = i % 3 != 0
                return Device(
                    appID: "app",
                    token: ios ? String(format: "%064x", i + 1) : "fcm-token-\(i)",
                    platform: ios ? .ios : .android,
                    userID: "user-\(i / 2)",
                    tags: i % 10 == 0 ? ["vip"] : []
                )
            }
            print(String(format: "fanout: registered %d devices in %.1f s", devices, Double(Measure.now() - t0) / 1e9))
        }
        let out = try Measure.runSelf(["fanout-probe", path]).trimmingCharacters(in: .whitespacesAndNewlines)
        print("  " + out)
    }
}

/// Hidden: opens the prepared database and fans out once, in a fresh process; prints time and memory.
struct FanOutProbe: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "fanout-probe", shouldDisplay: false)
    @Argument var path: String?
    @Option var database: String?
    @Option var chunk = 50_000

    func run() async throws {
        let backend: any StorageBackend
        if let database {
            backend = try await PostgresBackend.open(
                url: database,
                sealer: nil,
                nodeID: "bench",
                chunk: chunk,
                timeout: .seconds(600)
            )
        } else {
            backend = try SQLiteBackend(path: path ?? "")
        }
        let before = Measure.residentBytes()
        let t0 = Measure.now()
        let n: Int
        if database != nil {
            // The server's path: accepted with its fan-out pending, then the fan-out (chunks inside the database).
            let plan = AcceptPlan(
                notification: .init(
                    id: "broadcast",
                    appID: "app",
                    message: ["title": "t"],
                    response: .null,
                    createdAt: Date()
                ),
                idempotencyKey: nil,
                audience: .all,
                notBefore: Date(),
                expiresAt: nil
            )
            _ = try await backend.intake.accept(plan) { _ in .null }
            n = try await backend.intake.completeFanOut(notificationID: "broadcast")
        } else {
            n = try await backend.fanOut(
                FanOutRequest(notificationID: "broadcast", appID: "app", audience: .all, notBefore: Date())
            )
        }
        let seconds = Double(Measure.now() - t0) / 1e9
        let queued = try await backend.queue.counts(notificationID: "broadcast")[.queued] ?? 0
        print(
            String(
                format:
                    "fan-out to %d devices (%@): %.1f s (%.0f deliveries/s), %d queued; peak memory %@ (resident %@ before)",
                n,
                database != nil ? "PostgreSQL, chunks of \(chunk)" : "SQLite",
                seconds,
                Double(n) / seconds,
                queued,
                Measure.mb(Measure.peakResidentBytes()),
                Measure.mb(before)
            )
        )
        await backend.close()
    }
}

/// Hidden: registers N iOS devices of one app straight into a server's SQLite file (the server may be running: the
/// file is shared under SQLite's locking), for benchmarks that then send to all of them through the API.
struct SeedDevices: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "seed-devices", shouldDisplay: false)
    @Option var db: String
    @Option var app: String
    @Option var devices = 1_000_000

    func run() async throws {
        guard (1...50_000_000).contains(devices) else { throw ValidationError("--devices must be from 1 to 50000000.") }
        let registry = try SQLiteDeviceRegistry(path: db)
        let t0 = Measure.now()
        try await registerInBatches(registry, count: devices) { i in
            Device(appID: app, token: String(format: "%064x", i + 1), platform: .ios)
        }
        print(String(format: "registered %d devices in %.1f s", devices, Double(Measure.now() - t0) / 1e9))
    }
}

/// Registers `count` devices, 10,000 per upsert.
func registerInBatches(_ registry: SQLiteDeviceRegistry, count: Int, device: (Int) -> Device) async throws {
    var batch: [Device] = []
    batch.reserveCapacity(10_000)
    for i in 0..<count {
        batch.append(device(i))
        if batch.count == 10_000 {
            try await registry.upsert(contentsOf: batch)
            batch.removeAll(keepingCapacity: true)
        }
    }
    if !batch.isEmpty { try await registry.upsert(contentsOf: batch) }
}
