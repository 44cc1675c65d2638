import Foundation

/// Runs blocking work (waiting for a child process, reading a pipe to its end, starting PostgreSQL) on a thread of
/// its own, off the cooperative pool that runs every test's tasks. That pool has a thread per core: on a machine
/// with two, two tests waiting in `waitUntilExit` at once stalled every other test in the process, and the ones
/// that measure a time (a timeout, a deadline) failed together (seen in CI: a 1.5 s timeout measured 11.6 s).
public func offThePool<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try work() }) }.start()
    }
}

/// ``offThePool(_:)`` for work that cannot fail.
public func offThePool<T: Sendable>(_ work: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        Thread { continuation.resume(returning: work()) }.start()
    }
}

/// A child process run to its end, its output and errors read at the same time (one read to its end before the
/// other waits forever once the other pipe's buffer is full), all of it off the cooperative pool.
public enum ChildProcess {
    public struct Run: Sendable {
        public var status: Int32
        public var stdout: Data
        public var stderr: Data
        public var output: String { String(decoding: stdout, as: UTF8.self) }
        public var errors: String { String(decoding: stderr, as: UTF8.self) }
    }

    /// Runs `executable` with `arguments`, writing `stdin` to it; `mergeErrors` sends its errors to `stdout`.
    public static func run(
        _ executable: URL,
        _ arguments: [String],
        environment: [String: String]? = nil,
        directory: URL? = nil,
        stdin: Data = Data(),
        mergeErrors: Bool = false,
        configure: @escaping @Sendable (Spawn) -> Void = { _ in }
    ) async throws -> Run {
        // Launched from the caller's task (a launch is quick); only the reads and the wait go to a thread of their
        // own.
        let p = Spawn()
        p.executableURL = executable
        p.arguments = arguments
        if let environment { p.environment = environment }
        if let directory { p.currentDirectoryURL = directory }
        configure(p)
        let out = Pipe()
        let err = mergeErrors ? out : Pipe()
        let input = Pipe()
        p.standardOutput = .pipe(out)
        p.standardError = .pipe(err)
        p.standardInput = .pipe(input)
        try p.run()
        let launched = UncheckedBox((p, out, err, input))
        return try await offThePool {
            let (p, out, err, input) = launched.value
            let errors = mergeErrors ? nil : Drain(err.fileHandleForReading)
            let writer = Thread {
                // A child that exits without reading its input closes the pipe: nothing to report.
                try? input.fileHandleForWriting.write(contentsOf: stdin)
                try? input.fileHandleForWriting.close()
            }
            writer.start()
            let output = PipeRead.toEnd(out.fileHandleForReading)
            let rest = errors?.wait() ?? .init(data: Data(), failure: nil)
            p.waitUntilExit()
            if let failure = output.failure ?? rest.failure { throw failure }
            return Run(status: p.terminationStatus, stdout: output.data, stderr: rest.data)
        }
    }

    /// A pipe read to its end on a thread of its own.
    public final class Drain: @unchecked Sendable {  // `read` is written before `done` signals and read after it
        private var read = PipeRead(data: Data(), failure: nil)
        private let done = DispatchSemaphore(value: 0)

        public init(_ handle: FileHandle) {
            Thread { [self] in
                read = PipeRead.toEnd(handle)
                done.signal()
            }.start()
        }

        public func wait() -> PipeRead {
            done.wait()
            return read
        }
    }
}

/// A pipe read to its end with `read(2)`, and what stopped it if not its end. Foundation's `readDataToEndOfFile()`
/// traps on a read error (`try!`), which ended the whole test process once, every test after it unrun, with no
/// word on which descriptor or why: a failed read is the caller's error here, naming both.
public struct PipeRead: Sendable {
    public var data: Data
    public var failure: Failure?

    public struct Failure: Error, CustomStringConvertible {
        public var descriptor: Int32
        public var errno: Int32
        public var after: Int
        public var description: String {
            "reading descriptor \(descriptor) failed after \(after) bytes: \(String(cString: strerror(errno))) (errno \(errno))"
        }
    }

    public static func toEnd(_ handle: FileHandle) -> PipeRead {
        let fd = handle.fileDescriptor
        var data = Data()
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let n = chunk.withUnsafeMutableBytes { Foundation.read(fd, $0.baseAddress, $0.count) }
            if n > 0 {
                data.append(contentsOf: chunk[0..<n])
            } else if n == 0 {
                return PipeRead(data: data, failure: nil)
            } else if errno != EINTR {
                return PipeRead(data: data, failure: Failure(descriptor: fd, errno: errno, after: data.count))
            }
        }
    }

    /// The data, or the failure thrown.
    public func get() throws -> Data {
        if let failure { throw failure }
        return data
    }
}

extension Spawn {
    /// Waits for the process to end, off the cooperative pool.
    public func exited() async {
        await offThePool { self.waitUntilExit() }
    }
}

/// Hands a value that is not `Sendable` to another thread that alone uses it meanwhile.
public struct UncheckedBox<T>: @unchecked Sendable {
    public let value: T
    public init(_ value: T) { self.value = value }
}
