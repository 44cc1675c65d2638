import Crypto
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import RichPushCore

#if canImport(Glibc)
import Glibc
#endif

/// Media stored by content: the SHA-256 of the bytes names the file (`<hash>.<ext>`, the extension from the
/// sniffed type), so the same bytes are stored once, a URL never changes meaning, and it can be cached forever.
/// Files live on the local filesystem; the most used are kept in a bounded in-memory cache, so a burst of
/// downloads after a large send is served from memory.
public final class MediaStore: Sendable {
    public struct Item: Sendable, Hashable {
        public var hash: String
        public var type: MediaType
        public var size: Int
        /// `<hash>.<ext>`, the last part of the URL.
        public var name: String { hash + "." + type.fileExtension }
    }

    public let directory: URL
    let cache: HotCache
    /// The keep-until times set lately, so that a busy file is not stat'ed on every send.
    let kept = NIOLockedValueBox<[String: Date]>([:])
    /// The same for shared media.
    let sharedKept = NIOLockedValueBox<[String: Date]>([:])

    /// Hosted media every node of a cluster reaches; this store's disk is then a cache of it (nil: the disk is
    /// the store).
    public let shared: (any SharedMediaFiles)?

    public init(directory: URL, cacheBytes: Int = 64 << 20, shared: (any SharedMediaFiles)? = nil) throws {
        self.directory = directory
        self.shared = shared
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        cache = HotCache(budget: cacheBytes)
    }

    static func hex(_ digest: SHA256.Digest) -> String { APIKeys.lowercaseHex(digest) }

    func path(_ name: String) -> URL {
        directory.appendingPathComponent(String(name.prefix(2))).appendingPathComponent(name)
    }

    /// Stores bytes of a known type; storing the same bytes again is free.
    @discardableResult
    public func put(_ bytes: [UInt8], type: MediaType) throws -> Item {
        guard MediaRules.isHostable(type) else { throw NotHostable(type: type) }
        let item = Item(hash: Self.hex(SHA256.hash(data: bytes)), type: type, size: bytes.count)
        let file = path(item.name)
        if !FileManager.default.fileExists(atPath: file.path) {
            try FileManager.default.createDirectory(
                at: file.deletingLastPathComponent(),
                withIntermediateDirectories: true
            )
            // Written aside, then renamed: a reader never sees half a file.
            let temp = file.deletingLastPathComponent().appendingPathComponent(".\(UUID().uuidString).part")
            try Data(bytes).write(to: temp)
            // Usually absent; the move below fails loudly if it is still in the way.
            try? FileManager.default.removeItem(at: file)
            try FileManager.default.moveItem(at: temp, to: file)
        }
        cache.insert(item.name, ByteBuffer(bytes: bytes), type: type)
        return item
    }

    /// The bytes and type of a stored name, from memory or disk; nil for a name that is not well formed or not stored.
    public func get(_ name: String) -> (ByteBuffer, MediaType)? {
        guard let type = Self.parse(name) else { return nil }
        if let hit = cache.get(name) { return (hit, type) }
        guard let data = FileManager.default.contents(atPath: path(name).path) else { return nil }
        let buffer = ByteBuffer(bytes: data)
        cache.insert(name, buffer, type: type)
        return (buffer, type)
    }

    /// The bytes and type of a stored name when they are in the memory cache (nothing is read from disk).
    public func cached(_ name: String) -> (ByteBuffer, MediaType)? {
        guard let type = Self.parse(name), let hit = cache.get(name) else { return nil }
        return (hit, type)
    }

    /// The bytes `range` of a stored file, read from disk (nil when it is not there or shorter than the range).
    public func read(_ name: String, range: ClosedRange<Int>) -> ByteBuffer? {
        guard Self.parse(name) != nil, let handle = FileHandle(forReadingAtPath: path(name).path) else { return nil }
        defer { try? handle.close() }  // read-only: closing has nothing to report
        do {
            try handle.seek(toOffset: UInt64(range.lowerBound))
            guard let data = try handle.read(upToCount: range.count), data.count == range.count else { return nil }
            return ByteBuffer(bytes: data)
        } catch {
            // The file went between the stat and the read (a retention sweep): the caller answers 404.
            return nil
        }
    }

    /// The file of a stored name, its size and type, without reading it.
    public func file(_ name: String) -> (path: String, size: Int, type: MediaType)? {
        guard let type = Self.parse(name) else { return nil }
        let p = path(name).path
        var st = stat()
        guard stat(p, &st) == 0 else { return nil }
        return (p, Int(st.st_size), type)
    }

    /// The type of a well-formed name (64 lowercase hex digits, a dot, the extension of a known type).
    public static func parse(_ name: String) -> MediaType? {
        let parts = name.split(separator: ".", maxSplits: 1)
        guard parts.count == 2, parts[0].count == 64,
            parts[0].utf8.allSatisfy({ ($0 >= 48 && $0 <= 57) || ($0 >= 97 && $0 <= 102) })
        else { return nil }
        // A name of a type that may not be hosted (stored by an older version) is never served.
        return byExtension[String(parts[1])].flatMap { MediaRules.isHostable($0) ? $0 : nil }
    }

    /// A type no platform attaches: refused, whoever asks to store it.
    public struct NotHostable: Error, CustomStringConvertible {
        public var type: MediaType
        public var description: String {
            "\(type.displayName) is not attached by iOS nor shown by Android, so it is not hosted (hosted: JPEG, PNG, GIF, "
                + "WebP and BMP images, MP3, WAV, AIFF and M4A audio, MP4, MPEG and AVI video)"
        }
    }

    static let byExtension = Dictionary(
        MediaType.allCases.map { ($0.fileExtension, $0) },
        uniquingKeysWith: { first, _ in first }
    )

    /// Makes a file stored here reachable from every node, kept at least until `keepUntil` (nothing to do without
    /// shared media). A file other nodes cannot serve must not be named in a send: callers fail or fall back.
    public func publish(_ item: Item, keepUntil: Date = Date()) async throws {
        guard let shared else { return }
        try await shared.put(name: item.name, file: path(item.name), keepUntil: keepUntil)
    }

    /// Whether the named file is on this node's disk, after fetching it from shared media when it is only there
    /// (its keep time comes with it). Anyone may ask (`GET /media/<any name>`), so what it costs is bounded:
    /// requests for one name share one fetch, a name shared media did not have is not asked for again for
    /// ``missingLifetime`` seconds, and at most ``maxFetches`` names are fetched at once (past that a name is
    /// answered as absent, without asking).
    public func materialize(_ name: String) async -> Bool {
        await lookUp(name, client: nil) == .here
    }

    /// What a request for a name finds on this node: the file (fetched from shared media when another node stored
    /// it), nothing, or no lookup now. A client (its address) that is not nil is held to
    /// ``sharedMissesPerClient`` in names shared media lacked: a stream of made-up names from one address costs
    /// one database query each, so once its misses are spent it is answered `limited` without one. With ``maxFetches`` lookups running, any new one is
    /// answered `busy`: neither answer says the file is absent, so neither is a 404 a cache would keep.
    public enum Lookup: Sendable, Equatable {
        case here
        case absent
        case limited(retryAfter: Int)
        case busy
    }

    public func lookUp(_ name: String, client: String?) async -> Lookup {
        guard Self.parse(name) != nil else { return .absent }
        if file(name) != nil { return .here }
        guard shared != nil, missing.fresh(name) == nil else { return .absent }
        // Only names shared media lacked are counted against the client: a CDN or a phone asking for files that
        // exist is never held back, a stream of made-up names is, once its misses are spent.
        // A lookup is taken from the client's bucket before it runs (so lookups in flight at once cannot overdraw
        // it) and given back when the name was there.
        if let client, let wait = sharedMisses.check(client) {
            return .limited(retryAfter: RateLimiter.retryAfter(wait))
        }
        let found: Lookup
        switch await fetches.run(name, { await self.fetchShared(name) }) {
        case .full: found = .busy
        case .joined(let here): found = here ? .here : .absent
        case .led(let here):
            // A fetch cut short (its caller cancelled) has not found the name missing.
            if !here && !Task.isCancelled { missing.set(name, true) }
            found = here ? .here : .absent
        }
        if let client, found != .absent { sharedMisses.refund(client) }
        return found
    }

    /// Lookups that found nothing in shared media, per client address: a legitimate client asks for names that
    /// exist, and a few that are gone.
    public static let sharedMissesPerClient = (rate: 20.0, burst: 100.0)
    private let sharedMisses = RateLimiter(
        rate: MediaStore.sharedMissesPerClient.rate,
        burst: MediaStore.sharedMissesPerClient.burst,
        sweepAbove: 10_000
    )

    /// Names being fetched from shared media, each once however many ask.
    private let fetches = SingleFlight<String, Bool>(limit: MediaStore.fetchesAtOnce)
    /// Names shared media did not have, lately.
    private let missing = StoreCache<Bool>(lifetime: MediaStore.missingLifetime, capacity: 10_000)
    /// Seconds a name shared media did not have is answered absent without asking again.
    public static let missingLifetime: TimeInterval = 30
    /// Names fetched from shared media at once.
    public var maxFetches: Int { Self.fetchesAtOnce }
    static let fetchesAtOnce = 16

    private func fetchShared(_ name: String) async -> Bool {
        guard let shared else { return false }
        let target = path(name)
        let temp = target.deletingLastPathComponent().appendingPathComponent(".\(UUID().uuidString).part")
        do {
            try FileManager.default.createDirectory(
                at: target.deletingLastPathComponent(),
                withIntermediateDirectories: true
            )
            guard let keepUntil = try await shared.fetch(name: name, to: temp) else {
                // Cleanup of a temporary file after the error being thrown; it has nothing to add.
                try? FileManager.default.removeItem(at: temp)
                return false
            }
            // Renamed into place: a reader never sees half a file. Another request may have fetched it meanwhile.
            if FileManager.default.fileExists(atPath: target.path) {
                // Cleanup of a temporary file after the error being thrown; it has nothing to add.
                try? FileManager.default.removeItem(at: temp)
            } else {
                try FileManager.default.moveItem(at: temp, to: target)
            }
            keep(name, until: keepUntil)
            return true
        } catch {
            // Cleanup of a temporary file after the error being thrown; it has nothing to add.
            try? FileManager.default.removeItem(at: temp)
            return false
        }
    }

    /// Bytes held in memory now.
    public var cachedBytes: Int { cache.used }
}

/// A least-recently-used cache of byte buffers within a byte budget.
final class HotCache: Sendable {
    struct Entry {
        var buffer: ByteBuffer
        var type: MediaType
        var lastUse: UInt64
    }
    struct State {
        var entries: [String: Entry] = [:]
        var used = 0
        var clock: UInt64 = 0
    }
    let budget: Int
    private let state = NIOLockedValueBox(State())

    init(budget: Int) { self.budget = budget }

    var used: Int { state.withLockedValue { $0.used } }

    func get(_ key: String) -> ByteBuffer? {
        state.withLockedValue { s in
            guard var e = s.entries[key] else { return nil }
            s.clock += 1
            e.lastUse = s.clock
            s.entries[key] = e
            return e.buffer
        }
    }

    func remove(_ key: String) {
        state.withLockedValue { s in
            if let old = s.entries.removeValue(forKey: key) { s.used -= old.buffer.readableBytes }
        }
    }

    func insert(_ key: String, _ buffer: ByteBuffer, type: MediaType) {
        let size = buffer.readableBytes
        guard size <= budget / 2 else { return }  // one item never takes most of the cache
        state.withLockedValue { s in
            s.clock += 1
            if let old = s.entries[key] { s.used -= old.buffer.readableBytes }
            s.entries[key] = Entry(buffer: buffer, type: type, lastUse: s.clock)
            s.used += size
            while s.used > budget, let victim = s.entries.min(by: { $0.value.lastUse < $1.value.lastUse }) {
                s.used -= victim.value.buffer.readableBytes
                s.entries[victim.key] = nil
            }
        }
    }
}
