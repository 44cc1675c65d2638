/// One platform-neutral rich notification: what to show, what to attach, and whom to send it to.
///
/// A message is written once and rendered for each provider with ``APNsRenderer`` and ``FCMRenderer``.
/// Read one from JSON with ``PushMessage/decode(_:)``, which reports every problem at once.
///
/// ```swift
/// var message = PushMessage(alert: .init(title: "Sparky says hello!"))
/// message.media = [PushMedia(url: "https://example.com/pizza.png")]
/// message.targets.topic = "industry-tech"
/// let body = try FCMRenderer(projectID: "my-project").render(message).body
/// ```
public struct PushMessage: Sendable, Hashable {
    /// Caller-chosen id; a UUID here becomes the `apns-id` header.
    public var id: String?
    public var alert: Alert
    /// Pictures, GIFs, video or audio; the first one is the thumbnail the device shows.
    public var media: [PushMedia]
    /// Data for a chart the device draws (or the server renders for platforms that cannot).
    public var chart: ChartSpec?
    public var sound: Sound?
    public var badge: Int?
    public var category: String?
    public var threadID: String?
    public var collapseID: String?
    /// The Android notification channel (Android 8 and later) the notification is shown on; FCM's
    /// `android.notification.channel_id`.
    public var androidChannelID: String?
    public var pushType: PushType
    public var priority: Priority?
    /// Seconds the provider may keep trying; 0 means one attempt only.
    public var ttl: Int?
    /// Absolute expiry, in seconds since 1970. Use either this or ``ttl``.
    public var expiration: Int64?
    public var interruptionLevel: InterruptionLevel?
    public var relevanceScore: Double?
    /// Wake the app in the background (`content-available: 1`).
    public var contentAvailable: Bool
    /// Text the device shows instead of ``alert`` once the extension has run (richer or private text).
    public var contentOverride: ContentOverride?
    /// App data delivered with the notification. APNs carries any JSON; FCM's `data` carries strings only,
    /// so other values are sent there as their JSON text.
    public var data: [String: JSONValue]
    /// Where a tap leads, as a URL.
    public var deepLink: String?
    /// A hosted PNG of ``chart`` for platforms that cannot draw it (Android, the web): the server renders and
    /// hosts it and sets this; a sender may give its own.
    public var chartImageURL: String?
    /// Where the device library posts its delivery report (what it attached, what it skipped and why): a
    /// server sets it, with a signature that admits receipts for this notification only.
    public var receiptURL: String?
    public var analyticsLabel: String?
    /// What only browsers show: an icon, a badge, buttons.
    public var web: WebOptions?
    /// Start, update or end a Live Activity instead of showing a notification (push type `liveactivity`).
    public var liveActivity: LiveActivity?
    public var targets: Targets

    /// A browser notification's icon (the site's picture beside the text), badge (a small monochrome picture,
    /// where the platform shows one) and buttons, each opening a page.
    public struct WebOptions: Sendable, Hashable {
        public var icon: String?
        public var badge: String?
        public var actions: [WebAction]

        public init(icon: String? = nil, badge: String? = nil, actions: [WebAction] = []) {
            self.icon = icon
            self.badge = badge
            self.actions = actions
        }
    }

    public struct WebAction: Sendable, Hashable {
        /// The button's id, which the service worker is told on a click.
        public var action: String
        public var title: String
        /// The https page the button opens (none: the notification's own link).
        public var navigate: String?

        public init(action: String, title: String, navigate: String? = nil) {
            self.action = action
            self.title = title
            self.navigate = navigate
        }
    }

    /// The most buttons a browser notification is given (Chrome shows two; others fewer or none).
    public static let maxWebActions = 2

    public init(
        id: String? = nil,
        alert: Alert = Alert(),
        media: [PushMedia] = [],
        chart: ChartSpec? = nil,
        sound: Sound? = nil,
        badge: Int? = nil,
        category: String? = nil,
        threadID: String? = nil,
        collapseID: String? = nil,
        pushType: PushType = .alert,
        priority: Priority? = nil,
        ttl: Int? = nil,
        expiration: Int64? = nil,
        interruptionLevel: InterruptionLevel? = nil,
        relevanceScore: Double? = nil,
        contentAvailable: Bool = false,
        contentOverride: ContentOverride? = nil,
        data: [String: JSONValue] = [:],
        deepLink: String? = nil,
        analyticsLabel: String? = nil,
        targets: Targets = Targets()
    ) {
        self.id = id
        self.alert = alert
        self.media = media
        self.chart = chart
        self.sound = sound
        self.badge = badge
        self.category = category
        self.threadID = threadID
        self.collapseID = collapseID
        self.pushType = pushType
        self.priority = priority
        self.ttl = ttl
        self.expiration = expiration
        self.interruptionLevel = interruptionLevel
        self.relevanceScore = relevanceScore
        self.contentAvailable = contentAvailable
        self.contentOverride = contentOverride
        self.data = data
        self.deepLink = deepLink
        self.analyticsLabel = analyticsLabel
        self.targets = targets
    }

    /// True when the device must run the service extension (media to fetch or a chart to draw).
    /// A live activity's chart travels in its content state, drawn by the app's widget: no extension runs.
    public var needsServiceExtension: Bool {
        liveActivity == nil && (!media.isEmpty || chart != nil || contentOverride != nil)
    }
}

extension PushMessage {
    public struct Alert: Sendable, Hashable {
        public var title: String?
        public var subtitle: String?
        public var body: String?
        public var titleLocKey: String?
        public var titleLocArgs: [String]?
        public var subtitleLocKey: String?
        public var subtitleLocArgs: [String]?
        public var locKey: String?
        public var locArgs: [String]?
        public var launchImage: String?

        public init(
            title: String? = nil,
            subtitle: String? = nil,
            body: String? = nil,
            titleLocKey: String? = nil,
            titleLocArgs: [String]? = nil,
            subtitleLocKey: String? = nil,
            subtitleLocArgs: [String]? = nil,
            locKey: String? = nil,
            locArgs: [String]? = nil,
            launchImage: String? = nil
        ) {
            self.title = title
            self.subtitle = subtitle
            self.body = body
            self.titleLocKey = titleLocKey
            self.titleLocArgs = titleLocArgs
            self.subtitleLocKey = subtitleLocKey
            self.subtitleLocArgs = subtitleLocArgs
            self.locKey = locKey
            self.locArgs = locArgs
            self.launchImage = launchImage
        }

        /// True when the device would show something.
        public var isVisible: Bool {
            title != nil || subtitle != nil || body != nil || titleLocKey != nil || locKey != nil
        }
    }

    public struct Sound: Sendable, Hashable {
        public var name: String
        public var critical: Bool
        /// 0...1, critical alerts only.
        public var volume: Double?

        public init(name: String = "default", critical: Bool = false, volume: Double? = nil) {
            self.name = name
            self.critical = critical
            self.volume = volume
        }
    }

    public struct ContentOverride: Sendable, Hashable {
        public var title: String?
        public var subtitle: String?
        public var body: String?

        public init(title: String? = nil, subtitle: String? = nil, body: String? = nil) {
            self.title = title
            self.subtitle = subtitle
            self.body = body
        }
    }

    /// Who receives the message. Several kinds may be combined: the server sends to each.
    public struct Targets: Sendable, Hashable {
        public var apnsTokens: [String]
        public var fcmTokens: [String]
        /// An FCM topic name, without `/topics/`.
        public var topic: String?
        /// An FCM condition such as `'stocks' in topics && !('news' in topics)`.
        public var condition: String?

        public init(apnsTokens: [String] = [], fcmTokens: [String] = [], topic: String? = nil, condition: String? = nil)
        {
            self.apnsTokens = apnsTokens
            self.fcmTokens = fcmTokens
            self.topic = topic
            self.condition = condition
        }

        public var isEmpty: Bool { apnsTokens.isEmpty && fcmTokens.isEmpty && topic == nil && condition == nil }
    }
}

/// One piece of media to attach.
public struct PushMedia: Sendable, Hashable {
    public var url: String
    /// What the sender says it is; the device still decides from the bytes.
    public var kind: MediaKind?
    /// The MIME type the sender says it is (a hint, like ``kind``).
    public var mimeType: String?
    public var thumbnail: Thumbnail?

    public init(url: String, kind: MediaKind? = nil, mimeType: String? = nil, thumbnail: Thumbnail? = nil) {
        self.url = url
        self.kind = kind
        self.mimeType = mimeType
        self.thumbnail = thumbnail
    }

    /// How the device shows the attachment's thumbnail.
    public struct Thumbnail: Sendable, Hashable {
        /// The part of the picture to show, in unit coordinates (0...1).
        public var crop: UnitRect?
        /// Frame index of an animated image, or seconds into a movie.
        public var time: Double?
        public var hidden: Bool?

        public init(crop: UnitRect? = nil, time: Double? = nil, hidden: Bool? = nil) {
            self.crop = crop
            self.time = time
            self.hidden = hidden
        }
    }
}

/// A rectangle in unit coordinates: (0,0) is the top-left corner, (1,1) the bottom-right.
public struct UnitRect: Sendable, Hashable {
    public var x: Double
    public var y: Double
    public var width: Double
    public var height: Double

    public init(x: Double, y: Double, width: Double, height: Double) {
        self.x = x
        self.y = y
        self.width = width
        self.height = height
    }

    public var isInsideUnitSquare: Bool {
        x >= 0 && y >= 0 && width > 0 && height > 0 && x + width <= 1.0000001 && y + height <= 1.0000001
    }
}
