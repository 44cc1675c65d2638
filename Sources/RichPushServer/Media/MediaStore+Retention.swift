import Foundation

/// Retention of hosted media. Each file's modification time is the last moment a device may still fetch it: a send
/// that references the file moves it to the end of the send's life (its time, spread and TTL), and a sweep deletes
/// files whose moment is more than the retention behind. Uploads start at their upload time.
extension MediaStore {
    /// How long a device may fetch media after its notification is due when no TTL was given: FCM keeps a message
    /// for 28 days by default, and APNs' limit is of the same order.
    public static let defaultLifetime: TimeInterval = 28 * 86_400

    /// Keeps a stored file until at least `until` (rounded up to the hour, so that the sends of the next hour touch
    /// nothing on disk); false when it is not stored (swept, or never there).
    @discardableResult
    public func keep(_ name: String, until requested: Date) -> Bool {
        guard Self.parse(name) != nil else { return false }
        // Held to a year ahead: the time is derived from a request, and it is converted to whole seconds below.
        let latest = Date().addingTimeInterval(366 * 86_400).timeIntervalSince1970
        let requestedSeconds =
            requested.timeIntervalSince1970.isFinite ? min(requested.timeIntervalSince1970, latest) : latest
        let until = Date(timeIntervalSince1970: (requestedSeconds / 3600).rounded(.up) * 3600)
        if let known = kept.withLockedValue({ $0[name] }), known >= until { return true }
        let p = path(name).path
        var st = stat()
        guard stat(p, &st) == 0 else { return false }
        let current = Date(timeIntervalSince1970: Self.modified(st))
        if current < until {
            let seconds = Int(until.timeIntervalSince1970.rounded(.up))
            var times = [timespec(tv_sec: time_t(seconds), tv_nsec: 0), timespec(tv_sec: time_t(seconds), tv_nsec: 0)]
            guard utimensat(AT_FDCWD, p, &times, 0) == 0 else { return false }
        }
        kept.withLockedValue { k in
            if k.count > 100_000 { k.removeAll() }
            k[name] = max(until, current)
        }
        return true
    }

    /// Keeps a file until at least `until` here and in shared media (rounded up to the hour, as ``keep(_:until:)``
    /// does: the sends of the next hour ask the database nothing).
    public func keepEverywhere(_ name: String, until requested: Date) async throws {
        keep(name, until: requested)
        guard let shared else { return }
        let until = Date(
            timeIntervalSince1970: (min(requested.timeIntervalSince1970, Date().timeIntervalSince1970 + 366 * 86_400)
                / 3600).rounded(.up) * 3600
        )
        if let known = sharedKept.withLockedValue({ $0[name] }), known >= until { return }
        try await shared.keep(name: name, until: until)
        sharedKept.withLockedValue { k in
            if k.count > 100_000 { k.removeAll() }
            k[name] = until
        }
    }

    /// Deletes files whose last fetch moment is more than `retention` before `now`, and leftovers of interrupted
    /// writes older than an hour. Returns what was deleted.
    @discardableResult
    public func sweep(retention: TimeInterval, now: Date = Date()) -> (files: Int, bytes: Int) {
        let cutoff = now.addingTimeInterval(-retention)
        var files = 0
        var bytes = 0
        let fm = FileManager.default
        // A folder that cannot be listed (not made yet) holds nothing this sweep could remove.
        for shard in (try? fm.contentsOfDirectory(atPath: directory.path)) ?? [] where shard.count == 2 {
            let folder = directory.appendingPathComponent(shard)
            for name in (try? fm.contentsOfDirectory(atPath: folder.path)) ?? [] {
                let p = folder.appendingPathComponent(name).path
                var st = stat()
                guard stat(p, &st) == 0 else { continue }
                let modified = Date(timeIntervalSince1970: Self.modified(st))
                let stale =
                    Self.parse(name) != nil
                    ? modified < cutoff : (name.hasSuffix(".part") && modified < now.addingTimeInterval(-3600))
                guard stale, unlink(p) == 0 else { continue }
                files += 1
                bytes += Int(st.st_size)
                cache.remove(name)
                kept.withLockedValue { $0[name] = nil }
            }
        }
        return (files, bytes)
    }

    static func modified(_ st: stat) -> TimeInterval {
        #if canImport(Darwin)
        return TimeInterval(st.st_mtimespec.tv_sec)
        #else
        return TimeInterval(st.st_mtim.tv_sec)
        #endif
    }
}
