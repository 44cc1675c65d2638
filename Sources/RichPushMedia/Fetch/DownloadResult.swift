import Foundation
import RichPushCore

/// A finished download: a file on disk of a decided type.
struct DownloadedFile: Sendable {
    var file: URL
    var bytes: Int
    var type: MediaType
    /// Where the type came from: `bytes`, `content-type`, `url` or `hint`.
    var typeSource: String
    var finalURL: URL
}
