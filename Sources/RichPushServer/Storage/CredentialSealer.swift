import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Seals provider credentials (APNs keys, FCM service accounts) before they are written to the database, with
/// AES-256-GCM and a key kept in a file of its own: a copy of the database alone does not give the credentials
/// away. Values written before sealing was on are read as they are, and sealed when the store opens.
public struct CredentialSealer: Sendable {
    /// A sealing problem, naming what to fix.
    public struct Problem: Error, CustomStringConvertible {
        public var description: String
    }

    static let prefix = "sealed:v1:"
    let key: SymmetricKey
    /// Where the key came from, for messages.
    public let source: String
    /// The key file this process made (nil: it was there already). A node that then refuses to start, because the
    /// database holds another node's key, removes it with ``removeMadeFile()``: it leaves nothing behind.
    public let madeFile: String?

    public init(key: [UInt8], source: String = "the credentials key", madeFile: String? = nil) throws {
        guard key.count == 32 else {
            throw Problem(description: "\(source): the key must be 32 bytes, found \(key.count)")
        }
        self.key = SymmetricKey(data: key)
        self.source = source
        self.madeFile = madeFile
    }

    /// Reads the key file (32 bytes, base64), or makes one readable by its owner only when it does not exist
    /// and `create` is true.
    public static func load(keyFile path: String, create: Bool) throws -> CredentialSealer {
        let url = URL(fileURLWithPath: path)
        if FileManager.default.fileExists(atPath: path) {
            let text: String
            do { text = try String(contentsOf: url, encoding: .utf8) } catch {
                throw Problem(description: "credentials key file \(path) cannot be read: \(error)")
            }
            guard let bytes = Data(base64Encoded: text.trimmingCharacters(in: .whitespacesAndNewlines)) else {
                throw Problem(description: "credentials key file \(path): not base64")
            }
            return try CredentialSealer(key: Array(bytes), source: "credentials key file \(path)")
        }
        guard create else { throw Problem(description: "credentials key file \(path) is missing") }
        let fresh = SymmetricKey(size: .bits256).withUnsafeBytes { Array($0) }
        let dir = url.deletingLastPathComponent()
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        // Written aside and linked into place, which fails when the file exists: of two nodes starting at once on
        // one folder, one key wins and both use it.
        // Made readable by its owner only from the first byte (a file created with the default mode and then
        // restricted could be read by anyone in between: the attack on the rotation command showed it).
        let temp = dir.appendingPathComponent(".\(url.lastPathComponent).\(UUID().uuidString)")
        let fd = Glibc.open(temp.path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Problem(description: "credentials key file \(path): could not be written") }
        defer { unlink(temp.path) }
        let text = Array((Data(fresh).base64EncodedString() + "\n").utf8)
        let wrote = text.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        let synced = fsync(fd) == 0
        Glibc.close(fd)
        guard wrote == text.count, synced else {
            throw Problem(description: "credentials key file \(path): could not be written")
        }
        let made = link(temp.path, path) == 0
        guard made || errno == EEXIST else {
            throw Problem(description: "credentials key file \(path): could not be written")
        }
        let written = try load(keyFile: path, create: false)
        return try CredentialSealer(
            key: written.key.withUnsafeBytes { Array($0) },
            source: written.source,
            madeFile: made ? path : nil
        )
    }

    /// Removes the key file this process made, when it made one (a node that refuses to start after making it).
    public func removeMadeFile() {
        if let madeFile { unlink(madeFile) }
    }

    static func isSealed(_ stored: String) -> Bool { stored.hasPrefix(prefix) }

    public func seal(_ text: String) throws -> String {
        let box = try AES.GCM.seal(Data(text.utf8), using: key)
        guard let combined = box.combined else { throw Problem(description: "sealing failed") }
        return Self.prefix + combined.base64EncodedString()
    }

    /// The text of a stored value: opened when sealed, as it is otherwise.
    public func open(_ stored: String) throws -> String {
        guard Self.isSealed(stored) else { return stored }
        guard let data = Data(base64Encoded: String(stored.dropFirst(Self.prefix.count))),
            // Either failure means a damaged value or another key: the error below says so.
            let box = try? AES.GCM.SealedBox(combined: data),
            let plain = try? AES.GCM.open(box, using: key)
        else {
            throw Problem(
                description: "stored credentials do not open with \(source): it is not the key they were sealed with"
            )
        }
        return String(decoding: plain, as: UTF8.self)
    }
}
