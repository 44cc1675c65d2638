import Foundation
import NIOConcurrencyHelpers

/// Values read on every request (an API key's grant, an app), kept for a few seconds. A change made through this
/// node takes effect at once; one made through another node reaches this one by the database's notification
/// (``forget(_:)``, ``forgetAll()``), and at the latest when the entry's lifetime ends.
final class StoreCache<Value: Sendable>: Sendable {
    let lifetime: TimeInterval
    let capacity: Int
    private let entries = NIOLockedValueBox<[String: (Value?, Date)]>([:])

    init(lifetime: TimeInterval, capacity: Int) {
        self.lifetime = lifetime
        self.capacity = capacity
    }

    /// The cached value, or `load`'s (kept, absent ones too: an unknown key is asked for again and again).
    func value(_ key: String, load: () async throws -> Value?) async throws -> Value? {
        if let (hit, at) = entries.withLockedValue({ $0[key] }), Date().timeIntervalSince(at) < lifetime { return hit }
        let fresh = try await load()
        set(key, fresh)
        return fresh
    }

    func set(_ key: String, _ value: Value?) {
        entries.withLockedValue { cache in
            if cache.count >= capacity { cache.removeAll() }
            cache[key] = (value, Date())
        }
    }

    func forget(_ key: String) { entries.withLockedValue { $0[key] = nil } }
    func forgetAll() { entries.withLockedValue { $0.removeAll() } }
}
