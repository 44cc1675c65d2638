import Foundation

/// Reports waiting to reach the server, kept in a file so that they survive the app being closed or offline:
/// each written before it is sent and removed once the server has answered for it. Bounded: past `limit` the
/// oldest go (a device offline for weeks does not grow without end).
struct Outbox: Sendable {
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
        var attempts: Int
        var notBefore: Date
    }

    let file: URL
    let limit: Int
    private(set) var items: [Item]

    init(file: URL, limit: Int) {
        self.file = file
        self.limit = max(1, limit)
        // A damaged file is a lost queue, not a crash.
        items = (try? JSONDecoder().decode([Item].self, from: Data(contentsOf: file))) ?? []
    }

    /// Adds an item; a registration replaces any registration still waiting.
    mutating func add(_ item: Item) {
        if item.kind == .registration { items.removeAll { $0.kind == .registration } }
        items.append(item)
        if items.count > limit { items.removeFirst(items.count - limit) }
        save()
    }

    mutating func remove(_ id: UUID) {
        items.removeAll { $0.id == id }
        save()
    }

    mutating func retryLater(_ id: UUID, at: Date) {
        guard let i = items.firstIndex(where: { $0.id == id }) else { return }
        items[i].attempts += 1
        items[i].notBefore = at
        save()
    }

    private func save() {
        try? FileManager.default.createDirectory(
            at: file.deletingLastPathComponent(),
            withIntermediateDirectories: true
        )
        if let data = try? JSONEncoder().encode(items) { try? data.write(to: file, options: .atomic) }
    }
}
