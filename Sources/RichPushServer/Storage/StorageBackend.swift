import Foundation
import Logging
import ServiceLifecycle

/// The database behind the server: its stores, the intake that writes across them, and the fast paths only it can
/// take (a fan-out inside the database, group commit). The server holds one backend and never asks which it is.
///
/// `SQLiteBackend` is the embedded default; `MemoryBackend` is its twin for fast tests and behaves like it (a
/// registry audience is accepted with its fan-out pending, then completed; the conformance suite runs on both).
public protocol StorageBackend: Sendable {
    var store: any ServerStore { get }
    var registry: any DeviceRegistry { get }
    var queue: any DeliveryQueue { get }
    var intake: any NotificationIntake { get }
    /// Devices' receipts, one per delivery.
    var receipts: any ReceiptStore { get }
    /// Live Activity push-to-start and update tokens.
    var liveTokens: any LiveTokenStore { get }
    /// Updates in place: new versions of a notification, and the check before each send.
    var updates: any NotificationUpdates { get }
    /// Bytes uploaded per app and day (the upload quota, counted where every node sees it).
    var uploads: any UploadLedger { get }
    /// Webhook endpoints and the outbox of their events.
    var webhooks: any WebhookStore { get }

    /// ``fanOut(_:)`` inside the database, which selects and inserts the rows in one statement per chunk; nil when
    /// it cannot (an audience its SQL does not express, or a backend without SQL), and the fan-out then goes through
    /// the registry and the queue.
    func fanOutInDatabase(_ request: FanOutRequest) async throws -> Int?

    /// ``countByProvider(appID:audience:)`` counted by the database; nil as for the fan-out.
    func countByProviderInDatabase(appID: String, audience: Audience) async throws -> [DeliveryProvider: Int]?

    /// Removes up to `limit` notifications accepted before `cutoff` whose deliveries have all ended, with their
    /// deliveries and receipts; returns how many went. Those still delivering stay for a later sweep.
    func sweepNotifications(before cutoff: Date, limit: Int) async throws -> Int

    /// Deletes an app with everything it holds (``AppDeletion``): its keys first, then its notifications (with their
    /// deliveries, receipts, opens and counts), devices and live tokens in chunks, then the app. false when there
    /// was no such app.
    func deleteApp(id: String) async throws -> Bool

    /// Empties again the tables of the apps deleted in the last day (what a request that began before the deletion
    /// wrote after it), and forgets those deleted before that; returns how many apps it looked at.
    func purgeDeletedApps(now: Date) async throws -> Int

    /// What this node knows of the database's health.
    var health: DatabaseHealth { get }

    /// Hosted media every node reaches, when nodes share the database (nil: each node's disk is the store).
    var sharedMedia: (any SharedMediaFiles)? { get }

    /// Whether an error means the database could not be reached (the API answers 503 and Retry-After).
    func isUnavailable(_ error: any Error) -> Bool

    /// "Deliveries were queued", told by the backend's stores when they queue some, heard by every worker of the
    /// cluster (on a database several nodes share, through it).
    var workQueued: WorkQueued { get }

    /// The backend's background work while the server runs, with the server's periodic jobs: on a database
    /// several nodes share, the jobs run on one node at a time (the leader), beside the listener and heartbeat;
    /// otherwise on this node. `onNodes` hears how many nodes are live.
    func backgroundServices(
        address: String,
        leaderJobs: [PeriodicJob],
        logger: Logger,
        onNodes: @escaping @Sendable (Int) -> Void
    ) -> [any Service]

    /// Closes connections (after the server stopped).
    func close() async
}

extension StorageBackend {
    public var sharedMedia: (any SharedMediaFiles)? { nil }
    public func isUnavailable(_ error: any Error) -> Bool { error is DatabaseUnavailable }
    public func backgroundServices(
        address: String,
        leaderJobs: [PeriodicJob],
        logger: Logger,
        onNodes: @escaping @Sendable (Int) -> Void
    ) -> [any Service] {
        leaderJobs.isEmpty ? [] : [LocalPeriodicJobs(jobs: leaderJobs, logger: logger)]
    }
    public func close() async {}
}

/// Periodic jobs on a node that is the only one: run at their intervals until the server stops.
struct LocalPeriodicJobs: Service {
    let jobs: [PeriodicJob]
    let logger: Logger

    func run() async {
        let schedule = JobSchedule(jobs)
        await Periodic.repeatUntilShutdown("periodic jobs", logger: logger) { [logger] in
            try await schedule.runDue(logger: logger)
        }
    }
}

/// One fan-out outside a notification's intake: the deliveries of `notificationID` for every device of `appID`'s
/// `audience`, due from `notBefore` (spread evenly over `spread` seconds), expiring at `expiresAt`.
public struct FanOutRequest: Sendable {
    public var notificationID: String
    public var appID: String
    public var audience: Audience
    public var notBefore: Date
    public var expiresAt: Date?
    public var spread: TimeInterval

    public init(
        notificationID: String,
        appID: String,
        audience: Audience,
        notBefore: Date,
        expiresAt: Date? = nil,
        spread: TimeInterval = 0
    ) {
        self.notificationID = notificationID
        self.appID = appID
        self.audience = audience
        self.notBefore = notBefore
        self.expiresAt = expiresAt
        self.spread = spread
    }
}

/// A send spread over a window: of `count` deliveries from a start, the i-th is due `step × i` after it, the last
/// at the window's end, so that the media downloads they cause spread too.
public enum Spread {
    public static func step(_ window: TimeInterval, count: Int) -> TimeInterval {
        window > 0 && count > 1 ? window / Double(count - 1) : 0
    }
}

extension StorageBackend {
    /// Queues a delivery for every device of the audience, outside a notification's intake (tools and benchmarks);
    /// returns how many. Spread as the intake spreads (``Spread``). In the database when it can; else device by
    /// device through the registry and the queue (direct targets, and the in-memory twin).
    public func fanOut(_ r: FanOutRequest) async throws -> Int {
        if r.audience.directTargets == nil, let n = try await fanOutInDatabase(r) { return n }
        return try await FanOut().enqueue(r, registry: registry, queue: queue)
    }

    /// The deliveries each provider would get for the audience, without creating any (a dry run).
    public func countByProvider(appID: String, audience: Audience) async throws -> [DeliveryProvider: Int] {
        if audience.directTargets == nil,
            let counted = try await countByProviderInDatabase(appID: appID, audience: audience)
        {
            return counted
        }
        return try await FanOut().count(appID: appID, audience: audience, registry: registry)
    }
}
