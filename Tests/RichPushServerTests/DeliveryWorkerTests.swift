import Foundation
import NIOConcurrencyHelpers
import RichPushAPNs
import RichPushCore
import RichPushFCM
import RichPushSandbox
import RichPushTestSupport
import RichPushTransport
import Testing

@testable import RichPushServer

/// The worker against the APNs and FCM emulators over real TLS HTTP/2, with faults injected.
@Suite struct DeliveryWorkerTests {
    @Test func everyDeliveryEndsInAnOutcomeThroughFaults() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("worker-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let sandbox = try await Sandbox.start(directory: dir, threads: 1)
        let apns = try sandbox.apnsClient(requestTimeout: 20)
        let fcm = try sandbox.fcmClient(requestTimeout: 20)

        let message = try PushMessage.decode(
            JSONValue.parse(#"{"title":"Worker","body":"through faults","media":"https://x.test/a.jpg"}"#)
        )
        let sender = ProviderDeliverySender(providers: try .sandbox(sandbox, apns: apns, fcm: fcm)) { id in
            id == "n1" ? message : nil
        }
        let queue = try SQLiteDeliveryQueue(path: dir.appendingPathComponent("queue.sqlite").path)
        let apnsTokens = (0..<300).map { String(format: "%064x", $0 + 1) }
        let fcmTokens = (0..<300).map { "fcm-device-token-\($0)" }
        try await queue.enqueue(
            apnsTokens.map { NewDelivery(notificationID: "n1", appID: "app", provider: .apns, target: .token($0)) }
        )
        try await queue.enqueue(
            fcmTokens.map { NewDelivery(notificationID: "n1", appID: "app", provider: .fcm, target: .token($0)) }
        )
        try await queue.enqueue([
            NewDelivery(notificationID: "missing", appID: "app", provider: .apns, target: .token(apnsTokens[0]))
        ])
        for t in apnsTokens.prefix(10) {
            sandbox.apns.registerDevice(t, topic: "com.example.app")
            sandbox.apns.unregisterDevice(t)
        }
        for t in fcmTokens.prefix(10) { sandbox.fcm.unregister(token: t) }
        sandbox.apns.inject(.status(503, reason: "ServiceUnavailable"), rate: 0.2)
        sandbox.fcm.inject(.unavailable(retryAfter: nil), rate: 0.2)

        let pruned = NIOLockedValueBox<[String]>([])
        let worker = DeliveryWorker(
            configuration: .init(
                batchSize: 100,
                concurrency: 100,
                lease: 30,
                retry: RetryPolicy(baseDelay: 0.01, maxDelay: 0.05, maxAttempts: 20)
            ),
            queue: queue,
            sender: sender,
            prune: { d, _ in
                pruned.withLockedValue { $0.append(d.target.stored) }
            }
        )
        let started = Date()
        // A liveness bound: quiet, the run ends in seconds; a loaded full run once left 2 queued at 60 s.
        while Date().timeIntervalSince(started) < 120 {
            let c = try await queue.counts()
            if (c[.queued] ?? 0) + (c[.leased] ?? 0) == 0 { break }
            if try await worker.runOnce() == 0 { try await Task.sleep(nanoseconds: 20_000_000) }
        }
        let counts = try await queue.counts()
        #expect(counts == [.delivered: 580, .pruned: 20, .failed: 1], "\(counts)")
        #expect(Set(pruned.withLockedValue { $0 }) == Set(apnsTokens.prefix(10) + fcmTokens.prefix(10)))
        // Each accepted once: the 503s were answered before processing, so the retries duplicated nothing.
        #expect(sandbox.apns.acceptedCount == 290 && sandbox.fcm.acceptedCount == 290)
        #expect((sandbox.apns.rejectedCounts["ServiceUnavailable"] ?? 0) > 20)
        let failed = try await queue.deliveries(notificationID: "missing")
        #expect(failed.first?.reason == "notification_missing")
        let retried = try await queue.deliveries(notificationID: "n1").filter { $0.attempts > 1 }
        #expect(!retried.isEmpty && retried.allSatisfy { $0.state.isFinal })
        await apns.shutdown()
        await fcm.shutdown()
        await sandbox.stop()
    }

    /// A send that never ends (it ignores cancellation) is given up at the deadline and rescheduled; the rest of
    /// its batch is recorded and the batch ends.
    @Test func aSendThatNeverEndsIsRescheduledAtTheDeadline() async throws {
        struct Sender: DeliverySender {
            let stuck: NIOLockedValueBox<[CheckedContinuation<Void, Never>]>
            func send(_ d: DeliveryRecord) async -> SendResult {
                if d.target == "stuck" {
                    await withCheckedContinuation { c in stuck.withLockedValue { $0.append(c) } }
                    return .delivered(providerID: "late")
                }
                return .delivered(providerID: "p-" + d.target.stored)
            }
        }
        let stuck = NIOLockedValueBox<[CheckedContinuation<Void, Never>]>([])
        let queue = MemoryDeliveryQueue()
        _ = await queue.enqueue(
            ["a", "stuck", "b", "c"].map {
                NewDelivery(notificationID: "n", appID: "app", provider: .apns, target: .token($0))
            }
        )
        var config = DeliveryWorker.Configuration(
            batchSize: 10,
            concurrency: 10,
            lease: 60,
            retry: RetryPolicy(baseDelay: 0.01, maxDelay: 0.05, maxAttempts: 5)
        )
        config.sendDeadline = 0.3
        let worker = DeliveryWorker(configuration: config, queue: queue, sender: Sender(stuck: stuck))
        let started = Date()
        #expect(try await worker.runOnce() == 4)
        let took = Date().timeIntervalSince(started)
        // Without the deadline the batch would never end (the stuck send is still waiting: nothing resumed it); with
        // it, it ends once the deadline passes. No upper bound: it measured the machine (60 s beside a release build).
        #expect(took >= 0.29, "\(took)")
        #expect(stuck.withLockedValue { $0.count } == 1)
        let records = Dictionary(
            uniqueKeysWithValues: await queue.deliveries(notificationID: "n").map { ($0.target, $0) }
        )
        #expect(
            records["a"]?.state == .delivered && records["b"]?.state == .delivered && records["c"]?.state == .delivered
        )
        #expect(
            records["stuck"]?.state == .queued && records["stuck"]?.reason == "send_deadline",
            "\(String(describing: records["stuck"]))"
        )
        // The abandoned send was cancelled; let it end so that nothing is left waiting.
        for c in stuck.withLockedValue({ $0 }) { c.resume() }
    }

    /// A delivery whose app or message could not be read (the database away) was never sent: it goes back to the
    /// queue untried, its attempt not counted, due a few seconds later. Counted, an outage spent a delivery's
    /// attempts without a send (eight make it fail for good) and pushed each next try further out by the backoff.
    @Test func aDeliveryNotSentForTheDatabaseKeepsItsAttempts() async throws {
        struct Sender: DeliverySender {
            func send(_ d: DeliveryRecord) async -> SendResult {
                d.target == "away" ? .failed(.retry, reason: "database_unavailable") : .delivered(providerID: "p")
            }
        }
        let queue = MemoryDeliveryQueue()
        _ = await queue.enqueue(
            ["away", "ok"].map { NewDelivery(notificationID: "n", appID: "app", provider: .apns, target: .token($0)) }
        )
        let worker = DeliveryWorker(
            configuration: .init(batchSize: 10, concurrency: 10, lease: 60, retry: RetryPolicy(maxAttempts: 1)),
            queue: queue,
            sender: Sender()
        )
        let before = Date()
        #expect(try await worker.runOnce() == 2)
        let after = Date()
        let records = Dictionary(
            uniqueKeysWithValues: await queue.deliveries(notificationID: "n").map { ($0.target, $0) }
        )
        let away = try #require(records["away"])
        // With one attempt allowed, a counted attempt would have failed it for good.
        #expect(away.state == .queued && away.attempts == 0 && away.reason == "database_unavailable", "\(away)")
        // 5 s give or take half, from the moment it was settled: between the run's start and its end (a loaded suite
        // took 24 s for this run).
        #expect(
            away.notBefore >= before.addingTimeInterval(2.4) && away.notBefore <= after.addingTimeInterval(7.6),
            "due \(away.notBefore.timeIntervalSince(before)) s after the run began, which took \(after.timeIntervalSince(before)) s"
        )
        #expect(records["ok"]?.state == .delivered)
    }

    /// A worker's leases as it knows them: a renewal that finds another holder marks the lease lost (counted once),
    /// and a send starts only on a lease held with more than the margin left; the metric names how each was lost.
    @Test func leasesLostOrEndingAreNotSentAndAreCounted() {
        let leases = HeldLeases()
        let t = Date()
        leases.add([1, 2, 3], until: t.addingTimeInterval(10))
        #expect(leases.extended([1, 2, 3], held: [1, 3], until: t.addingTimeInterval(20)) == 1)
        #expect(leases.extended([1, 2, 3], held: [1, 3], until: t.addingTimeInterval(20)) == 0)
        #expect(leases.mayStart(1, now: t, margin: 5) == .go)
        #expect(leases.mayStart(2, now: t, margin: 5) == .lost)
        #expect(leases.mayStart(3, now: t.addingTimeInterval(16), margin: 5) == .ending)
        #expect(leases.mayStart(4, now: t, margin: 5) == .lost)
        let metrics = ServerMetrics()
        metrics.leaseLost("taken", count: 3)
        metrics.leaseLost(HeldLeases.StartVerdict.ending.rawValue)
        let text = metrics.render()
        #expect(text.contains(#"richpush_leases_lost_total{how="taken"} 3"#), "\(text)")
        #expect(text.contains(#"richpush_leases_lost_total{how="ending"} 1"#))
    }

    /// The one sweep that keeps every send's deadline: a deadline fires at its time or within a granularity after,
    /// never before; a removed one never fires; the sweep stops when nothing is registered.
    @Test func sendDeadlinesFireOnTimeAndOnlyOnce() async throws {
        let deadlines = SendDeadlines(granularity: 0.02)
        let fired = NIOLockedValueBox<[String: Date]>([:])
        let start = Date()
        _ = deadlines.add(after: 0.1) { fired.withLockedValue { $0["a", default: Date()] = Date() } }
        let removed = deadlines.add(after: 0.05) { fired.withLockedValue { $0["removed"] = Date() } }
        _ = deadlines.add(after: 0.3) { fired.withLockedValue { $0["b", default: Date()] = Date() } }
        deadlines.remove(removed)
        for _ in 0..<200 where deadlines.count > 0 { try await Task.sleep(nanoseconds: 10_000_000) }
        let times = fired.withLockedValue { $0 }
        #expect(times["removed"] == nil)
        let a = try #require(times["a"]).timeIntervalSince(start)
        let b = try #require(times["b"]).timeIntervalSince(start)
        #expect(a >= 0.1 && b >= 0.3 && a < b, "a \(a) b \(b)")
        #expect(deadlines.count == 0)
        // Registered again after the sweep stopped: it starts again.
        let again = NIOLockedValueBox(false)
        _ = deadlines.add(after: 0.01) { again.withLockedValue { $0 = true } }
        for _ in 0..<200 where !again.withLockedValue({ $0 }) { try await Task.sleep(nanoseconds: 10_000_000) }
        #expect(again.withLockedValue { $0 })
    }
}
