import Foundation

/// Reports waiting to reach the server, kept in a file so that they survive the app being closed or offline:
/// each written before it is sent and removed once the server has answered for it, in the order they were made.
/// When the server cannot be reached (or asks to wait) the whole outbox waits, with one backoff. Bounded: past
/// `limit` the oldest go (a device offline for weeks does not grow without end).
struct Outbox: Sendable {
    struct Stored: Codable {
        var items: [Item]
        /// Failed tries in a row, and when the next may be made.
        var failures: Int
        var notBefore: Date
    }
    struct Item: Codable, Sendable, Hashable {
        enum Kind: String, Codable, Sendable {
            /// The device's registration (token, user, tags, locale): only the newest is kept.
            case registration
            case open
        }
        var id: UUID
        var kind: Kind
        var method: String
        /// An absolute URL, or a path on the server.
        var url: String
        var body: Data
        /// Whether the app's key goes with it (not to a receipt address, which is its own credential).
        var keyed: Bool
    }

    let file: URL
    let limit: Int
    private(set) var items: [Item]
    private(set) var failures: Int
    private(set) var notBefore: Date

    init(file: URL, limit: Int) {
        self.file = file
        self.limit = max(1, limit)
        // A damaged file is a lost queue, not a crash.
        let stored = try? JSONDecoder().decode(Stored.self, from: Data(contentsOf: file))
        items = stored?.items ?? []
        failures = stored?.failures ?? 0
        notBefore = stored?.notBefore ?? .distantPast
    }

    /// Adds an item; a registration replaces the one still waiting, in its place.
    mutating func add(_ item: Item) {
        if item.kind == .registration, let i = items.firstIndex(where: { $0.kind == .registration }) {
            items[i] = item
        } else {
            items.append(item)
        }
        if items.count > limit { items.removeFirst(items.count - limit) }
        save()
    }

    /// The server answered for this item.
    mutating func remove(_ id: UUID) {
        items.removeAll { $0.id == id }
        failures = 0
        save()
    }

    /// The server was not reached, or asked to wait: nothing goes before `at`.
    mutating func wait(until at: Date) {
        failures += 1
        notBefore = at
        save()
    }

    private func save() {
        try? FileManager.default.createDirectory(
            at: file.deletingLastPathComponent(),
            withIntermediateDirectories: true
        )
        let stored = Stored(items: items, failures: failures, notBefore: notBefore)
        if let data = try? JSONEncoder().encode(stored) { try? data.write(to: file, options: .atomic) }
    }
}
