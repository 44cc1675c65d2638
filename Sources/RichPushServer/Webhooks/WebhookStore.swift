import Foundation
import RichPushCore

/// Webhook endpoints and the outbox of events they hear. Events are written by the stores that record what they
/// tell (the queue's settle and claim, receipts, opens, live tokens), in the same transaction; this store manages
/// endpoints, hands the sender its work and writes what is not written elsewhere (tests, completions).
///
/// `SQLiteWebhookStore` and `PostgresWebhookStore` run the statements of ``WebhookSQL``; `MemoryWebhookStore` is
/// their twin for fast tests.
public protocol WebhookStore: Sendable {
    /// Adds an endpoint (its cursor at the app's newest event: it hears what happens from now on). Throws
    /// ``WebhookLimitReached`` past ``WebhookLimits/endpointsPerApp``.
    func create(_ endpoint: WebhookEndpoint) async throws -> WebhookEndpoint
    func endpoints(appID: String) async throws -> [WebhookEndpoint]
    func endpoint(appID: String, id: String) async throws -> WebhookEndpoint?
    /// Changes its URL, types, description and batch size; false when there is no such endpoint.
    func update(_ endpoint: WebhookEndpoint) async throws -> Bool
    /// Enables (its failures forgotten, tried at once) or disables it.
    func setEnabled(appID: String, id: String, enabled: Bool, now: Date) async throws -> Bool
    func remove(appID: String, id: String) async throws -> Bool
    /// A new secret; the one before keeps signing beside it until `now` + ``WebhookLimits/secretOverlap``.
    func rotateSecret(appID: String, id: String, secret: String, now: Date) async throws -> Bool
    /// Sends again what was recorded between `from` and `to`; false when there is no such endpoint, a replay of it
    /// is under way, or it is disabled.
    func replay(appID: String, id: String, from: Date, to: Date) async throws -> Bool
    /// Records events (each only when an endpoint of its app hears it).
    func append(_ events: [NewWebhookEvent], now: Date) async throws

    /// Leases up to `limit` endpoints with something to send, due and not disabled.
    func claim(owner: String, now: Date, lease: TimeInterval, limit: Int) async throws -> [WebhookEndpoint]
    /// The app's events after `after` (through `through` when given), at most `limit`, in order; with `hearing`,
    /// only those that endpoint hears.
    func events(
        appID: String,
        after: WebhookCursor,
        through: WebhookCursor?,
        limit: Int,
        hearing: WebhookEndpoint?
    )
        async throws -> [WebhookEvent]
    func replayEvents(
        appID: String,
        replay: WebhookReplay,
        limit: Int,
        hearing: WebhookEndpoint?
    ) async throws
        -> [WebhookEvent]
    /// The place of the app's newest event a reader may see (nil: none).
    func head(appID: String) async throws -> WebhookCursor?
    func acknowledge(id: String, owner: String, cursor: WebhookCursor, now: Date) async throws
    /// A replay's request acknowledged (`cursor` nil: it is done).
    func acknowledgeReplay(id: String, owner: String, cursor: WebhookCursor?, now: Date) async throws
    func fail(
        id: String,
        owner: String,
        batchEnd: WebhookCursor?,
        error: String,
        next: Date,
        disable: String?,
        now: Date
    ) async throws
    /// Extends the lease `owner` holds and returns the endpoint as it stands now (nil: the lease is lost or the
    /// endpoint gone): a turn follows a change made meanwhile (a new URL or secret, a deletion, a disabling).
    func extend(id: String, owner: String, until: Date) async throws -> WebhookEndpoint?
    /// ``acknowledge(id:owner:cursor:now:)`` and ``extend(id:owner:until:)`` at once: the sender's next request
    /// needs both (one write instead of two for each request acknowledged).
    func acknowledgeAndExtend(
        id: String,
        owner: String,
        cursor: WebhookCursor,
        now: Date,
        until: Date
    ) async throws -> WebhookEndpoint?
    func release(id: String, owner: String) async throws

    /// Endpoints by state (active, failing, disabled), for /metrics.
    func stateCounts() async throws -> [String: Int]
    /// Removes events older than `cutoff`, at most `limit`; how many went.
    func sweep(before cutoff: Date, limit: Int) async throws -> Int
    /// Records `notification.completed` for the open notifications of listening apps that are due a look and have
    /// ended; how many it recorded.
    func completeNotifications(now: Date, limit: Int) async throws -> Int
}

extension WebhookStore {
    /// Every event of the app after `after`, heard or not.
    public func events(
        appID: String,
        after: WebhookCursor,
        through: WebhookCursor?,
        limit: Int
    ) async throws
        -> [WebhookEvent]
    {
        try await events(appID: appID, after: after, through: through, limit: limit, hearing: nil)
    }

    public func replayEvents(appID: String, replay: WebhookReplay, limit: Int) async throws -> [WebhookEvent] {
        try await replayEvents(appID: appID, replay: replay, limit: limit, hearing: nil)
    }

    /// The two, one after the other (a store that can do both in one statement does).
    public func acknowledgeAndExtend(
        id: String,
        owner: String,
        cursor: WebhookCursor,
        now: Date,
        until: Date
    ) async throws -> WebhookEndpoint? {
        try await acknowledge(id: id, owner: owner, cursor: cursor, now: now)
        return try await extend(id: id, owner: owner, until: until)
    }
}

/// The app has ``WebhookLimits/endpointsPerApp`` endpoints already.
public struct WebhookLimitReached: Error {}

enum WebhookCompletion {
    /// The pause before an open notification is looked at again: 1 s doubled per look, to a minute (a large send
    /// is looked at a few times, each a read from its newest delivery back).
    static func pause(afterChecks checks: Int) -> TimeInterval {
        min(60, pow(2, Double(min(max(checks, 0), 10))))
    }

    /// The completion event's detail: the notification's counts by final state and their total.
    static func detail(_ counts: [(String, Int)]) -> JSONValue {
        var byState: [String: JSONValue] = [:]
        var total = 0
        for (state, n) in counts {
            byState[state] = .int(Int64(n))
            total += n
        }
        return .object(["counts": .object(byState), "total": .int(Int64(total))])
    }
}
