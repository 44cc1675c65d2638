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
        configure: @escaping @Sendable (Process) -> Void = { _ in }
    ) async throws -> Run {
        // Launched from the caller's task (a launch is quick); only the reads and the wait go to a thread of their
        // own. Launched from a `Thread` of ours, Foundation's `run()` crashed now and then inside its memcpy.
        let p = Process()
        p.executableURL = executable
        p.arguments = arguments
        if let environment { p.environment = environment }
        if let directory { p.currentDirectoryURL = directory }
        configure(p)
        let out = Pipe()
        let err = mergeErrors ? out : Pipe()
        let input = Pipe()
        p.standardOutput = out
        p.standardError = err
        p.standardInput = input
        try p.runAlone()
        let launched = UncheckedBox((p, out, err, input))
        return await offThePool {
            let (p, out, err, input) = launched.value
            let errors = mergeErrors ? nil : Drain(err.fileHandleForReading)
            let writer = Thread {
                input.fileHandleForWriting.write(stdin)
                try? input.fileHandleForWriting.close()
            }
            writer.start()
            let output = out.fileHandleForReading.readDataToEndOfFile()
            let rest = errors?.wait() ?? Data()
            p.waitUntilExit()
            return Run(status: p.terminationStatus, stdout: output, stderr: rest)
        }
    }

    /// A pipe read to its end on a thread of its own.
    public final class Drain: @unchecked Sendable {  // `data` is written before `done` signals and read after it
        private var data = Data()
        private let done = DispatchSemaphore(value: 0)

        public init(_ handle: FileHandle) {
            Thread { [self] in
                data = handle.readDataToEndOfFile()
                done.signal()
            }.start()
        }

        public func wait() -> Data {
            done.wait()
            return data
        }
    }
}

extension Process {
    /// Foundation's `Process.run()` on Linux is not safe to call from several threads at once: with the tests'
    /// launches moved off the cooperative pool (two threads) onto threads of their own, two at once crashed the
    /// test process inside its memcpy (seen twice on fresh clones). Every launch of the tests goes through here.
    private static let launches = NSLock()

    /// `run()`, one launch at a time in this process.
    public func runAlone() throws {
        try Self.launches.withLock { try run() }
    }

    /// Waits for the process to end, off the cooperative pool.
    public func exited() async {
        let process = UncheckedBox(self)
        await offThePool { process.value.waitUntilExit() }
    }
}

/// Hands a value that is not `Sendable` to another thread that alone uses it meanwhile.
public struct UncheckedBox<T>: @unchecked Sendable {
    public let value: T
    public init(_ value: T) { self.value = value }
}
