import Crypto
import Foundation
import NIOCore
import RichPushCore

extension MediaStore {
    /// A file being written into the store as its bytes arrive: hashed on the way, with its first bytes kept for
    /// sniffing, then named by its hash (``finish(_:type:)``) or thrown away (``Upload/discard()``). Nothing
    /// larger than one read is held in memory, however large the file.
    public final class Upload {
        let temp: URL
        private let handle: FileHandle
        private var hasher = SHA256()
        private var finished = false
        public private(set) var size = 0
        /// The first bytes, as many as the sniffer wants.
        public private(set) var prefix: [UInt8] = []

        init(temp: URL) throws {
            guard FileManager.default.createFile(atPath: temp.path, contents: nil) else {
                throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: temp.path])
            }
            self.temp = temp
            handle = try FileHandle(forWritingTo: temp)
        }

        public func append(_ buffer: ByteBuffer) throws {
            try buffer.withUnsafeReadableBytes { bytes in
                if prefix.count < MediaSniffer.preferredPrefixLength {
                    prefix += bytes.prefix(MediaSniffer.preferredPrefixLength - prefix.count)
                }
                hasher.update(bufferPointer: bytes)
                try handle.write(contentsOf: bytes)
            }
            size += buffer.readableBytes
        }

        func close() throws -> String {
            try handle.close()
            finished = true
            return MediaStore.hex(hasher.finalize())
        }

        /// Removes the partial file (an upload refused or cut short).
        public func discard() {
            if !finished { try? handle.close() }
            finished = true
            try? FileManager.default.removeItem(at: temp)
        }

        deinit { if !finished { discard() } }
    }

    /// Starts an upload into a hidden file in `up/`, a folder the sweep visits like a shard (its name is not hex,
    /// so no stored file lands there): a part left behind by a crash is removed after an hour.
    public func beginUpload() throws -> Upload {
        let dir = directory.appendingPathComponent("up")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        return try Upload(temp: dir.appendingPathComponent(".\(UUID().uuidString).part"))
    }

    /// Names the uploaded file by its hash and type; storing the same bytes again is free. The file is not read
    /// into the memory cache: it is served from disk until it is asked for.
    public func finish(_ upload: Upload, type: MediaType) throws -> Item {
        guard MediaRules.isHostable(type) else {
            upload.discard()
            throw NotHostable(type: type)
        }
        let hash = try upload.close()
        let item = Item(hash: hash, type: type, size: upload.size)
        let file = path(item.name)
        if FileManager.default.fileExists(atPath: file.path) {
            upload.discard()
        } else {
            try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
            // Renamed into place: a reader never sees half a file.
            try FileManager.default.moveItem(at: upload.temp, to: file)
        }
        return item
    }
}
