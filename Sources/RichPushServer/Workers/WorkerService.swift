import ServiceLifecycle

/// The delivery worker as a long-running service: on a graceful shutdown (SIGTERM) it stops claiming and finishes
/// the sends it holds, recording every outcome; the group's cancellation after that abandons them (their leases run
/// out and they are claimed again).
public struct WorkerService: Service {
    let worker: DeliveryWorker

    public init(worker: DeliveryWorker) { self.worker = worker }

    public func run() async {
        await withGracefulShutdownHandler {
            await worker.run()
        } onGracefulShutdown: {
            worker.stop()
        }
    }
}
