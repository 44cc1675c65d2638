import ServiceLifecycle

/// The delivery worker as a long-running service: on SIGTERM it stops claiming and finishes the sends it holds.
public struct WorkerService: Service {
    let worker: DeliveryWorker

    public init(worker: DeliveryWorker) { self.worker = worker }

    public func run() async throws {
        try await cancelWhenGracefulShutdown {
            try await worker.run()
        }
    }
}
