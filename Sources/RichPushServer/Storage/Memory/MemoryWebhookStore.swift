import Foundation
import NIOConcurrencyHelpers
import RichPushCore

/// The in-memory twin of ``SQLiteWebhookStore``: the same rules (a bound per app, a cursor per endpoint, events
/// only for an app that hears their type), nothing kept across a restart. The memory queue writes the events of its
/// settles here, as the SQL queues write theirs in the settle's transaction.
public final class MemoryWebhookStore: WebhookStore {
    struct State {
        var endpoints: [String: (WebhookEndpoint, owner: String?, until: Date?)] = [:]
        var events: [WebhookEvent] = []
        var nextSeq: Int64 = 1
        /// Open notifications of listening apps: app and looks so far, and when the next is due.
        var open: [String: (app: String, checks: Int, next: Date)] = [:]
    }
    let state = NIOLockedValueBox(State())
    /// Whether a notification has ended (nil: it is gone), with its counts by state when it has.
    let ended: @Sendable (String) async -> (done: Bool, counts: [(String, Int)])?

    init(ended: @escaping @Sendable (String) async -> (done: Bool, counts: [(String, Int)])?) { self.ended = ended }

    public func create(_ endpoint: WebhookEndpoint) async throws -> WebhookEndpoint {
        try state.withLockedValue { s in
            guard s.endpoints.values.filter({ $0.0.appID == endpoint.appID }).count < WebhookLimits.endpointsPerApp
            else { throw WebhookLimitReached() }
            var e = endpoint
            if let last = s.events.last(where: { $0.appID == e.appID }) { e.cursor = last.cursor }
            s.endpoints[e.id] = (e, nil, nil)
            return e
        }
    }

    public func endpoints(appID: String) async throws -> [WebhookEndpoint] {
        state.withLockedValue { s in
            s.endpoints.values.map(\.0).filter { $0.appID == appID }.sorted {
                ($0.createdAt, $0.id) < ($1.createdAt, $1.id)
            }
        }
    }

    public func endpoint(appID: String, id: String) async throws -> WebhookEndpoint? {
        state.withLockedValue { s in s.endpoints[id].map(\.0).flatMap { $0.appID == appID ? $0 : nil } }
    }

    /// Changes the endpoint if the app has it; whether it did.
    /// Changes the app's endpoint under the lock; false when there is none, or `when` refuses it as it stands.
    private func change(
        _ appID: String,
        _ id: String,
        when: (WebhookEndpoint) -> Bool = { _ in true },
        _ body: (inout WebhookEndpoint) -> Void
    ) -> Bool {
        state.withLockedValue { s in
            guard var entry = s.endpoints[id], entry.0.appID == appID, when(entry.0) else { return false }
            body(&entry.0)
            s.endpoints[id] = entry
            return true
        }
    }

    public func update(_ endpoint: WebhookEndpoint) async throws -> Bool {
        change(endpoint.appID, endpoint.id) { e in
            e.url = endpoint.url
            e.types = endpoint.types
            e.batchEnd = nil
            e.description = endpoint.description
            e.batchSize = endpoint.batchSize
        }
    }

    public func setEnabled(appID: String, id: String, enabled: Bool, now: Date) async throws -> Bool {
        change(appID, id) { e in
            if enabled, e.disabledAt != nil {
                (e.disabledAt, e.disabledReason, e.failures, e.failingSince, e.nextAttemptAt) = (nil, nil, 0, nil, now)
                e.lastError = nil
            } else if e.disabledAt == nil {
                (e.disabledAt, e.disabledReason) = (now, "disabled by the app")
            }
        }
    }

    public func remove(appID: String, id: String) async throws -> Bool {
        state.withLockedValue { s in
            guard s.endpoints[id]?.0.appID == appID else { return false }
            s.endpoints[id] = nil
            return true
        }
    }

    public func rotateSecret(appID: String, id: String, secret: String, now: Date) async throws -> Bool {
        change(appID, id) { e in
            (e.previousSecret, e.previousUntil) = (e.secret, now.addingTimeInterval(WebhookLimits.secretOverlap))
            e.secret = secret
        }
    }

    public func replay(appID: String, id: String, from: Date, to: Date) async throws -> Bool {
        change(appID, id, when: { $0.replay == nil && $0.disabledAt == nil }) { e in
            e.replay = WebhookReplay(from: from, to: to, cursor: .start)
        }
    }

    public func append(_ events: [NewWebhookEvent], now: Date) async throws {
        state.withLockedValue { s in for e in events { Self.append(e, into: &s, now: now) } }
    }

    /// Whether an endpoint of the app hears `type`.
    static func heard(_ app: String, _ type: WebhookEventType, in s: State) -> Bool {
        s.endpoints.values.contains { $0.0.appID == app && $0.0.types.contains(type) }
    }

    static func append(
        _ e: NewWebhookEvent,
        into s: inout State,
        now: Date,
        deliveryID: Int64? = nil,
        target: String? = nil
    ) {
        if let only = e.endpointID {
            guard s.endpoints[only]?.0.appID == e.appID else { return }
        } else {
            guard heard(e.appID, e.type, in: s) else { return }
        }
        s.events.append(
            WebhookEvent(
                seq: s.nextSeq,
                xid: 0,
                appID: e.appID,
                endpointID: e.endpointID,
                type: e.type.rawValue,
                notificationID: e.notificationID,
                deliveryID: deliveryID,
                target: target,
                detail: e.detailText,
                createdAt: now
            )
        )
        s.nextSeq += 1
    }

    /// The events of settled deliveries (their records after the settle), as ``WebhookSQL/settled``
    /// writes them.
    func settled(_ records: [DeliveryRecord], now: Date) {
        state.withLockedValue { s in
            for r in records {
                let type: WebhookEventType = r.state == .delivered ? .deliveryDelivered : .deliveryFailed
                if Self.heard(r.appID, type, in: s) {
                    s.events.append(Self.event(r, type: type, seq: s.nextSeq, now: now))
                    s.nextSeq += 1
                }
            }
            for r in records where r.state == .pruned && Self.heard(r.appID, .tokenInvalid, in: s) {
                s.events.append(Self.event(r, type: .tokenInvalid, seq: s.nextSeq, now: now))
                s.nextSeq += 1
            }
            for r in records where s.open[r.notificationID] == nil && Self.heard(r.appID, .notificationCompleted, in: s)
            {
                s.open[r.notificationID] = (r.appID, 0, now.addingTimeInterval(1))
            }
        }
    }

    /// An event of one delivery (a receipt, an open), as ``WebhookSQL/ofDelivery(_:delivery:detail:now:)``.
    func ofDelivery(_ type: WebhookEventType, _ r: DeliveryRecord, detail: JSONValue, now: Date = Date()) {
        state.withLockedValue { s in
            guard Self.heard(r.appID, type, in: s) else { return }
            var e = Self.event(r, type: type, seq: s.nextSeq, now: now)
            (e.state, e.reason, e.providerID, e.nextAt, e.detail) = (nil, nil, nil, nil, detail.jsonString)
            s.events.append(e)
            s.nextSeq += 1
        }
    }

    /// A delivery that ended `expired` at a claim.
    func expired(_ r: DeliveryRecord, now: Date) {
        state.withLockedValue { s in
            guard Self.heard(r.appID, .deliveryFailed, in: s) else { return }
            s.events.append(Self.event(r, type: .deliveryFailed, seq: s.nextSeq, now: now))
            s.nextSeq += 1
        }
    }

    static func event(_ r: DeliveryRecord, type: WebhookEventType, seq: Int64, now: Date) -> WebhookEvent {
        WebhookEvent(
            seq: seq,
            xid: 0,
            appID: r.appID,
            type: type.rawValue,
            notificationID: r.notificationID,
            deliveryID: r.id,
            provider: r.provider.rawValue,
            target: r.target.stored,
            state: r.state.rawValue,
            reason: r.reason,
            providerID: type == .tokenInvalid ? nil : r.providerID,
            nextAt: r.state == .queued ? r.notBefore : nil,
            createdAt: now
        )
    }

    public func claim(owner: String, now: Date, lease: TimeInterval, limit: Int) async throws -> [WebhookEndpoint] {
        state.withLockedValue { s in
            let due = s.endpoints.values.filter { entry in
                let e = entry.0
                guard e.disabledAt == nil, e.nextAttemptAt <= now, (entry.until ?? .distantPast) < now else {
                    return false
                }
                return e.batchEnd != nil || e.replay != nil
                    || s.events.contains { $0.appID == e.appID && $0.cursor > e.cursor }
            }.map(\.0).sorted {
                ($0.failures > 0 ? 1 : 0, $0.nextAttemptAt) < ($1.failures > 0 ? 1 : 0, $1.nextAttemptAt)
            }
            .prefix(max(0, limit))
            for e in due { s.endpoints[e.id] = (e, owner, now.addingTimeInterval(lease)) }
            return Array(due)
        }
    }

    public func events(
        appID: String,
        after: WebhookCursor,
        through: WebhookCursor?,
        limit: Int,
        hearing: WebhookEndpoint?
    ) async throws -> [WebhookEvent] {
        state.withLockedValue { s in
            Array(
                s.events.lazy.filter { ev in
                    ev.appID == appID && ev.cursor > after && (through.map { ev.cursor <= $0 } ?? true)
                        && (hearing?.hears(ev) ?? true)
                }.prefix(max(0, limit))
            )
        }
    }

    public func replayEvents(
        appID: String,
        replay r: WebhookReplay,
        limit: Int,
        hearing: WebhookEndpoint?
    )
        async throws -> [WebhookEvent]
    {
        state.withLockedValue { s in
            Array(
                s.events.lazy.filter {
                    $0.appID == appID && $0.cursor > r.cursor && $0.createdAt >= r.from && $0.createdAt <= r.to
                        && (hearing?.hears($0) ?? true)
                }.prefix(max(0, limit))
            )
        }
    }

    public func head(appID: String) async throws -> WebhookCursor? {
        state.withLockedValue { s in s.events.last { $0.appID == appID }?.cursor }
    }

    /// Changes the endpoint while `owner` holds it.
    private func held(_ id: String, _ owner: String, _ body: (inout WebhookEndpoint) -> Void) {
        state.withLockedValue { s in
            guard var entry = s.endpoints[id], entry.owner == owner else { return }
            body(&entry.0)
            s.endpoints[id] = entry
        }
    }

    public func acknowledge(id: String, owner: String, cursor: WebhookCursor, now: Date) async throws {
        held(id, owner) { e in
            (e.cursor, e.batchEnd, e.failures, e.failingSince, e.lastError) = (cursor, nil, 0, nil, nil)
            (e.lastAttemptAt, e.lastSuccessAt, e.nextAttemptAt) = (now, now, now)
        }
    }

    public func acknowledgeReplay(id: String, owner: String, cursor: WebhookCursor?, now: Date) async throws {
        held(id, owner) { e in
            guard let c = cursor else {
                e.replay = nil
                return
            }
            e.replay?.cursor = c
            (e.failures, e.failingSince, e.lastError, e.lastAttemptAt, e.lastSuccessAt) = (0, nil, nil, now, now)
        }
    }

    public func fail(
        id: String,
        owner: String,
        batchEnd: WebhookCursor?,
        error: String,
        next: Date,
        disable: String?,
        now: Date
    ) async throws {
        held(id, owner) { e in
            e.failures += 1
            e.failingSince = e.failingSince ?? now
            (e.lastError, e.lastAttemptAt, e.nextAttemptAt, e.batchEnd) = (error, now, next, batchEnd)
            if let disable { (e.disabledAt, e.disabledReason) = (now, disable) }
        }
    }

    public func extend(id: String, owner: String, until: Date) async throws -> WebhookEndpoint? {
        state.withLockedValue { s in
            guard let entry = s.endpoints[id], entry.owner == owner else { return nil }
            s.endpoints[id] = (entry.0, owner, until)
            return entry.0
        }
    }

    public func release(id: String, owner: String) async throws {
        state.withLockedValue { s in
            guard let entry = s.endpoints[id], entry.owner == owner else { return }
            s.endpoints[id] = (entry.0, nil, nil)
        }
    }

    public func stateCounts() async throws -> [String: Int] {
        state.withLockedValue { s in
            var c: [String: Int] = [:]
            for e in s.endpoints.values { c[e.0.state, default: 0] += 1 }
            return c
        }
    }

    public func sweep(before cutoff: Date, limit: Int) async throws -> Int {
        state.withLockedValue { s in
            let old = s.events.prefix { $0.createdAt < cutoff }.count
            let n = min(old, max(0, limit))
            s.events.removeFirst(n)
            return n
        }
    }

    /// A notification that queued no delivery, opened for `notification.completed` when the app hears that (by the
    /// intake, as the databases' intakes do in their accept and fan-out transactions); whether it has deliveries is
    /// the completion's look.
    func open(notificationID: String, appID: String, now: Date) {
        state.withLockedValue { s in
            guard s.open[notificationID] == nil, Self.heard(appID, .notificationCompleted, in: s) else { return }
            s.open[notificationID] = (appID, 0, now.addingTimeInterval(1))
        }
    }

    public func completeNotifications(now: Date, limit: Int) async throws -> Int {
        let due = state.withLockedValue { s in
            s.open.filter { $0.value.next <= now }.sorted { $0.value.next < $1.value.next }.prefix(max(0, limit))
                .map { ($0.key, $0.value) }
        }
        var completed = 0
        for (notification, entry) in due {
            let ended = await ended(notification)
            state.withLockedValue { s in
                switch ended {
                case nil: s.open[notification] = nil
                case (false, _)?:
                    s.open[notification] = (
                        entry.app, entry.checks + 1,
                        now.addingTimeInterval(WebhookCompletion.pause(afterChecks: entry.checks + 1))
                    )
                case (true, let counts)?:
                    let event = NewWebhookEvent(
                        appID: entry.app,
                        type: .notificationCompleted,
                        notificationID: notification,
                        detail: WebhookCompletion.detail(counts)
                    )
                    Self.append(event, into: &s, now: now)
                    s.open[notification] = nil
                    completed += 1
                }
            }
        }
        return completed
    }

    /// Everything of an app (its deletion).
    func remove(appID: String) {
        state.withLockedValue { s in
            s.endpoints = s.endpoints.filter { $0.value.0.appID != appID }
            s.events.removeAll { $0.appID == appID }
            s.open = s.open.filter { $0.value.app != appID }
        }
    }
}
