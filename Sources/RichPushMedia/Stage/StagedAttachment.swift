import Foundation
import RichPushCore

/// A file ready to become a `UNNotificationAttachment`: on disk, with the right extension and type hint.
public struct StagedAttachment: Sendable, Hashable {
    public var identifier: String
    public var file: URL
    public var type: MediaType
    public var bytes: Int
    /// The URL the payload named, as written, or `chart:` for a chart drawn on the device.
    public var sourceURL: String
    /// The URL fetched (``MediaURL/fetched``), when it differs from `sourceURL`.
    public var fetchedURL: String?
    /// Where the type was decided from: `bytes`, `content-type`, `url`, `hint`, or `rendered`.
    public var typeSource: String
    public var thumbnail: PushMedia.Thumbnail?
    /// Milliseconds from the start of processing until the file was staged.
    public var stagedAfterMilliseconds: Int

    public var uti: String { type.uti }
    public var kind: MediaKind? { type.kind }

    public var json: JSONValue {
        var o: [String: JSONValue] = [
            "id": .string(identifier), "file": .string(file.path), "uti": .string(uti),
            "kind": .string(kind?.rawValue ?? "other"),
            "bytes": .int(Int64(bytes)), "url": .string(sourceURL), "type_source": .string(typeSource),
            "ms": .int(Int64(stagedAfterMilliseconds)),
        ]
        if let f = fetchedURL { o["fetched"] = .string(f) }
        if let t = thumbnail {
            var to: [String: JSONValue] = [:]
            if let c = t.crop { to["crop"] = [.double(c.x), .double(c.y), .double(c.width), .double(c.height)] }
            if let time = t.time { to["time"] = .double(time) }
            if let h = t.hidden { to["hidden"] = .bool(h) }
            o["thumbnail"] = .object(to)
        }
        return .object(o)
    }
}

/// Media that was not attached, and why.
public struct SkippedMedia: Sendable, Hashable {
    /// The URL as the payload wrote it.
    public var url: String
    /// The URL fetched, when it differs from `url`.
    public var fetched: String?
    public var reason: SkipReason

    public init(url: String, fetched: String? = nil, reason: SkipReason) {
        self.url = url
        self.fetched = fetched
        self.reason = reason
    }

    public var json: JSONValue {
        var o: [String: JSONValue] = [
            "url": .string(url), "reason": .string(reason.code), "message": .string(reason.description),
        ]
        if let f = fetched { o["fetched"] = .string(f) }
        return .object(o)
    }
}
