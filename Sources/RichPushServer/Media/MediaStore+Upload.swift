import Crypto
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import RichPushCore

extension MediaStore {
    /// A file being written into the store as its bytes arrive: hashed on the way, with its first bytes kept for
    /// sniffing, then named by its hash (``finish(_:type:)``) or thrown away (``Upload/discard()``). Nothing
    /// larger than one read is held in memory, however large the file. Uploads (`POST /v1/media`) and preflight
    /// fetches that may be re-hosted (a ``FetchSink``) both write through it; one writer at a time, behind a lock.
    public final class Upload: FetchSink, @unchecked Sendable {
        struct State {
            var hasher = SHA256()
            var finished = false
            var size = 0
            var prefix: [UInt8] = []
        }

        let temp: URL
        private let handle: FileHandle
        private let state = NIOLockedValueBox(State())
        public var size: Int { state.withLockedValue { $0.size } }
        /// The first bytes, as many as the sniffer wants.
        public var prefix: [UInt8] { state.withLockedValue { $0.prefix } }

        init(temp: URL) throws {
            guard FileManager.default.createFile(atPath: temp.path, contents: nil) else {
                throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: temp.path])
            }
            self.temp = temp
            handle = try FileHandle(forWritingTo: temp)
        }

        public func append(_ buffer: ByteBuffer) throws {
            try state.withLockedValue { s in
                try buffer.withUnsafeReadableBytes { bytes in
                    if s.prefix.count < MediaSniffer.preferredPrefixLength {
                        s.prefix += bytes.prefix(MediaSniffer.preferredPrefixLength - s.prefix.count)
                    }
                    s.hasher.update(bufferPointer: bytes)
                    try handle.write(contentsOf: bytes)
                }
                s.size += buffer.readableBytes
            }
        }

        /// Starts over (the bytes so far were from an attempt that did not finish).
        public func restart() throws {
            try state.withLockedValue { s in
                try handle.truncate(atOffset: 0)
                try handle.seek(toOffset: 0)
                s = State()
            }
        }

        func close() throws -> String {
            try state.withLockedValue { s in
                try handle.close()
                s.finished = true
                return MediaStore.hex(s.hasher.finalize())
            }
        }

        /// Removes the partial file (an upload refused or cut short).
        public func discard() {
            let wasOpen = state.withLockedValue { s in
                defer { s.finished = true }
                return !s.finished
            }
            // Cleanup of a discarded upload; nothing to report.
            if wasOpen { try? handle.close() }
            try? FileManager.default.removeItem(at: temp)
        }

        deinit { discard() }
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
            try FileManager.default.createDirectory(
                at: file.deletingLastPathComponent(),
                withIntermediateDirectories: true
            )
            // Renamed into place: a reader never sees half a file.
            try FileManager.default.moveItem(at: upload.temp, to: file)
        }
        return item
    }
}
