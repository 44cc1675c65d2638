import Foundation
import RichPushCore

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Downloads media straight to disk with URLSession, never holding a file in memory.
///
/// Every download checks the HTTP status, follows a bounded number of redirects (each one checked for
/// scheme and loops), decides the type from the first bytes as soon as they arrive, and stops the moment
/// the file passes the limit for its kind, with or without a Content-Length.
final class MediaDownloader: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    // @unchecked: `tasks` is only touched under `lock`; each TaskState is only touched on the session's
    // serial delegate queue after it has been registered.
    private let lock = NSLock()
    private var tasks: [Int: TaskState] = [:]
    private var session: URLSession!
    let policy: FetchPolicy

    init(policy: FetchPolicy) {
        self.policy = policy
        super.init()
        let config = URLSessionConfiguration.ephemeral
        config.timeoutIntervalForRequest = policy.idleTimeout
        config.httpMaximumConnectionsPerHost = max(1, policy.maxConcurrentDownloads)
        config.requestCachePolicy = .reloadIgnoringLocalCacheData
        config.urlCache = nil
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        session = URLSession(configuration: config, delegate: self, delegateQueue: queue)
    }

    func invalidate() { session.invalidateAndCancel() }

    /// Downloads `url` into `destination` (a path without extension); the hint is the payload's type hint.
    func download(
        _ url: URL,
        to destination: URL,
        hint: MediaType?,
        kindHint: MediaKind?
    ) async -> Result<DownloadedFile, SkipReason> {
        let state = TaskState(
            url: url,
            destination: destination,
            hint: hint,
            kindHint: kindHint,
            maxRedirects: policy.maxRedirects,
            allowHTTP: policy.allowInsecureHTTP
        )
        var request = URLRequest(url: url)
        request.timeoutInterval = policy.idleTimeout
        request.setValue("image/*, audio/*, video/*;q=0.9, */*;q=0.5", forHTTPHeaderField: "Accept")
        let task = session.dataTask(with: request)
        return await withTaskCancellationHandler {
            await withCheckedContinuation {
                (continuation: CheckedContinuation<Result<DownloadedFile, SkipReason>, Never>) in
                state.continuation = continuation
                lock.withLock { tasks[task.taskIdentifier] = state }
                if Task.isCancelled {
                    state.fail(.deadline)
                }
                task.resume()
            }
        } onCancel: {
            lock.withLock { tasks[task.taskIdentifier]?.cancelledByDeadline = true }
            task.cancel()
        }
    }

    private func state(_ task: URLSessionTask) -> TaskState? { lock.withLock { tasks[task.taskIdentifier] } }

    // MARK: URLSession delegate (serial queue)

    func urlSession(
        _ session: URLSession,
        task: URLSessionTask,
        willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest,
        completionHandler: @escaping (URLRequest?) -> Void
    ) {
        guard let s = state(task) else { return completionHandler(nil) }
        s.redirects += 1
        // The next URL is read as the first was (a Location in capitals or with a default port is followed in its
        // normalized form); a loop is found whatever the spelling.
        let scheme = request.url?.scheme?.lowercased()
        let next = request.url.flatMap { try? MediaURL($0.absoluteString) }
        if s.redirects > s.maxRedirects {
            s.fail(.tooManyRedirects(s.maxRedirects))
        } else if let scheme, scheme != "http" && scheme != "https" {
            s.fail(.unsupportedScheme(String(scheme.prefix(32))))
        } else if scheme == "http", !s.allowHTTP {
            s.fail(.insecureRedirect)
        } else if let next {
            if s.visited.insert(next.comparisonKey).inserted {
                var followed = request
                followed.url = next.url
                return completionHandler(followed)
            }
            s.fail(.redirectLoop)
        } else {
            s.fail(.badURL)
        }
        completionHandler(nil)
        task.cancel()
    }

    func urlSession(
        _ session: URLSession,
        dataTask: URLSessionDataTask,
        didReceive response: URLResponse,
        completionHandler: @escaping (URLSession.ResponseDisposition) -> Void
    ) {
        guard let s = state(dataTask), s.failure == nil else { return completionHandler(.cancel) }
        if let http = response as? HTTPURLResponse {
            guard (200..<300).contains(http.statusCode) else {
                s.fail(.httpStatus(http.statusCode))
                return completionHandler(.cancel)
            }
            s.contentType = http.value(forHTTPHeaderField: "Content-Type")
            s.contentEncoding = http.value(forHTTPHeaderField: "Content-Encoding")
        }
        s.finalURL = response.url ?? s.url
        // With a Content-Encoding, Content-Length counts the encoded bytes while the delegate is handed decoded
        // ones: neither the completeness check nor the early size refusal can use it. The running cap below
        // holds on the decoded bytes either way, and a truncated gzip or deflate stream fails its own check.
        let length = response.expectedContentLength
        s.expectedLength = length >= 0 && s.isIdentityEncoded ? Int(length) : nil
        if let length = s.expectedLength, length > MediaRules.largestAppleLimit {
            s.fail(.tooLarge(kind: nil, bytes: length, limit: MediaRules.largestAppleLimit))
            return completionHandler(.cancel)
        }
        do {
            _ = FileManager.default.createFile(atPath: s.destination.path, contents: nil)
            s.handle = try FileHandle(forWritingTo: s.destination)
        } catch {
            s.fail(.stagingFailed(error.localizedDescription))
            return completionHandler(.cancel)
        }
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        guard let s = state(dataTask), s.failure == nil else { return }
        if s.sniffed == nil {
            s.prefix.append(data.prefix(MediaSniffer.preferredPrefixLength - s.prefix.count))
            if s.prefix.count >= MediaSniffer.preferredPrefixLength, let reason = s.decideFromPrefix() {
                s.fail(reason)
                dataTask.cancel()
                return
            }
        }
        s.bytes += data.count
        if s.bytes > s.cap {
            s.fail(.tooLarge(kind: s.sniffed?.kind, bytes: s.bytes, limit: s.cap))
            dataTask.cancel()
            return
        }
        do { try s.handle?.write(contentsOf: data) } catch {
            s.fail(.stagingFailed(error.localizedDescription))
            dataTask.cancel()
        }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: Error?) {
        guard let s = state(task) else { return }
        lock.withLock { _ = tasks.removeValue(forKey: task.taskIdentifier) }
        try? s.handle?.close()
        s.handle = nil
        if s.failure == nil {
            if let error = error as? URLError {
                switch error.code {
                case .cancelled: s.fail(s.cancelledByDeadline ? .deadline : .network("cancelled"))
                case .timedOut: s.fail(.timedOut)
                case .httpTooManyRedirects: s.fail(.tooManyRedirects(s.maxRedirects))
                default: s.fail(.network(error.localizedDescription))
                }
            } else if let error {
                s.fail(.network(error.localizedDescription))
            } else if s.bytes == 0 {
                s.fail(.emptyBody)
            } else if s.sniffed == nil, let reason = s.decideFromPrefix() {
                s.fail(reason)
            } else if let length = s.expectedLength, s.bytes < length {
                s.fail(.network("the connection closed after \(s.bytes) of \(length) bytes"))
            }
        }
        if s.failure != nil { try? FileManager.default.removeItem(at: s.destination) }
        s.finish()
    }
}

/// The state of one download, touched only on the delegate queue.
final class TaskState: @unchecked Sendable {
    let url: URL
    let destination: URL
    let hint: MediaType?
    let kindHint: MediaKind?
    let maxRedirects: Int
    let allowHTTP: Bool
    var continuation: CheckedContinuation<Result<DownloadedFile, SkipReason>, Never>?
    var cancelledByDeadline = false
    var redirects = 0
    var visited: Set<String>
    var finalURL: URL
    var contentType: String?
    var contentEncoding: String?
    /// The length the server announced for the body as it arrives here (identity encoding only).
    var expectedLength: Int?
    var handle: FileHandle?
    var prefix = Data()
    var bytes = 0
    var sniffed: MediaType?
    var typeSource = "bytes"
    /// Before the type is known, the largest limit of any kind.
    var cap = MediaRules.largestAppleLimit
    var failure: SkipReason?

    init(url: URL, destination: URL, hint: MediaType?, kindHint: MediaKind?, maxRedirects: Int, allowHTTP: Bool) {
        self.url = url
        self.destination = destination
        self.hint = hint
        self.kindHint = kindHint
        self.maxRedirects = maxRedirects
        self.allowHTTP = allowHTTP
        visited = [(try? MediaURL(url.absoluteString))?.comparisonKey ?? url.absoluteString]
        finalURL = url
    }

    func fail(_ reason: SkipReason) { if failure == nil { failure = reason } }

    /// True when the body arrives as sent: no Content-Encoding, or `identity`.
    var isIdentityEncoded: Bool {
        guard let e = contentEncoding?.trimmingCharacters(in: .whitespaces).lowercased(), !e.isEmpty else {
            return true
        }
        return e == "identity"
    }

    /// Decides the type: the bytes first, then Content-Type, the URL's extension, the payload's hint.
    /// Returns a reason to stop when the type is one Apple will not attach or the file is already too large.
    func decideFromPrefix() -> SkipReason? {
        var type = MediaSniffer.sniff(prefix)
        typeSource = "bytes"
        if type == nil {
            let fallbacks: [(MediaType?, String)] = [
                (contentType.flatMap(MediaType.init(mimeType:)), "content-type"),
                (MediaType(urlString: finalURL.absoluteString), "url"),
                (MediaType(urlString: url.absoluteString), "url"), (hint, "hint"),
            ]
            // Unrecognised bytes: a label is only believed for a type Apple attaches whose files need not start
            // with a signature (an EXIF JPEG always does, so "photo.jpg" full of junk stays unknown).
            if let found = fallbacks.first(where: {
                $0.0.map { $0.isAppleAttachable && !$0.hasMandatorySignature } ?? false
            }) {
                type = found.0
                typeSource = found.1
            }
        }
        guard let type else { return .unknownType }
        sniffed = type
        switch MediaRules.appleDecision(type: type, size: max(bytes, expectedLength ?? 0)) {
        case .refused(.unsupportedType(let t)): return .unsupportedType(t)
        case .refused(.tooLarge(let kind, let size, let limit)): return .tooLarge(kind: kind, bytes: size, limit: limit)
        case .refused(.unknownType): return .unknownType
        case .accepted:
            cap = type.kind.map(MediaRules.appleLimit(for:)) ?? cap
            return nil
        }
    }

    func finish() {
        guard let c = continuation else { return }
        continuation = nil
        if let failure {
            c.resume(returning: .failure(failure))
        } else if let sniffed {
            c.resume(
                returning: .success(
                    DownloadedFile(
                        file: destination,
                        bytes: bytes,
                        type: sniffed,
                        typeSource: typeSource,
                        finalURL: finalURL
                    )
                )
            )
        } else {
            c.resume(returning: .failure(.unknownType))
        }
    }
}
