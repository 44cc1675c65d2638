import Foundation
import NIOConcurrencyHelpers

/// Values read on every request (an API key's grant, an app), kept for a few seconds. A change made through this
/// node takes effect at once; one made through another node reaches this one by the database's notification
/// (``forget(_:)``, ``forgetAll()``), and at the latest when the entry's lifetime ends.
///
/// At most `capacity` entries: past that the least recently used one makes room (a flood of unknown keys pushes
/// out only entries nobody used since, never the whole cache at once).
final class StoreCache<Value: Sendable>: Sendable {
    let lifetime: TimeInterval
    let capacity: Int
    private let entries: NIOLockedValueBox<LRU<(Value?, Date)>>

    init(lifetime: TimeInterval, capacity: Int) {
        self.lifetime = lifetime
        self.capacity = max(1, capacity)
        entries = NIOLockedValueBox(LRU(capacity: max(1, capacity)))
    }

    /// The cached value, or `load`'s (kept, absent ones too: an unknown key is asked for again and again).
    func value(_ key: String, load: () async throws -> Value?) async throws -> Value? {
        if let (hit, at) = entries.withLockedValue({ $0.get(key) }), Date().timeIntervalSince(at) < lifetime {
            return hit
        }
        let fresh = try await load()
        set(key, fresh)
        return fresh
    }

    /// The value of an entry still within its lifetime, without loading anything.
    func fresh(_ key: String) -> Value? {
        guard let (hit, at) = entries.withLockedValue({ $0.get(key) }), Date().timeIntervalSince(at) < lifetime else {
            return nil
        }
        return hit
    }

    /// Whether an entry with a value (not a remembered absence) is held, however old.
    func holdsValue(_ key: String) -> Bool { entries.withLockedValue { $0.get(key).map { $0.0 != nil } ?? false } }

    func set(_ key: String, _ value: Value?) { entries.withLockedValue { $0.set(key, (value, Date())) } }

    func forget(_ key: String) { entries.withLockedValue { $0.remove(key) } }
    func forgetAll() { entries.withLockedValue { $0.removeAll() } }

    var count: Int { entries.withLockedValue { $0.count } }
}

/// A least-recently-used map of at most `capacity` entries, every operation O(1): the entries sit in an array,
/// linked from the most to the least recently used, with freed slots reused.
struct LRU<Value> {
    fileprivate struct Node {
        var key: String
        var value: Value
        var newer: Int
        var older: Int
    }

    let capacity: Int
    private var nodes: [Node] = []
    private var index: [String: Int] = [:]
    private var free: [Int] = []
    /// Most and least recently used (-1: none).
    private var newest = -1
    private var oldest = -1

    init(capacity: Int) { self.capacity = max(1, capacity) }

    var count: Int { index.count }

    mutating func get(_ key: String) -> Value? {
        guard let i = index[key] else { return nil }
        touch(i)
        return nodes[i].value
    }

    mutating func set(_ key: String, _ value: Value) {
        if let i = index[key] {
            nodes[i].value = value
            touch(i)
            return
        }
        if index.count >= capacity, oldest >= 0 {
            let i = oldest
            unlink(i)
            index[nodes[i].key] = nil
            free.append(i)
        }
        let node = Node(key: key, value: value, newer: -1, older: -1)
        let i: Int
        if let slot = free.popLast() {
            nodes[slot] = node
            i = slot
        } else {
            nodes.append(node)
            i = nodes.count - 1
        }
        index[key] = i
        linkNewest(i)
    }

    mutating func remove(_ key: String) {
        guard let i = index.removeValue(forKey: key) else { return }
        unlink(i)
        free.append(i)
    }

    mutating func removeAll() { self = LRU(capacity: capacity) }

    /// The keys from the most to the least recently used (for tests).
    var keysByUse: [String] {
        var out: [String] = []
        var i = newest
        while i >= 0 {
            out.append(nodes[i].key)
            i = nodes[i].older
        }
        return out
    }

    private mutating func touch(_ i: Int) {
        guard i != newest else { return }
        unlink(i)
        linkNewest(i)
    }

    private mutating func unlink(_ i: Int) {
        let (newer, older) = (nodes[i].newer, nodes[i].older)
        if newer >= 0 { nodes[newer].older = older } else { newest = older }
        if older >= 0 { nodes[older].newer = newer } else { oldest = newer }
        nodes[i].newer = -1
        nodes[i].older = -1
    }

    private mutating func linkNewest(_ i: Int) {
        nodes[i].older = newest
        nodes[i].newer = -1
        if newest >= 0 { nodes[newest].newer = i }
        newest = i
        if oldest < 0 { oldest = i }
    }
}

extension LRU: Sendable where Value: Sendable {}
extension LRU.Node: Sendable where Value: Sendable {}
