import Foundation

/// What the media test server does for one path.
public enum MediaRoute: Sendable {
    /// Serves bytes with a status, a Content-Type and extra headers.
    case bytes(
        [UInt8],
        contentType: String?,
        status: Int = 200,
        headers: [(String, String)] = [],
        sendLength: Bool = true
    )
    /// Streams a file from disk in chunks (nothing held in memory).
    case file(path: String, contentType: String?)
    /// Redirects to another path or URL.
    case redirect(to: String, status: Int = 302)
    /// Sends `chunk` bytes every `interval` seconds until `total` bytes are sent.
    case drip(total: Int, chunk: Int, interval: TimeInterval, contentType: String?)
    /// Announces `declared` bytes, sends `sent` of them, then resets the connection.
    case reset(declared: Int, sent: [UInt8], contentType: String?)
}
