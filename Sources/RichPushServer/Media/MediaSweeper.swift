import Foundation
import Logging
import ServiceLifecycle

/// Deletes hosted media past its retention, at start and then every `interval`, until the server stops.
public struct MediaSweeper: Service {
    let store: MediaStore
    /// Seconds a file is kept after the last moment a device may fetch it.
    let retention: TimeInterval
    let interval: TimeInterval
    let metrics: ServerMetrics?
    let logger: Logger

    public init(
        store: MediaStore,
        retention: TimeInterval,
        interval: TimeInterval = 3600,
        metrics: ServerMetrics? = nil,
        logger: Logger = Logger(label: "richpush.media")
    ) {
        self.logger = logger
        self.store = store
        self.retention = retention
        self.interval = interval
        self.metrics = metrics
    }

    public func run() async {
        await Periodic.repeatUntilShutdown("media sweep", logger: logger) { [store, retention, metrics, interval] in
            let (files, bytes) = store.sweep(retention: retention)
            metrics?.mediaSwept(files: files, bytes: bytes)
            return interval
        }
    }
}
