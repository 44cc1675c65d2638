import Foundation

/// The in-memory twin of ``SQLiteDeviceRegistry``.
public actor MemoryDeviceRegistry: DeviceRegistry {
    private var rows: [Int64: Device] = [:]
    private var byKey: [String: Int64] = [:]
    private var nextID: Int64 = 1

    public init() {}

    private func key(_ app: String, _ token: String) -> String { app + "\u{0}" + token }

    /// Removes an app's devices (its deletion).
    func remove(appID: String) {
        for (id, d) in rows where d.appID == appID {
            rows[id] = nil
            byKey[key(appID, d.token)] = nil
        }
    }

    public func upsert(_ given: Device) {
        var device = given
        if let id = byKey[key(device.appID, device.token)] {
            // A registration that does not say where permission stands keeps what was last said.
            device.permission = device.permission ?? rows[id]?.permission
            rows[id] = device
        } else {
            rows[nextID] = device
            byKey[key(device.appID, device.token)] = nextID
            nextID += 1
        }
    }

    public func register(_ given: Device, owner: RegistrationOwner, limits: RegistrationLimits) throws {
        var device = given
        let known = byKey[key(device.appID, device.token)].flatMap { rows[$0] }
        if known == nil, rows.values.count(where: { $0.appID == device.appID }) >= limits.devicesPerApp {
            throw QuotaReached.devices(limits.devicesPerApp)
        }
        if owner == .keepsKnown { device.userID = known?.userID }
        upsert(device)
        guard let user = device.userID else { return }
        let mine = rows.filter { $0.value.appID == device.appID && $0.value.userID == user }
            .sorted { ($0.value.updatedAt, $0.key) > ($1.value.updatedAt, $1.key) }
        for (_, d) in mine.dropFirst(max(0, limits.devicesPerUser)) { remove(appID: d.appID, token: d.token) }
    }

    @discardableResult
    public func remove(appID: String, token: String) -> Bool {
        guard let id = byKey.removeValue(forKey: key(appID, token)) else { return false }
        rows[id] = nil
        return true
    }

    public func device(appID: String, token: String) -> Device? { byKey[key(appID, token)].flatMap { rows[$0] } }

    public func page(
        appID: String,
        audience: Audience,
        after cursor: Int64,
        limit: Int
    ) -> (devices: [Device], next: Int64?) {
        let matching = rows.filter { id, d in
            guard id > cursor, d.appID == appID else { return false }
            switch audience {
            case .all: return true
            case .user(let u): return d.userID == u
            case .tag(let t): return d.tags.contains(t)
            case .topic(let t): return d.topics.contains(t)
            case .tokens(let ts): return ts.contains(d.token)
            case .providerTokens, .fcmTopic, .fcmCondition, .apnsChannel: return false  // not registry audiences
            }
        }.sorted { $0.key < $1.key }.prefix(limit)
        return (matching.map(\.value), matching.count == limit ? matching.last?.key : nil)
    }

    @discardableResult
    public func prune(appID: String, token: String, invalidSince: Date?) -> Bool {
        guard let d = device(appID: appID, token: token) else { return false }
        if let since = invalidSince, d.updatedAt > since { return false }
        return remove(appID: appID, token: token)
    }

    public func count(appID: String) -> Int { rows.values.filter { $0.appID == appID }.count }

    public func permissions(appID: String) -> [String: Int] {
        var counts: [String: Int] = [:]
        for d in rows.values where d.appID == appID { counts[d.permission?.rawValue ?? "unknown", default: 0] += 1 }
        return counts
    }

    public func search(
        appID: String,
        matching query: String,
        after cursor: Int64,
        limit: Int
    ) -> (devices: [Device], next: Int64?) {
        let found = rows.filter { id, d in
            id > cursor && d.appID == appID && (d.token.hasPrefix(query) || d.userID == query || d.tags.contains(query))
        }.sorted { $0.key < $1.key }.prefix(max(0, limit))
        return (found.map(\.value), found.count == limit ? found.last?.key : nil)
    }
}
