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

/// Posts a delivery report: `POST <receipt address>` with `{"report": …, "device": …}`, bounded by a timeout, no
/// cookies, no redirects followed.
public enum ReceiptPoster {
    public static func post(_ report: DeliveryReport, to address: String, policy: ReceiptPolicy, allowInsecureHTTP: Bool, timeout: TimeInterval) async -> ReceiptOutcome {
        guard let url = URL(string: address), let scheme = url.scheme?.lowercased(), url.host != nil else { return .notSent("the receipt address is not a URL") }
        guard scheme == "https" || (scheme == "http" && allowInsecureHTTP) else { return .notSent("the receipt address is not https") }
        guard timeout > 0.05 else { return .notSent("no time left before the deadline") }
        var body: [String: JSONValue] = ["report": report.json]
        if let d = policy.deviceID, !d.isEmpty { body["device"] = .string(d) }
        var request = URLRequest(url: url, cachePolicy: .reloadIgnoringLocalCacheData, timeoutInterval: timeout)
        request.httpMethod = "POST"
        request.httpBody = Data(JSONValue.object(body).serialized())
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpShouldHandleCookies = false
        let config = URLSessionConfiguration.ephemeral
        // The session's own timeouts are whole seconds on some platforms; the timer below keeps the exact one.
        config.timeoutIntervalForRequest = timeout.rounded(.up)
        config.timeoutIntervalForResource = timeout.rounded(.up)
        let session = URLSession(configuration: config, delegate: RedirectRefuser(), delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let timedOut = Flag()
        return await withCheckedContinuation { (continuation: CheckedContinuation<ReceiptOutcome, Never>) in
            let task = session.dataTask(with: request) { _, response, error in
                if let error {
                    return continuation.resume(returning: .failed(timedOut.value ? "no answer within \(Self.seconds(timeout))" : error.localizedDescription))
                }
                let status = (response as? HTTPURLResponse)?.statusCode ?? 0
                continuation.resume(returning: (200..<300).contains(status) ? .posted(status: status) : .failed("HTTP \(status)"))
            }
            DispatchQueue.global().asyncAfter(deadline: .now() + timeout) { [weak task] in
                guard let task, task.state == .running || task.state == .suspended else { return }
                timedOut.value = true
                task.cancel()
            }
            task.resume()
        }
    }

    static func seconds(_ t: TimeInterval) -> String { String(format: "%.1f s", t) }
}

/// A flag set on one thread and read on another.
private final class Flag: @unchecked Sendable {
    // @unchecked: `stored` is read and written under `lock`.
    private let lock = NSLock()
    private var stored = false
    var value: Bool {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}

/// A receipt goes to the address given or nowhere.
private final class RedirectRefuser: NSObject, URLSessionTaskDelegate, @unchecked Sendable {
    // @unchecked: no state.
    func urlSession(_ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse, newRequest request: URLRequest, completionHandler: @escaping (URLRequest?) -> Void) {
        completionHandler(nil)
    }
}
