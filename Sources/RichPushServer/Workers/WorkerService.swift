import Foundation
import NIOConcurrencyHelpers
import ServiceLifecycle

/// The delivery worker as a long-running service: on a graceful shutdown (SIGTERM) it stops claiming and finishes
/// the sends it holds, recording every outcome; the group's cancellation after that abandons them (their leases run
/// out and they are claimed again).
public struct WorkerService: Service {
    let worker: DeliveryWorker

    public init(worker: DeliveryWorker) { self.worker = worker }

    public func run() async {
        let asked = DrainStart()
        await withGracefulShutdownHandler {
            await worker.run()
        } onGracefulShutdown: {
            asked.set(Date())
            worker.logger.notice("draining: no more claims; the sends this worker holds end and are recorded")
            worker.stop()
        }
        if let since = asked.value {
            worker.logger.notice(
                "drained: every send this worker held has ended and its outcome is recorded",
                metadata: ["seconds": "\(String(format: "%.2f", Date().timeIntervalSince(since)))"]
            )
        }
    }
}

/// When the drain was asked for (set once, from the shutdown handler's task).
final class DrainStart: Sendable {
    private let box = NIOLockedValueBox<Date?>(nil)
    func set(_ date: Date) { box.withLockedValue { $0 = date } }
    var value: Date? { box.withLockedValue { $0 } }
}
