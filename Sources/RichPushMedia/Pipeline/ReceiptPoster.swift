import Foundation
import RichPushCore

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Whether and how the device library posts its delivery report to the receipt address a payload carries
/// (`rp.r`, given by the server).
public struct ReceiptPolicy: Sendable {
    /// Post receipts when the payload carries an address.
    public var enabled: Bool
    /// The longest the post may hold up delivery (less when the deadline is nearer).
    public var timeout: TimeInterval
    /// An id of this device the server files the receipt under (a later receipt from it replaces the earlier);
    /// without one, each receipt is filed on its own.
    public var deviceID: String?

    public init(enabled: Bool = true, timeout: TimeInterval = 2, deviceID: String? = nil) {
        self.enabled = enabled
        self.timeout = timeout
        self.deviceID = deviceID
    }
}

/// What became of a receipt.
public enum ReceiptOutcome: Sendable, Hashable, CustomStringConvertible {
    /// The server recorded it (HTTP status).
    case posted(status: Int)
    /// The server refused it, or it could not be sent (why).
    case failed(String)
    /// Not sent (why: off, no address, insecure address).
    case notSent(String)

    public var description: String {
        switch self {
        case .posted(let s): return "posted (\(s))"
        case .failed(let why): return "failed: \(why)"
        case .notSent(let why): return "not sent: \(why)"
        }
    }
}

/// The pipeline's timers (the deadline, the receipt's timeout) run on a queue of their own. On Linux the process's
/// shared dispatch queues and Swift's task pool are one set of threads, as many as the cores: two jobs busy with
/// the CPU hold a timer there until one of them ends (measured: a 0.5 s timer on `DispatchQueue.global()` fired
/// after 3 s beside two detached tasks spinning for 3 s; on a serial queue of its own, after 0.5 s). A serial
/// queue gets a thread of its own when it has work.
enum PipelineClock {
    static let queue = DispatchQueue(label: "richpush.pipeline-clock")
}

/// Posts a delivery report: `POST <receipt address>` with `{"report": …, "device": …}`, bounded by a timeout, no
/// cookies, no redirects followed.
public enum ReceiptPoster {
    public static func post(
        _ report: DeliveryReport,
        to address: String,
        policy: ReceiptPolicy,
        allowInsecureHTTP: Bool,
        timeout: TimeInterval,
        onTimeout: (@Sendable (ReceiptOutcome) -> Void)? = nil
    ) async -> ReceiptOutcome {
        guard let url = URL(string: address), let scheme = url.scheme?.lowercased(), url.host != nil else {
            return .notSent("the receipt address is not a URL")
        }
        guard scheme == "https" || (scheme == "http" && allowInsecureHTTP) else {
            return .notSent("the receipt address is not https")
        }
        guard timeout > 0.05 else { return .notSent("no time left before the deadline") }
        var request = URLRequest(url: url, cachePolicy: .reloadIgnoringLocalCacheData, timeoutInterval: timeout)
        request.httpMethod = "POST"
        request.httpBody = Data(body(report, deviceID: policy.deviceID))
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpShouldHandleCookies = false
        let config = URLSessionConfiguration.ephemeral
        // The session's own timeouts are whole seconds on some platforms; the timer below keeps the exact one.
        config.timeoutIntervalForRequest = timeout.rounded(.up)
        config.timeoutIntervalForResource = timeout.rounded(.up)
        // The answer is taken on the clock's queue too, so a busy task pool does not hold it past the timeout.
        let answers = OperationQueue()
        answers.underlyingQueue = PipelineClock.queue
        let session = URLSession(configuration: config, delegate: RedirectRefuser(), delegateQueue: answers)
        defer { session.finishTasksAndInvalidate() }
        // Whichever comes first answers: the session's completion, or the timer. The timer does not wait for the
        // cancelled task to complete (a loaded test process saw a 0.5 s post end after 8 s, the timer having run
        // first): the extension's budget is the timer's, whatever the session does after the cancel.
        let answer = Once<ReceiptOutcome>()
        return await withCheckedContinuation { (continuation: CheckedContinuation<ReceiptOutcome, Never>) in
            answer.set(continuation)
            let task = session.dataTask(with: request) { _, response, error in
                if let error {
                    answer.resume(.failed(error.localizedDescription))
                    return
                }
                let status = (response as? HTTPURLResponse)?.statusCode ?? 0
                answer.resume((200..<300).contains(status) ? .posted(status: status) : .failed("HTTP \(status)"))
            }
            PipelineClock.queue.asyncAfter(deadline: .now() + timeout) { [weak task] in
                let outcome = ReceiptOutcome.failed("no answer within \(Self.seconds(timeout))")
                // Told here too, on the clock's own thread: whoever waits for the answer may not run for a while.
                if answer.resume(outcome) { onTimeout?(outcome) }
                task?.cancel()
            }
            task.resume()
        }
    }

    /// What is posted: `{"report": …, "device": …}`, within `limit` bytes (a RichPush server takes 16 KB). A
    /// report too long loses its payload problems first (their count is kept), then all but the first 16 skipped
    /// media and their messages, then the length of long URLs.
    public static func body(_ report: DeliveryReport, deviceID: String?, limit: Int = 15_000) -> [UInt8] {
        func encode(_ r: JSONValue) -> [UInt8] {
            var o: [String: JSONValue] = ["report": r]
            if let d = deviceID, !d.isEmpty { o["device"] = .string(String(d.prefix(200))) }
            return JSONValue.object(o).serialized()
        }
        guard case .object(var r) = report.json else { return encode(report.json) }
        var bytes = encode(.object(r))
        if bytes.count > limit, !report.payloadProblems.isEmpty {
            r["payload_problems"] = nil
            r["payload_problems_dropped"] = .int(Int64(report.payloadProblems.count))
            bytes = encode(.object(r))
        }
        if bytes.count > limit {
            r["skipped"] = .array(
                report.skipped.prefix(16).map {
                    ["url": .string(String($0.url.prefix(256))), "reason": .string($0.reason.code)]
                }
            )
            if report.skipped.count > 16 { r["skipped_dropped"] = .int(Int64(report.skipped.count - 16)) }
            bytes = encode(.object(r))
        }
        if bytes.count > limit {
            r["attachments"] = .array(
                report.attached.map { a in
                    guard case .object(var o) = a.json else { return a.json }
                    o["url"] = .string(String(a.sourceURL.prefix(256)))
                    o["file"] = .string(String(a.file.lastPathComponent.prefix(128)))
                    return .object(o)
                }
            )
            bytes = encode(.object(r))
        }
        return bytes
    }

    static func seconds(_ t: TimeInterval) -> String { String(format: "%.1f s", t) }
}

/// A continuation resumed once, by whichever of several callers comes first.
private final class Once<Value: Sendable>: @unchecked Sendable {
    // @unchecked: `continuation` is read and written under `lock`.
    private let lock = NSLock()
    private var continuation: CheckedContinuation<Value, Never>?

    func set(_ c: CheckedContinuation<Value, Never>) { lock.withLock { continuation = c } }

    /// True when this call resumed it (the first one).
    @discardableResult
    func resume(_ value: Value) -> Bool {
        let c = lock.withLock { () -> CheckedContinuation<Value, Never>? in
            defer { continuation = nil }
            return continuation
        }
        c?.resume(returning: value)
        return c != nil
    }
}

/// A receipt goes to the address given or nowhere.
private final class RedirectRefuser: NSObject, URLSessionTaskDelegate, @unchecked Sendable {
    // @unchecked: no state.
    func urlSession(
        _ session: URLSession,
        task: URLSessionTask,
        willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest,
        completionHandler: @escaping (URLRequest?) -> Void
    ) {
        completionHandler(nil)
    }
}
