import Foundation
import NIOConcurrencyHelpers

/// The in-memory twin, answering as the databases do (token order, one row per app and token).
public final class MemoryLiveTokenStore: LiveTokenStore {
    private let rows = NIOLockedValueBox<[String: LiveToken]>([:])
    /// The keys of the tokens whose registration was told (their removal and expiry are told only then).
    private let told = NIOLockedValueBox<Set<String>>([])
    /// Where `live.token` events go (the memory backend's webhooks).
    let webhooks: MemoryWebhookStore?

    public init() { webhooks = nil }

    init(webhooks: MemoryWebhookStore) { self.webhooks = webhooks }

    /// Records a `live.token` event for each token as `events` allows: a removal or an expiry only of a token whose
    /// registration was told.
    private func tell(_ tokens: [LiveToken], _ state: String, events: LiveTokenEvents) {
        guard let webhooks, !tokens.isEmpty else { return }
        let now = Date()
        let keys = told.withLockedValue { told in
            tokens.filter { t in
                let key = Self.key(t.appID, t.token)
                guard state == "registered" || told.remove(key) != nil, events() else { return false }
                if state == "registered" { told.insert(key) }
                return true
            }
        }
        webhooks.state.withLockedValue { s in
            for t in keys { MemoryWebhookStore.append(t.webhookEvent(state), into: &s, now: now) }
        }
    }

    private static func key(_ app: String, _ token: String) -> String { app + "\u{0}" + token }

    /// Removes an app's tokens (its deletion).
    func remove(appID: String) {
        rows.withLockedValue { $0 = $0.filter { $0.value.appID != appID } }
        told.withLockedValue { $0 = $0.filter { !$0.hasPrefix(appID + "\u{0}") } }
    }

    public func register(
        _ token: LiveToken,
        owner: RegistrationOwner,
        limits: RegistrationLimits,
        events: @escaping LiveTokenEvents
    ) async throws {
        guard let evicted = try registering(token, owner: owner, limits: limits) else { return }
        tell([token], "registered", events: events)
        tell(evicted, "removed", events: events)
    }

    /// The tokens the user's bound evicted when the token was written; nil when it was not (there unchanged and
    /// fresh, or another holds it).
    private func registering(
        _ token: LiveToken,
        owner: RegistrationOwner,
        limits: RegistrationLimits
    ) throws -> [LiveToken]? {
        try rows.withLockedValue { rows in
            let key = Self.key(token.appID, token.token)
            let held = rows[key]
            if held == nil, rows.values.count(where: { $0.appID == token.appID }) >= limits.liveTokensPerApp {
                throw QuotaReached.liveTokens(limits.liveTokensPerApp)
            }
            if let activity = token.activityID, token.kind == .activity, held?.activityID != activity {
                let since = token.updatedAt.addingTimeInterval(-LiveTokenLimits.activityTokenLifetime)
                let n = rows.values.count {
                    $0.appID == token.appID && $0.kind == .activity && $0.activityID == activity
                        && $0.token != token.token && $0.updatedAt >= since
                }
                if n >= limits.liveTokensPerActivity { throw QuotaReached.activity(limits.liveTokensPerActivity) }
            }
            // A token a user or an activity holds is not the public key's to change.
            if owner == .keepsKnown, let held, held.userID != nil || held.activityID != nil { return nil }
            if var kept = held, kept.updatedAt >= token.updatedAt.addingTimeInterval(-LiveTokenLimits.refreshAfter) {
                kept.updatedAt = token.updatedAt
                // Unchanged and fresh: kept as it is, as the databases keep it.
                if kept == token { return nil }
            }
            rows[key] = token
            var evicted: [LiveToken] = []
            if let user = token.userID, owner == .asGiven {
                let mine = rows.values.filter { $0.appID == token.appID && $0.userID == user }
                    .sorted { ($0.updatedAt, $0.token) > ($1.updatedAt, $1.token) }
                for t in mine.dropFirst(max(0, limits.liveTokensPerUser)) {
                    rows[Self.key(t.appID, t.token)] = nil
                    evicted.append(t)
                }
            }
            return evicted
        }
    }

    public func remove(appID: String, token: String) async throws -> Bool {
        guard let gone = rows.withLockedValue({ $0.removeValue(forKey: Self.key(appID, token)) }) else { return false }
        tell([gone], "removed", events: { true })
        return true
    }

    public func remove(
        appID: String,
        token: String,
        heldBy user: String?,
        events: @escaping LiveTokenEvents
    ) async throws -> Bool {
        rows.withLockedValue { rows -> LiveToken? in
            let key = Self.key(appID, token)
            guard let held = rows[key], (held.userID == nil && held.activityID == nil) || held.userID == user
            else { return nil }
            rows[key] = nil
            return held
        }.map { gone in
            tell([gone], "removed", events: events)
            return true
        } ?? false
    }

    public func tokens(appID: String, audience: LiveAudience, limit: Int) async throws -> [String] {
        let all = rows.withLockedValue { Array($0.values) }
        let now = Date()
        return all.filter { t in
            guard t.appID == appID, t.updatedAt >= now.addingTimeInterval(-LiveTokenLimits.lifetime(t.kind)) else {
                return false
            }
            switch audience {
            // Byte for byte, as the databases compare (not String's canonical equivalence).
            case .activity(let id): return t.kind == .activity && t.activityID?.utf8.elementsEqual(id.utf8) == true
            case .pushToStart(let type, let user):
                return t.kind == .pushToStart && t.activityType == type && (user == nil || t.userID == user)
            }
        }.map(\.token).sorted().prefix(max(0, limit)).map { $0 }
    }

    public func activityTokens(appID: String, activityIDs: [String], limit: Int) async throws -> [ExactText: [String]] {
        var out: [ExactText: [String]] = [:]
        var left = max(0, limit + 1)
        for id in Set(activityIDs.map(ExactText.init)).sorted(by: {
            $0.text.utf8.lexicographicallyPrecedes($1.text.utf8)
        })
        where left > 0 {
            let tokens = try await tokens(appID: appID, audience: .activity(id.text), limit: left)
            if !tokens.isEmpty { out[id] = tokens }
            left -= tokens.count
        }
        return out
    }

    public func sweep(_ kind: LiveToken.Kind, before cutoff: Date, limit: Int) async throws -> Int {
        let gone = rows.withLockedValue { rows in
            let old = rows.filter { $0.value.kind == kind && $0.value.updatedAt < cutoff }.keys.prefix(limit)
            return old.compactMap { rows.removeValue(forKey: $0) }
        }
        tell(gone, "expired", events: { true })
        return gone.count
    }
}
