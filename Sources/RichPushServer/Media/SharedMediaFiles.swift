import Foundation

/// Hosted media kept where every node of a cluster reaches it (PostgreSQL), by name (`<sha256>.<ext>`): each node's
/// ``MediaStore`` is then a cache of it on local disk. A file stored by one node is served by all.
public protocol SharedMediaFiles: Sendable {
    /// Stores the file's bytes under its name unless they are there already (the name is the content's hash),
    /// kept at least until `keepUntil`.
    func put(name: String, file: URL, keepUntil: Date) async throws
    /// Writes the named file's bytes to `destination` and returns until when it is kept; nil when not stored.
    func fetch(name: String, to destination: URL) async throws -> Date?
    /// Keeps a stored file until at least `until`; false when it is not stored.
    @discardableResult
    func keep(name: String, until: Date) async throws -> Bool
    /// Deletes files kept until before `cutoff`; returns how many and their bytes.
    func sweep(before cutoff: Date) async throws -> (files: Int, bytes: Int)
}
