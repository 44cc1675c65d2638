import Foundation

/// How media is fetched on the device.
public struct FetchPolicy: Sendable {
    /// Allow plain `http:` (for the sandbox, or apps that opted out of App Transport Security).
    public var allowInsecureHTTP: Bool
    /// Redirects followed per download.
    public var maxRedirects: Int
    /// Seconds without a byte before a download is given up (the overall deadline applies too).
    public var idleTimeout: TimeInterval
    /// Downloads running at once.
    public var maxConcurrentDownloads: Int

    public init(
        allowInsecureHTTP: Bool = false,
        maxRedirects: Int = 5,
        idleTimeout: TimeInterval = 10,
        maxConcurrentDownloads: Int = 4
    ) {
        self.allowInsecureHTTP = allowInsecureHTTP
        self.maxRedirects = maxRedirects
        self.idleTimeout = idleTimeout
        self.maxConcurrentDownloads = maxConcurrentDownloads
    }
}
