import Foundation
import ServiceLifecycle

/// Deletes hosted media past its retention, at start and then every `interval`, until the server stops.
public struct MediaSweeper: Service {
    let store: MediaStore
    /// Seconds a file is kept after the last moment a device may fetch it.
    let retention: TimeInterval
    let interval: TimeInterval
    let metrics: ServerMetrics?

    public init(
        store: MediaStore,
        retention: TimeInterval,
        interval: TimeInterval = 3600,
        metrics: ServerMetrics? = nil
    ) {
        self.store = store
        self.retention = retention
        self.interval = interval
        self.metrics = metrics
    }

    public func run() async throws {
        // Cancellation (the server stopping) ends the loop; it is not an error.
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                let (files, bytes) = store.sweep(retention: retention)
                metrics?.mediaSwept(files: files, bytes: bytes)
                try await Task.sleep(nanoseconds: UInt64(interval * 1e9))
            }
        }
    }
}
