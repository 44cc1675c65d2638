import Foundation

/// The in-memory twin of ``SQLiteDeliveryQueue``, for fast unit tests: same rules, nothing survives a restart.
public actor MemoryDeliveryQueue: DeliveryQueue {
    private var records: [Int64: DeliveryRecord] = [:]
    private var nextID: Int64 = 1
    /// Where the events of outcomes go (the memory backend's webhooks), as the SQL queues write them in a settle.
    let webhooks: MemoryWebhookStore?

    public init() { webhooks = nil }

    init(webhooks: MemoryWebhookStore) { self.webhooks = webhooks }

    @discardableResult
    public func enqueue(_ deliveries: [NewDelivery]) -> Int {
        for d in deliveries {
            records[nextID] = DeliveryRecord(id: nextID, queued: d)
            nextID += 1
        }
        return deliveries.count
    }

    public func claim(
        owner: String,
        limit: Int,
        now: Date,
        lease: TimeInterval,
        rooms: ClaimRooms
    ) -> [DeliveryRecord] {
        let limit = max(0, limit)
        var dueByApp: [String: [DeliveryRecord]] = [:]
        var abandoned: [DeliveryRecord] = []
        for r in records.values {
            if r.state == .queued && r.notBefore <= now {
                dueByApp[r.appID, default: []].append(r)
            } else if r.state == .leased && (r.leaseUntil ?? .distantPast) < now {
                abandoned.append(r)
            }
        }
        // Each app with room and something due gets an equal share, its earliest first.
        let ready = dueByApp.keys.filter { rooms.room($0) > 0 }.sorted()
        var taken: [DeliveryRecord] = []
        if !ready.isEmpty {
            let share = (limit + ready.count - 1) / ready.count
            for app in ready where taken.count < limit {
                var took = 0
                for r in dueByApp[app, default: []].sorted(by: { ($0.notBefore, $0.id) < ($1.notBefore, $1.id) }) {
                    guard took < min(share, rooms.room(app)), taken.count < limit else { break }
                    if expire(r, now: now) { continue }
                    taken.append(r)
                    took += 1
                }
            }
        }
        for r in abandoned.sorted(by: { ($0.leaseUntil ?? .distantPast) < ($1.leaseUntil ?? .distantPast) }) {
            guard taken.count < limit else { break }
            if expire(r, now: now) { continue }
            taken.append(r)
        }
        return taken.map { taken in
            var r = taken
            r.state = .leased
            r.leaseOwner = owner
            r.leaseUntil = now.addingTimeInterval(lease)
            r.attempts += 1
            r.updatedAt = now
            records[r.id] = r
            return r
        }.sorted { ($0.notBefore, $0.id) < ($1.notBefore, $1.id) }
    }

    /// Ends a delivery past its time to live as expired; false when it is still alive.
    private func expire(_ record: DeliveryRecord, now: Date) -> Bool {
        guard let e = record.expiresAt, e < now else { return false }
        var r = record
        r.state = .expired
        r.reason = "ttl"
        r.leaseOwner = nil
        r.leaseUntil = nil
        r.updatedAt = now
        records[r.id] = r
        webhooks?.expired(r, now: now)
        return true
    }

    @discardableResult
    public func finish(id: Int64, owner: String, outcome: DeliveryOutcome, now: Date) -> Bool {
        settle([Settlement(id: id, .finish(outcome))], owner: owner, now: now).contains(id)
    }

    @discardableResult
    public func reschedule(id: Int64, owner: String, notBefore: Date, reason: String, now: Date) -> Bool {
        settle([Settlement(id: id, .reschedule(notBefore: notBefore, reason: reason))], owner: owner, now: now)
            .contains(id)
    }

    private func finishing(id: Int64, owner: String, outcome: DeliveryOutcome, now: Date) -> Bool {
        unlease(id, owner: owner, now: now) { r in
            r.state = outcome.state
            r.reason = outcome.reason
            r.providerID = outcome.providerID
        }
    }

    private func rescheduling(id: Int64, owner: String, notBefore: Date, reason: String, now: Date) -> Bool {
        unlease(id, owner: owner, now: now) { r in
            r.state = .queued
            r.notBefore = notBefore
            r.reason = reason
        }
    }

    /// Changes a delivery `owner` holds by `change` and ends its lease; false when it does not hold it.
    private func unlease(_ id: Int64, owner: String, now: Date, _ change: (inout DeliveryRecord) -> Void) -> Bool {
        guard var r = records[id], r.state == .leased, r.leaseOwner == owner else { return false }
        change(&r)
        r.leaseOwner = nil
        r.leaseUntil = nil
        r.updatedAt = now
        records[id] = r
        return true
    }

    public func settle(_ items: [Settlement], owner: String, now: Date) -> Set<Int64> {
        var held = Set<Int64>()
        for item in items {
            let ok: Bool
            switch item.action {
            case .finish(let o): ok = finishing(id: item.id, owner: owner, outcome: o, now: now)
            case let .reschedule(at, reason):
                ok = rescheduling(id: item.id, owner: owner, notBefore: at, reason: reason, now: now)
            case let .release(at, reason):
                ok = rescheduling(id: item.id, owner: owner, notBefore: at, reason: reason, now: now)
                if ok, var r = records[item.id] {
                    r.attempts = max(0, r.attempts - 1)
                    records[item.id] = r
                }
            }
            if ok { held.insert(item.id) }
        }
        webhooks?.settled(
            items.filter { held.contains($0.id) && $0.tellsWebhooks }.compactMap { records[$0.id] },
            now: now
        )
        return held
    }

    public func extend(_ ids: [Int64], owner: String, until: Date) -> Set<Int64> {
        var held = Set<Int64>()
        for id in ids {
            guard var r = records[id], r.state == .leased, r.leaseOwner == owner else { continue }
            r.leaseUntil = until
            records[id] = r
            held.insert(id)
        }
        return held
    }

    public func counts() -> [DeliveryState: Int] {
        var c: [DeliveryState: Int] = [:]
        for r in records.values { c[r.state, default: 0] += 1 }
        return c
    }

    public func deliveries(notificationID: String) -> [DeliveryRecord] {
        records.values.filter { $0.notificationID == notificationID }.sorted { $0.id < $1.id }
    }

    public func counts(notificationID: String) -> [DeliveryState: Int] {
        var c: [DeliveryState: Int] = [:]
        for r in records.values where r.notificationID == notificationID { c[r.state, default: 0] += 1 }
        return c
    }

    public func deliveries(notificationID: String, after: Int64, limit: Int) -> [DeliveryRecord] {
        Array(deliveries(notificationID: notificationID).lazy.filter { $0.id > after }.prefix(max(0, limit)))
    }

    /// Ends as superseded what is still queued of a notification; returns how many.
    func supersede(notificationID: String, by version: Int, now: Date) -> Int {
        var n = 0
        for (id, var r) in records where r.notificationID == notificationID && r.state == .queued {
            r.state = .superseded
            r.reason = "version \(version)"
            r.updatedAt = now
            records[id] = r
            n += 1
        }
        return n
    }

    /// The deliveries workers hold now.
    func leased() -> [DeliveryRecord] { records.values.filter { $0.state == .leased } }

    /// Puts held deliveries back without counting the attempt.
    func release(_ ids: [Int64], owner: String, notBefore: Date, now: Date) -> Set<Int64> {
        var out = Set<Int64>()
        for id in ids {
            guard var r = records[id], r.state == .leased, r.leaseOwner == owner else { continue }
            r.state = .queued
            r.notBefore = notBefore
            r.reason = "older_version_in_flight"
            r.attempts -= 1
            r.leaseOwner = nil
            r.leaseUntil = nil
            r.updatedAt = now
            records[id] = r
            out.insert(id)
        }
        return out
    }

    /// Removes a notification's deliveries (retention).
    func remove(notificationID: String) {
        for (id, r) in records where r.notificationID == notificationID { records[id] = nil }
    }

    /// Removes an app's deliveries (its deletion).
    func remove(appID: String) {
        for (id, r) in records where r.appID == appID { records[id] = nil }
    }
}
