/// Whose keys a piece of received media came from.
public enum PayloadSource: String, Sendable, Hashable, CaseIterable {
    case richpush, fcm, braze, onesignal, airship, clevertap, iterable, customerio, klaviyo, pushwoosh
}

/// One piece of media found in a received payload.
public struct ReceivedMedia: Sendable, Hashable {
    /// The URL as the payload wrote it.
    public var url: String
    /// The URL that is fetched (``MediaURL/fetched``): the same as `url` unless the scheme or host was written in
    /// capitals, with a default port, an international name…
    public var fetched: String
    public var kindHint: MediaKind?
    /// A type the payload names: a MIME type or a file extension (`jpg`, `image/gif`).
    public var typeHint: String?
    public var thumbnail: PushMedia.Thumbnail?
    public var source: PayloadSource

    public init(
        url: String,
        kindHint: MediaKind? = nil,
        typeHint: String? = nil,
        thumbnail: PushMedia.Thumbnail? = nil,
        source: PayloadSource,
        fetched: String? = nil
    ) {
        self.url = url
        self.fetched = fetched ?? url
        self.kindHint = kindHint
        self.typeHint = typeHint
        self.thumbnail = thumbnail
        self.source = source
    }

    /// The type the payload's hint names, if it names one RichPush knows.
    public var hintedType: MediaType? {
        guard let hint = typeHint else { return nil }
        return MediaType(mimeType: hint)
            ?? MediaType(fileExtension: hint.hasPrefix(".") ? String(hint.dropFirst()) : hint)
    }
}

/// A value in the payload that could not be used, and why. Never fatal: the rest is still read.
public struct PayloadProblem: Sendable, Hashable, CustomStringConvertible {
    /// Where, as a key path such as `ab.att.url`.
    public var path: String
    /// A stable code: `type`, `empty`, a media URL's rule (``MediaURL/Problem/Rule``: `url`, `url-scheme`,
    /// `url-user-info`…), `bad-crop`, `bad-chart`, `newer-version`.
    public var code: String
    public var message: String

    public var description: String { "\(path): \(message) [\(code)]" }

    public init(path: String, code: String, message: String) {
        self.path = path
        self.code = code
        self.message = message
    }
}

/// What a received notification asks the device to show, whichever provider sent it.
public struct ReceivedRichContent: Sendable, Hashable {
    /// Media in the order to attach; the first is the one whose thumbnail the system shows.
    public var media: [ReceivedMedia] = []
    public var chart: ChartSpec?
    public var contentOverride: PushMessage.ContentOverride?
    public var deepLink: String?
    /// The sender's notification id, for delivery receipts.
    public var notificationID: String?
    /// Where to post the delivery report (`rp.r`, set by the server).
    public var receiptURL: String?
    /// Providers whose keys were present.
    public var sources: [PayloadSource] = []
    public var problems: [PayloadProblem] = []

    public init() {}

    public var isEmpty: Bool { media.isEmpty && chart == nil && contentOverride == nil }
}
