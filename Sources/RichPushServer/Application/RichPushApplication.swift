import Hummingbird
import Logging
import RichPushSandbox
import ServiceLifecycle
import UnixSignals

/// The whole server, built by ``buildApplication(_:adminKey:logger:onRunning:)``: the HTTP API and the media
/// listener, the database, the delivery workers, periodic jobs and, in sandbox mode, the emulators, run as one
/// ``ServiceGroup``. `richpush serve` runs it until a signal; `richpush demo` and the tests start one in process.
public struct RichPushApplication: Service {
    /// The API the router serves (its stores, media service and receipts).
    public let api: RichPushAPI
    /// The emulators in this process, in sandbox mode (nil when the server sends to a sandbox elsewhere, or to
    /// Apple and Google).
    public let sandbox: Sandbox?
    public var backend: any StorageBackend { api.backend }
    /// How many connections the media fast path went in front of (and missed: then media goes through the router).
    public let mediaFastPath: MediaFastPath.Status
    let application: Application<RouterResponder<APIRequestContext>>

    /// Runs until the task is cancelled or the group's shutdown is triggered.
    public func run() async throws {
        try await application.run()
    }

    /// Runs until one of the signals (or the task's cancellation) stops it: the listener closes, the workers
    /// drain what they hold, then the clients, the sandbox and the database close, in that order.
    public func run(gracefulShutdownSignals signals: [UnixSignal]) async throws {
        try await application.runService(gracefulShutdownSignals: signals)
    }
}
