import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A child process started with `posix_spawn`, in place of Foundation's `Process` on Linux.
///
/// Foundation's `Process.run()` on Linux finds the highest open descriptor by reading `/proc/self/fd`, and copies
/// each directory entry's whole 256-byte name field, past the end of glibc's buffer when an entry sits last in it.
/// When the page after it is unmapped, the test process dies with "Bad pointer dereference" inside `memcpy`. Two
/// fresh clones' runs ended so, with entries such as "1377" in the registers (the test process holds over a thousand
/// descriptors). Serializing the launches did not help: the read races nothing, it is wrong alone.
///
/// Here the child closes every descriptor from 3 up (`posix_spawn_file_actions_addclosefrom_np`, glibc 2.34), so
/// nothing is listed. The child gets its own process group, as with `Process`, and the default action for every
/// signal the test process ignores (SIGPIPE), as a shell would give it.
public final class Spawn: @unchecked Sendable {  // set up on one thread, then `state` behind `ended`
    /// Where one of the child's standard streams goes.
    public enum Stream {
        /// This process's own.
        case inherit
        /// /dev/null.
        case null
        /// The pipe's child end (the read end for input, the write end for output); this process closes it once
        /// the child runs.
        case pipe(Pipe)
        /// An open file.
        case file(FileHandle)
    }

    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    public var executableURL: URL?
    public var arguments: [String] = []
    /// The child's whole environment; nil: this process's.
    public var environment: [String: String]?
    public var currentDirectoryURL: URL?
    public var standardInput: Stream = .inherit
    public var standardOutput: Stream = .inherit
    public var standardError: Stream = .inherit

    public private(set) var processIdentifier: pid_t = 0

    /// The status `waitpid` reported, once the child is reaped; whoever reaps it broadcasts.
    private var status: Int32?
    private let ended = NSCondition()

    public init() {}

    /// Starts the child.
    public func run() throws {
        guard processIdentifier == 0 else { throw Failure(description: "a child is started once") }
        guard let executable = executableURL?.path else { throw Failure(description: "no executable is set") }
        guard access(executable, X_OK) == 0 else {
            throw Failure(description: "\(executable) is not executable: \(String(cString: strerror(errno)))")
        }

        var actions = posix_spawn_file_actions_t()
        try check(posix_spawn_file_actions_init(&actions), "posix_spawn_file_actions_init")
        defer { posix_spawn_file_actions_destroy(&actions) }
        var attributes = posix_spawnattr_t()
        try check(posix_spawnattr_init(&attributes), "posix_spawnattr_init")
        defer { posix_spawnattr_destroy(&attributes) }

        var devNull: Int32 = -1
        defer { if devNull >= 0 { close(devNull) } }
        for (target, stream, input) in [
            (STDIN_FILENO, standardInput, true), (STDOUT_FILENO, standardOutput, false),
            (STDERR_FILENO, standardError, false),
        ] {
            let source: Int32
            switch stream {
            case .inherit: continue
            case .null:
                if devNull < 0 { devNull = open("/dev/null", O_RDWR | O_CLOEXEC) }
                guard devNull >= 0 else { throw Failure(description: "/dev/null: \(String(cString: strerror(errno)))") }
                source = devNull
            case .pipe(let pipe):
                source = input ? pipe.fileHandleForReading.fileDescriptor : pipe.fileHandleForWriting.fileDescriptor
            case .file(let handle): source = handle.fileDescriptor
            }
            // dup2 clears close-on-exec on the copy; a descriptor already in place is kept as it is.
            try check(posix_spawn_file_actions_adddup2(&actions, source, target), "adddup2")
        }
        try check(Self.closeFrom(&actions, 3), "posix_spawn_file_actions_addclosefrom_np")
        if let directory = currentDirectoryURL?.path {
            try check(Self.changeDirectory(&actions, directory), "posix_spawn_file_actions_addchdir_np (\(directory))")
        }

        var defaults = sigset_t()
        sigemptyset(&defaults)
        sigaddset(&defaults, SIGPIPE)
        var none = sigset_t()
        sigemptyset(&none)
        try check(posix_spawnattr_setsigdefault(&attributes, &defaults), "posix_spawnattr_setsigdefault")
        try check(posix_spawnattr_setsigmask(&attributes, &none), "posix_spawnattr_setsigmask")
        try check(posix_spawnattr_setpgroup(&attributes, 0), "posix_spawnattr_setpgroup")
        try check(
            posix_spawnattr_setflags(
                &attributes,
                Int16(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK)
            ),
            "posix_spawnattr_setflags"
        )

        let argv = CStrings([executable] + arguments)
        defer { argv.free() }
        let envp = environment.map { CStrings($0.map { "\($0.key)=\($0.value)" }) }
        defer { envp?.free() }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, executable, &actions, &attributes, argv.pointers, envp?.pointers ?? environ)
        guard spawned == 0 else {
            throw Failure(description: "starting \(executable) failed: \(String(cString: strerror(spawned)))")
        }
        processIdentifier = pid

        // The child holds its own copies now.
        if case .pipe(let pipe) = standardInput { try? pipe.fileHandleForReading.close() }
        if case .pipe(let pipe) = standardOutput { try? pipe.fileHandleForWriting.close() }
        if case .pipe(let pipe) = standardError, !isSamePipe(standardOutput, pipe) {
            try? pipe.fileHandleForWriting.close()
        }
    }

    private func isSamePipe(_ stream: Stream, _ pipe: Pipe) -> Bool {
        if case .pipe(let other) = stream { return other === pipe }
        return false
    }

    /// Whether the child has not ended (it is reaped here if it has).
    public var isRunning: Bool {
        guard processIdentifier != 0 else { return false }
        return reap(blocking: false) == nil
    }

    /// Blocks until the child ends.
    public func waitUntilExit() {
        guard processIdentifier != 0 else { return }
        _ = reap(blocking: true)
    }

    /// The exit status, or the signal that ended it; 0 while it runs.
    public var terminationStatus: Int32 {
        guard let status = ended.withLock({ self.status }) else { return 0 }
        return Self.exited(status) ? (status >> 8) & 0xff : status & 0x7f
    }

    public var terminationReason: Process.TerminationReason {
        guard let status = ended.withLock({ self.status }) else { return .exit }
        return Self.exited(status) ? .exit : .uncaughtSignal
    }

    /// SIGTERM.
    public func terminate() { signal(SIGTERM) }

    /// SIGINT.
    public func interrupt() { signal(SIGINT) }

    /// Sends `signal` to the child while it has not been reaped (so never to a pid reused since).
    public func signal(_ signal: Int32) {
        ended.withLock {
            if processIdentifier != 0, status == nil { kill(processIdentifier, signal) }
        }
    }

    /// The status once reaped, nil while the child runs (only when not blocking). One caller reaps; another that
    /// finds the child gone (ECHILD) waits for it to record the status.
    private func reap(blocking: Bool) -> Int32? {
        if let status = ended.withLock({ self.status }) { return status }
        var raw: Int32 = 0
        while true {
            let r = waitpid(processIdentifier, &raw, blocking ? 0 : WNOHANG)
            if r == processIdentifier {
                ended.withLock {
                    status = raw
                    ended.broadcast()
                }
                return raw
            }
            if r == 0 { return nil }
            if errno == EINTR { continue }
            // Reaped by another caller of this object: its status arrives under the lock.
            ended.lock()
            defer { ended.unlock() }
            while status == nil {
                if !blocking { return nil }
                ended.wait()
            }
            return status
        }
    }

    private static func exited(_ status: Int32) -> Bool { status & 0x7f == 0 }

    private func check(_ result: Int32, _ call: String) throws {
        guard result == 0 else { throw Failure(description: "\(call) failed: \(String(cString: strerror(result)))") }
    }

    // glibc declares these two only for _GNU_SOURCE, which Swift's Glibc module does not define: found by name.
    private typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    private typealias ChangeDirectory =
        @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32

    // A constant, looked up once.
    nonisolated(unsafe) private static let closeFromSymbol = dlsym(
        UnsafeMutableRawPointer(bitPattern: 0),
        "posix_spawn_file_actions_addclosefrom_np"
    )
    // A constant, looked up once.
    nonisolated(unsafe) private static let changeDirectorySymbol = dlsym(
        UnsafeMutableRawPointer(bitPattern: 0),
        "posix_spawn_file_actions_addchdir_np"
    )

    private static func closeFrom(_ actions: UnsafeMutablePointer<posix_spawn_file_actions_t>, _ from: Int32) -> Int32 {
        guard let symbol = closeFromSymbol else { return ENOSYS }
        return unsafeBitCast(symbol, to: CloseFrom.self)(actions, from)
    }

    private static func changeDirectory(
        _ actions: UnsafeMutablePointer<posix_spawn_file_actions_t>,
        _ path: String
    ) -> Int32 {
        guard let symbol = changeDirectorySymbol else { return ENOSYS }
        return path.withCString { unsafeBitCast(symbol, to: ChangeDirectory.self)(actions, $0) }
    }
}

/// A NULL-terminated array of C strings, for `posix_spawn`'s argv and envp.
private struct CStrings {
    let pointers: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>
    let count: Int

    init(_ strings: [String]) {
        count = strings.count
        pointers = .allocate(capacity: count + 1)
        for (i, s) in strings.enumerated() { pointers[i] = strdup(s) }
        pointers[count] = nil
    }

    func free() {
        for i in 0..<count { Glibc.free(pointers[i]) }
        pointers.deallocate()
    }
}
