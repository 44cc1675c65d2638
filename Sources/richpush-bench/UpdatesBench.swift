import ArgumentParser
import Foundation
import RichPushCore
import RichPushServer

struct UpdatesBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "updates",
        abstract:
            "What updates in place cost: accepting a version for N devices, and the worker's check before each batch.",
        discussion: """
            Embedded SQLite (or --database postgres://…, its tables emptied first). N devices are registered and a
            notification fanned out to all of them. Then, with a sender that answers at once (the provider is not
            what is measured), the worker drains:
              1. a plain notification without the version check, and
              2. a plain notification with it (one read per batch finds no family),
            and after two updates are accepted (each timed: the root's N targets copied, the version before
            superseded), 3. the newest version with the check (families read, older sends in flight looked up).
            Each drain reports the worker's CPU per 1,000 deliveries (the process's, from getrusage).
            """
    )

    @Option(help: "Registered devices.") var devices = 100_000
    @Option(help: "A PostgreSQL database to use (its tables are emptied first).") var database: String?
    @Option(help: "Deliveries per claimed batch.") var batch = 200

    struct Instant: DeliverySender {
        func send(_ delivery: DeliveryRecord) async -> SendResult { .delivered(providerID: nil) }
    }

    func run() async throws {
        let backend: any StorageBackend
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("richpush-updates-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        if let database {
            let pg = try await PostgresBackend.open(url: database, sealer: nil, nodeID: "bench", timeout: .seconds(600))
            try await pg.database.rows(
                "TRUNCATE devices, device_tags, device_topics, deliveries, notifications RESTART IDENTITY CASCADE"
            )
            backend = pg
        } else {
            backend = try SQLiteBackend(path: dir.appendingPathComponent("server.sqlite").path)
        }
        var list: [Device] = []
        for i in 0..<devices {
            list.append(Device(appID: "app", token: String(format: "%064x", i + 1), platform: .ios))
            if list.count == 10_000 {
                try await backend.registry.upsert(contentsOf: list)
                list.removeAll(keepingCapacity: true)
            }
        }
        if !list.isEmpty { try await backend.registry.upsert(contentsOf: list) }

        func accept(_ id: String) async throws {
            let plan = AcceptPlan(
                notification: .init(
                    id: id,
                    appID: "app",
                    message: ["alert": "v0", "collapse_id": "c"],
                    response: .null,
                    createdAt: Date()
                ),
                idempotencyKey: nil,
                audience: .all,
                notBefore: Date(),
                expiresAt: nil
            )
            _ = try await backend.intake.accept(plan) { _ in .null }
            _ = try await backend.intake.completeFanOut(notificationID: id)
        }
        func drain(_ label: String, check: Bool) async throws {
            let worker = DeliveryWorker(
                configuration: .init(owner: "bench-\(label)", batchSize: batch, concurrency: batch, lease: 120),
                queue: backend.queue,
                sender: Instant(),
                updates: check ? backend.updates : nil
            )
            let (c0, t0) = (Measure.cpuSeconds(), Measure.now())
            var n = 0
            while true {
                let handled = try await worker.runOnce()
                if handled == 0 { break }
                n += handled
            }
            let cpu = Measure.cpuSeconds() - c0
            print(
                String(
                    format: "  %@: %d deliveries in %.2f s, %.1f ms CPU per 1,000",
                    label,
                    n,
                    Double(Measure.now() - t0) / 1e9,
                    cpu * 1000 / Double(max(1, n)) * 1000
                )
            )
        }
        print("updates: \(devices) devices, \(database == nil ? "SQLite" : "PostgreSQL"), batches of \(batch)")
        try await accept("plain-a")
        try await drain("plain, no check", check: false)
        try await accept("plain-b")
        try await drain("plain, with the check", check: true)
        try await accept("root")
        for v in 1...2 {
            let t0 = Measure.now()
            let u = try await backend.updates.accept(
                UpdatePlan(
                    notification: .init(
                        id: "v\(v)",
                        appID: "app",
                        message: ["alert": .string("v\(v)"), "collapse_id": "c"],
                        response: .null,
                        createdAt: Date()
                    ),
                    rootID: "root",
                    idempotencyKey: nil,
                    expiresAt: nil
                )
            ) { _, _, _ in .null }
            print(
                String(
                    format: "  update %d accepted in %.0f ms: %d queued, %d superseded",
                    v,
                    Double(Measure.now() - t0) / 1e6,
                    u.queued,
                    u.superseded
                )
            )
        }
        try await drain("version 2, with the check", check: true)
        await backend.close()
    }
}
