import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A plain TCP exchange with the server, for what a URL session hides: pipelining and HEAD framing.
public enum RawHTTP {
    public struct Answer: Sendable {
        public var status: Int
        public var headers: [String: String]
        public var body: [UInt8]
    }

    /// Sends the bytes at once and reads until the server closes the connection, or nothing came for 30 s (a liveness
    /// bound, not a speed one). It blocks its thread: with a server in the same process, call ``exchanged(port:_:)``.
    public static func exchange(port: Int, _ bytes: [UInt8]) throws -> [UInt8] {
        let fd = try connected(port)
        defer { close(fd) }
        var timeout = timeval(tv_sec: 30, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        try sendAll(fd, bytes)
        var received: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { break }
            received += chunk[0..<n]
        }
        return received
    }

    /// ``exchange(port:_:)`` on a thread of its own, for a test whose server runs in its process: a blocking read
    /// on one of the concurrency pool's threads (two on a two-core machine) starves the server's own tasks, which
    /// then answer only once the read gives up (a fresh clone's run got no answer at all within 30 s).
    public static func exchanged(port: Int, _ bytes: [UInt8]) async throws -> [UInt8] {
        try await withCheckedThrowingContinuation { c in
            Thread { c.resume(with: Result { try exchange(port: port, bytes) }) }.start()
        }
    }

    /// Sends a request and reads what comes (a stream that does not end) until `enough` says so, the server closes,
    /// or `timeout` seconds pass; returns what was read.
    public static func read(
        port: Int,
        _ bytes: [UInt8],
        timeout: TimeInterval,
        until enough: ([UInt8]) -> Bool
    ) throws -> [UInt8] {
        let fd = try connected(port)
        defer { close(fd) }
        try sendAll(fd, bytes)
        return collect(fd, timeout: timeout, until: enough)
    }

    /// What `fd` gives until `enough` says so, the server closes, or `timeout` seconds pass (read in waits of
    /// 100 ms at most).
    static func collect(_ fd: Int32, timeout: TimeInterval, until enough: ([UInt8]) -> Bool) -> [UInt8] {
        var wait = timeval(tv_sec: 0, tv_usec: 100_000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, socklen_t(MemoryLayout<timeval>.size))
        var received: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        let end = Date().addingTimeInterval(timeout)
        while Date() < end && !enough(received) {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n == 0 { break }
            if n > 0 { received += chunk[0..<n] }
        }
        return received
    }

    /// Waits up to `timeout` seconds for the server to close `fd` (a read that ends or fails), reading and
    /// dropping whatever comes; whether it closed. Off the cooperative pool.
    public static func closedByServer(_ fd: Int32, within timeout: TimeInterval) async -> Bool {
        await ending(fd, within: timeout) != "open"
    }

    /// How the server ends `fd` within `seconds`, whatever it sends before (read and dropped): "reset", "closed",
    /// "errno N", or "open" if it has not ended it by then. Off the cooperative pool.
    public static func ending(_ fd: Int32, within seconds: TimeInterval) async -> String {
        await offThePool { () -> String in
            var wait = timeval(tv_sec: 0, tv_usec: 100_000)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, socklen_t(MemoryLayout<timeval>.size))
            var chunk = [UInt8](repeating: 0, count: 65536)
            let end = Date().addingTimeInterval(seconds)
            while Date() < end {
                let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if n == 0 { return "closed" }
                if n < 0, errno != EAGAIN, errno != EWOULDBLOCK, errno != EINTR {
                    return errno == ECONNRESET ? "reset" : "errno \(errno)"
                }
            }
            return "open"
        }
    }

    /// Reads from `fd` until `enough` says so, the server closes, or `timeout` seconds pass; what was read. Off the
    /// cooperative pool.
    public static func receive(
        _ fd: Int32,
        within timeout: TimeInterval,
        until enough: @escaping @Sendable ([UInt8]) -> Bool
    ) async -> [UInt8] {
        await offThePool { collect(fd, timeout: timeout, until: enough) }
    }

    /// Writes `bytes` on `fd` at `bytesPerSecond`, paced by the clock (what is due since the start, every 50 ms), on a
    /// thread of its own: nil once all is written, else what was written before the connection went and the longest
    /// wait between two writes (a loaded machine's late wake-ups show there, not as a slower rate).
    public static func writePaced(_ fd: Int32, _ bytes: [UInt8], bytesPerSecond: Int) async -> String? {
        await offThePool { () -> String? in
            let start = Date()
            var (sent, last, longest) = (0, start, 0.0)
            while sent < bytes.count {
                let due = min(bytes.count, Int(Date().timeIntervalSince(start) * Double(bytesPerSecond)))
                if due > sent {
                    guard write(fd, Array(bytes[sent..<due])) else {
                        return "closed after \(sent) bytes (longest wait between writes: \(Int(longest * 1000)) ms)"
                    }
                    sent = due
                    longest = max(longest, Date().timeIntervalSince(last))
                    last = Date()
                }
                usleep(50_000)
            }
            return nil
        }
    }

    /// Writes `bytes` on `fd`; false when the connection is gone.
    public static func write(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        (try? sendAll(fd, bytes)) != nil
    }

    /// A socket connected to 127.0.0.1:`port`, with a receive buffer of `receiveBuffer` bytes when given (set before
    /// the connection, so that the window it offers is small); the caller closes it.
    public static func connected(_ port: Int, receiveBuffer: Int32? = nil) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw CocoaError(.fileReadUnknown) }
        if var size = receiveBuffer {
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard result == 0 else {
            close(fd)
            throw CocoaError(.fileReadUnknown)
        }
        return fd
    }

    static func sendAll(_ fd: Int32, _ bytes: [UInt8]) throws {
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw CocoaError(.fileWriteUnknown) }
            sent += n
        }
    }

    /// The answers in the bytes, in order; `heads[i]` says the i-th answered a HEAD (its length has no body).
    public static func split(_ bytes: [UInt8], heads: [Bool]) -> [Answer] {
        var answers: [Answer] = []
        var at = 0
        let crlf2: [UInt8] = [13, 10, 13, 10]
        while at < bytes.count {
            guard let end = (at...(bytes.count - 4)).first(where: { Array(bytes[$0..<($0 + 4)]) == crlf2 }) else {
                break
            }
            let lines = String(decoding: bytes[at..<end], as: UTF8.self).components(separatedBy: "\r\n")
            let status = lines.first.flatMap { Int($0.split(separator: " ").dropFirst().first ?? "") } ?? 0
            var headers: [String: String] = [:]
            for line in lines.dropFirst() {
                guard let colon = line.firstIndex(of: ":") else { continue }
                headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(
                    in: .whitespaces
                )
            }
            let isHead = answers.count < heads.count && heads[answers.count]
            let length = isHead ? 0 : Int(headers["content-length"] ?? "0") ?? 0
            let bodyEnd = min(bytes.count, end + 4 + length)
            answers.append(Answer(status: status, headers: headers, body: Array(bytes[(end + 4)..<bodyEnd])))
            at = bodyEnd
        }
        return answers
    }
}
