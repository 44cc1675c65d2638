import Foundation

/// Checks a ``PushMessage`` against APNs', FCM's and Apple's attachment rules and reports every problem.
///
/// ```swift
/// let report = MessageValidator().validate(message)
/// for issue in report.issues { print(issue) }   // error: media[0].url: must use https [https-required]
/// ```
public struct MessageValidator: Sendable {
    public struct Options: Sendable {
        /// Allow `http:` media URLs (the sandbox, or apps that opted out of App Transport Security).
        public var allowInsecureMedia: Bool
        /// Require at least one target (off when the server supplies targets from its registry).
        public var requireTargets: Bool
        /// Require APNs tokens to be exactly 64 hex characters (today's length); Apple says not to assume it.
        public var strictAPNsTokenLength: Bool
        /// The time an absolute `expiration` is compared with.
        public var now: @Sendable () -> Date
        /// Check the rendered payloads against the providers' size limits (a server that changes the message
        /// after validating it checks the final one with ``sizeIssues(_:apns:fcm:)`` instead).
        public var checksSizes = true

        public init(
            allowInsecureMedia: Bool = false,
            requireTargets: Bool = true,
            strictAPNsTokenLength: Bool = false,
            now: @escaping @Sendable () -> Date = { Date() }
        ) {
            self.allowInsecureMedia = allowInsecureMedia
            self.requireTargets = requireTargets
            self.strictAPNsTokenLength = strictAPNsTokenLength
            self.now = now
        }
    }

    public var options: Options

    public init(options: Options = Options()) { self.options = options }

    /// FCM's longest TTL, 28 days; APNs keeps notifications for up to 30, so the shorter one rules.
    public static let maxTTL = 2_419_200
    public static let maxMediaCount = 8
    /// Keys of the payload root that APNs, FCM or RichPush own.
    public static let reservedDataKeys: Set<String> = [
        "aps", RichPushKey.name, "from", "message_type", "collapse_key", "notification",
    ]

    /// Reads JSON and validates it: shape problems and rule problems come back in one report.
    public func validate(json: JSONValue) -> ValidationReport {
        let (message, report) = PushMessage.read(json)
        var all = report
        all.merge(validate(message))
        return all
    }

    public func validate(_ m: PushMessage) -> ValidationReport {
        var r = ValidationReport()
        checkAlertAndType(m, &r)
        checkValues(m, &r)
        checkLinks(m, &r)
        checkDelivery(m, &r)
        checkTargets(m.targets, &r)
        checkData(m, &r)
        checkMedia(m, &r)
        if let chart = m.chart { r.merge(chart.validate(at: "chart")) }
        if let live = m.liveActivity {
            r.merge(live.issues(in: m, now: Int64(options.now().timeIntervalSince1970)))
        } else if m.pushType == .liveactivity {
            r.add(
                "live_activity",
                "required",
                "push type 'liveactivity' needs a live_activity object: its event, content_state and timestamp"
            )
        }
        if options.checksSizes { checkSizes(m, &r) }
        return r
    }

    private func checkAlertAndType(_ m: PushMessage, _ r: inout ValidationReport) {
        let visible = m.alert.isVisible
        if m.needsServiceExtension && !visible {
            r.add(
                "alert",
                "media-needs-alert",
                "media, a chart or a content override need a title or body: the service extension only runs for notifications that show an alert"
            )
        }
        if m.needsServiceExtension && m.pushType != .alert {
            r.add(
                "push_type",
                "media-needs-alert-push",
                "media and charts are only processed for push type 'alert', not '\(m.pushType.rawValue)'"
            )
        }
        if m.pushType == .background {
            if let p = m.priority, p != .normal {
                r.add(
                    "priority",
                    "background-priority",
                    "background pushes must be sent with priority normal (5); APNs refuses \(p.apnsValue)"
                )
            }
            if visible || m.sound != nil || m.badge != nil {
                r.add(
                    "push_type",
                    "background-content",
                    "a background push may only carry content_available and data: remove the alert, sound and badge, or use push type 'alert'"
                )
            }
        }
        if m.priority == .high && !visible && m.sound == nil && m.badge == nil && m.pushType == .alert {
            r.add(
                "priority",
                "high-priority-needs-alert",
                "priority high needs an alert, a sound or a badge; a silent push must use priority normal"
            )
        }
        if !visible && m.sound == nil && m.badge == nil && !m.contentAvailable && m.pushType == .alert {
            r.add(
                "alert",
                "empty-notification",
                "the notification has nothing to show: add a title or body (or a sound, a badge, or content_available)"
            )
        }
    }

    /// The alert's localization, the badge, the sound, the relevance score and the id.
    private func checkValues(_ m: PushMessage, _ r: inout ValidationReport) {
        let a = m.alert
        if a.titleLocArgs != nil && a.titleLocKey == nil {
            r.add("alert.title_loc_args", "loc-args-need-key", "title_loc_args need title_loc_key")
        }
        if a.subtitleLocArgs != nil && a.subtitleLocKey == nil {
            r.add("alert.subtitle_loc_args", "loc-args-need-key", "subtitle_loc_args need subtitle_loc_key")
        }
        if a.locArgs != nil && a.locKey == nil { r.add("alert.loc_args", "loc-args-need-key", "loc_args need loc_key") }
        // FCM carries the badge as notification_count, a 32-bit integer.
        if let b = m.badge, !(0...Self.maxBadge).contains(b) {
            r.add("badge", "range", "badge must be 0...\(Self.maxBadge) (0 clears it)")
        }
        if let s = m.sound {
            if s.name.isEmpty { r.add("sound.name", "empty", "sound name must not be empty") }
            if let v = s.volume, !(0...1).contains(v) {
                r.add("sound.volume", "range", "volume must be between 0 and 1")
            }
        }
        if let score = m.relevanceScore, m.pushType != .liveactivity, !(0...1).contains(score) {
            r.add("relevance_score", "range", "relevance_score must be between 0 and 1")
        }
        if let id = m.id, UUID(uuidString: id) == nil {
            r.add(
                "id",
                "not-a-uuid",
                "id is not a UUID, so it is not sent as apns-id and APNs assigns its own",
                .warning
            )
        }
    }

    /// The URLs a message carries (https, or http where insecure media is allowed), the browser's options and the
    /// analytics label.
    private func checkLinks(_ m: PushMessage, _ r: inout ValidationReport) {
        if let chartURL = m.chartImageURL {
            let scheme = URL(string: chartURL)?.scheme?.lowercased()
            if scheme != "https" && !(scheme == "http" && options.allowInsecureMedia) {
                r.add("chart_image_url", "https-required", "chart_image_url must be an https URL")
            }
        }
        if let receipt = m.receiptURL {
            let url = URL(string: receipt)
            let scheme = url?.scheme?.lowercased()
            if url?.host == nil || !(scheme == "https" || (scheme == "http" && options.allowInsecureMedia)) {
                r.add("receipt_url", "https-required", "receipt_url must be an https URL")
            }
        }
        if let link = m.deepLink {
            if URL(string: link)?.scheme == nil {
                r.add(
                    "deep_link",
                    "url",
                    "deep_link must be a URL with a scheme, such as myapp://orders/42 or https://…"
                )
            }
        }
        if let web = m.web { checkWeb(web, &r) }
        if let label = m.analyticsLabel, !Self.isValidAnalyticsLabel(label) {
            r.add(
                "analytics_label",
                "analytics-label",
                "analytics_label must be 1 to 50 characters of letters, digits and - _ . ~ %"
            )
        }
    }

    /// What only browsers show: https icons and links, at most two buttons with ids of their own.
    private func checkWeb(_ web: PushMessage.WebOptions, _ r: inout ValidationReport) {
        func https(_ url: String?, _ path: String) {
            guard let url else { return }
            let u = URL(string: url)
            let scheme = u?.scheme?.lowercased()
            if u?.host == nil || !(scheme == "https" || (scheme == "http" && options.allowInsecureMedia)) {
                r.add(path, "https-required", "\(path) must be an https URL")
            }
        }
        https(web.icon, "web.icon")
        https(web.badge, "web.badge")
        if web.actions.count > PushMessage.maxWebActions {
            r.add("web.actions", "max-items", "at most \(PushMessage.maxWebActions) buttons: browsers show no more")
        }
        var ids = Set<String>()
        for (i, a) in web.actions.enumerated() {
            let path = "web.actions[\(i)]"
            if a.action.isEmpty || a.action.utf8.count > 64
                || !a.action.utf8.allSatisfy({
                    ($0 >= 48 && $0 <= 57) || ($0 >= 65 && $0 <= 90) || ($0 >= 97 && $0 <= 122) || $0 == 45
                        || $0 == 95
                })
            {
                r.add("\(path).action", "action-id", "a button's action is 1 to 64 of letters, digits, - and _")
            }
            if !ids.insert(a.action).inserted {
                r.add("\(path).action", "duplicate", "'\(a.action)' names another button too")
            }
            if a.title.isEmpty || a.title.count > 64 {
                r.add("\(path).title", "length", "a button's title is 1 to 64 characters")
            }
            https(a.navigate, "\(path).navigate")
        }
    }

    private func checkDelivery(_ m: PushMessage, _ r: inout ValidationReport) {
        if m.ttl != nil && m.expiration != nil { r.add("ttl", "exclusive", "give either ttl or expiration, not both") }
        if let ttl = m.ttl, !(0...Self.maxTTL).contains(ttl) {
            r.add("ttl", "range", "ttl must be 0...\(Self.maxTTL) seconds (28 days)")
        }
        if let e = m.expiration {
            let now = Int64(options.now().timeIntervalSince1970)
            if e != 0 && e < now { r.add("expiration", "in-past", "expiration \(e) is in the past") }
            if e > now + Int64(Self.maxTTL) { r.add("expiration", "range", "expiration is more than 28 days away") }
        }
        if let c = m.collapseID, c.utf8.count > 64 {
            r.add("collapse_id", "max-bytes", "collapse_id is \(c.utf8.count) bytes; APNs allows 64")
        }
    }

    private func checkTargets(_ t: PushMessage.Targets, _ r: inout ValidationReport) {
        if options.requireTargets && t.isEmpty {
            r.add("targets", "required", "give at least one of apns_tokens, fcm_tokens, topic or condition")
        }
        if t.topic != nil && t.condition != nil {
            r.add(
                "targets",
                "exclusive",
                "give either a topic or a condition, not both (write the topic into the condition)"
            )
        }
        var seen = Set<String>()
        for (i, token) in t.apnsTokens.enumerated() {
            let path = "targets.apns_tokens[\(i)]"
            if let problem = Self.apnsTokenProblem(token, strict: options.strictAPNsTokenLength) {
                r.add(path, "apns-token", problem)
            } else if !seen.insert(token.lowercased()).inserted {
                r.add(path, "duplicate", "this token is listed twice; it will be sent once", .warning)
            }
        }
        seen.removeAll()
        for (i, token) in t.fcmTokens.enumerated() {
            let path = "targets.fcm_tokens[\(i)]"
            if let problem = Self.fcmTokenProblem(token) {
                r.add(path, "fcm-token", problem)
            } else if !seen.insert(token).inserted {
                r.add(path, "duplicate", "this token is listed twice; it will be sent once", .warning)
            }
        }
        if let topic = t.topic, let p = Self.fcmTopicProblem(topic) { r.add("targets.topic", p.rule, p.message) }
        if let c = t.condition, let p = Self.fcmConditionProblem(c) { r.add("targets.condition", p.rule, p.message) }
    }

    private func checkData(_ m: PushMessage, _ r: inout ValidationReport) {
        for key in m.data.keys.sorted() {
            let lower = key.lowercased()
            if Self.reservedDataKeys.contains(key) || lower.hasPrefix("google.") || lower.hasPrefix("gcm.")
                || lower == "google" || lower == "gcm"
            {
                r.add("data.\(key)", "reserved-key", "'\(key)' is reserved by APNs, FCM or RichPush")
            }
            if key.isEmpty { r.add("data", "empty-key", "data keys must not be empty") }
        }
    }

    private func checkMedia(_ m: PushMessage, _ r: inout ValidationReport) {
        if m.media.count > Self.maxMediaCount {
            r.add("media", "max-media", "at most \(Self.maxMediaCount) media per notification")
        }
        for (i, media) in m.media.enumerated() {
            let path = "media[\(i)]"
            let url: MediaURL
            switch read(media.url) {
            case .failure(let problem):
                r.add("\(path).url", problem.rule, problem.message)
                continue
            case .success(let u): url = u
            }
            let byURL = MediaType(urlString: url.fetched)
            let byHint = media.mimeType.flatMap(MediaType.init(mimeType:))
            if let hint = media.mimeType, byHint == nil {
                r.add("\(path).type", "unknown-type", "'\(hint)' is not a media type RichPush knows", .warning)
            }
            if let type = byURL ?? byHint {
                if !type.isAppleAttachable {
                    r.add(
                        "\(path).url",
                        "apple-unsupported-type",
                        "\(type.displayName) cannot be attached on Apple devices; use JPEG, PNG, GIF, MP3, M4A, WAV, AIFF, MP4, MPEG or AVI"
                    )
                } else if let kind = media.kind, type.kind != kind {
                    r.add(
                        "\(path).kind",
                        "kind-mismatch",
                        "kind says \(kind.rawValue) but the URL names a \(type.displayName)",
                        .warning
                    )
                }
            } else if media.kind == nil {
                r.add(
                    "\(path).url",
                    "no-file-type",
                    "the URL has no file extension and no type is given: RichPush's device library decides from the bytes, but other extensions and FCM's helper drop such attachments; add an extension or a type",
                    .warning
                )
            }
            if let t = media.thumbnail {
                if let c = t.crop, !c.isInsideUnitSquare {
                    r.add(
                        "\(path).thumbnail.crop",
                        "unit-rect",
                        "crop is in unit coordinates: x, y ≥ 0, width, height > 0, x + width ≤ 1, y + height ≤ 1"
                    )
                }
                if let time = t.time, !(time >= 0 && time.isFinite) {
                    r.add("\(path).thumbnail.time", "range", "time must be 0 or more")
                }
            }
        }
    }

    /// A media URL read once (its type is then judged from the same reading), or its problem: a rule of
    /// ``MediaURL`` (the device and the preflight read it the same way), or plain http where it is not allowed.
    private func read(_ s: String) -> Result<MediaURL, URLProblem> {
        let url: MediaURL
        do { url = try MediaURL(s) } catch {
            return .failure(URLProblem(rule: error.code, message: "'\(s.prefix(80))': \(error.message)"))
        }
        if url.scheme == "https" || options.allowInsecureMedia { return .success(url) }
        return .failure(
            URLProblem(rule: "https-required", message: "must use https (iOS App Transport Security blocks plain http)")
        )
    }

    private struct URLProblem: Error {
        var rule: String
        var message: String
    }

    /// The size limits the message breaks: its APNs payload (when `apns`) and its FCM message to that kind of
    /// target (when `fcm` is given; a topic or condition message is held to 2,048 bytes, a token's to 4,096).
    public static func sizeIssues(
        _ m: PushMessage,
        apns: Bool,
        fcm: FCMTarget?,
        now: @escaping @Sendable () -> Date = { Date() }
    ) -> [ValidationIssue] {
        var r = ValidationReport()
        if apns {
            let size = APNsRenderer.payload(for: m).serializedSize
            if size > m.pushType.payloadLimit {
                r.add(
                    "",
                    "payload-too-large",
                    "the APNs payload is \(size) bytes; the limit for push type \(m.pushType.rawValue) is \(m.pushType.payloadLimit)"
                )
            }
        }
        if let target = fcm {
            let size = FCMRenderer(projectID: "p", now: now).render(m, to: target).payloadSize
            if size > target.payloadLimit {
                let what = target.payloadLimit == 2048 ? "messages to topics" : "messages to tokens"
                r.add(
                    "",
                    "payload-too-large",
                    "the FCM message is \(size) bytes; FCM allows \(target.payloadLimit) for \(what)"
                )
            }
        }
        return r.issues
    }

    private func checkSizes(_ m: PushMessage, _ r: inout ValidationReport) {
        let targets: [FCMTarget] =
            (m.targets.topic.map { [.topic($0)] } ?? []) + (m.targets.condition.map { [.condition($0)] } ?? [])
            + (m.targets.fcmTokens.isEmpty ? [] : [.token("t")])
        var issues = Self.sizeIssues(m, apns: true, fcm: nil, now: options.now)
        for target in targets { issues += Self.sizeIssues(m, apns: false, fcm: target, now: options.now) }
        for i in issues { r.add(i.path, i.rule, i.message, i.severity) }
    }

    // MARK: - Shapes

    /// What is wrong with an FCM topic name (`/topics/` allowed in front), as a rule and a message.
    public static let maxBadge = Int(Int32.max)

    public static func fcmTopicProblem(_ topic: String) -> (rule: String, message: String)? {
        let name = topic.hasPrefix("/topics/") ? String(topic.dropFirst(8)) : topic
        return isValidTopicName(name) ? nil : ("topic-name", "topic names use only letters, digits and - _ . ~ %")
    }

    /// What is wrong with an FCM condition, as a rule and a message.
    public static func fcmConditionProblem(_ condition: String) -> (rule: String, message: String)? {
        do {
            let parsed = try FCMCondition.parse(condition)
            if parsed.topics.count > FCMCondition.maxTopics {
                return (
                    "condition-topics",
                    "the condition names \(parsed.topics.count) topics; FCM allows \(FCMCondition.maxTopics)"
                )
            }
            return nil
        } catch {
            return ("condition-syntax", "\(error)")
        }
    }

    public static func apnsTokenProblem(_ token: String, strict: Bool = false) -> String? {
        if token.isEmpty { return "APNs token is empty" }
        if !token.utf8.allSatisfy({ ($0 >= 48 && $0 <= 57) || ($0 >= 65 && $0 <= 70) || ($0 >= 97 && $0 <= 102) }) {
            return "APNs tokens are hexadecimal (0-9, a-f); this one is not"
        }
        if token.utf8.count % 2 != 0 { return "APNs tokens are whole bytes in hex, so an even number of characters" }
        if strict && token.utf8.count != 64 {
            return "APNs tokens are 64 hex characters; this one has \(token.utf8.count)"
        }
        if token.utf8.count < 16 || token.utf8.count > 400 {
            return "APNs token length \(token.utf8.count) is implausible"
        }
        return nil
    }

    public static func fcmTokenProblem(_ token: String) -> String? {
        if token.isEmpty { return "FCM token is empty" }
        if token.utf8.count > 4096 { return "FCM token is longer than 4096 characters" }
        let allowed = token.utf8.allSatisfy { b in
            (b >= 48 && b <= 57) || (b >= 65 && b <= 90) || (b >= 97 && b <= 122) || b == 45 || b == 95 || b == 58
                || b == 46
        }
        if !allowed { return "FCM tokens contain only letters, digits and - _ : ." }
        // Where a token, a topic and a condition are kept in one place, these prefixes name the latter two.
        if token.hasPrefix("topic:") || token.hasPrefix("condition:") {
            return "FCM tokens do not begin with topic: or condition:"
        }
        return nil
    }

    public static func isValidTopicName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= 900
            && name.utf8.allSatisfy { b in
                (b >= 48 && b <= 57) || (b >= 65 && b <= 90) || (b >= 97 && b <= 122) || b == 45 || b == 95 || b == 46
                    || b == 126 || b == 37
            }
    }

    public static func isValidAnalyticsLabel(_ label: String) -> Bool {
        (1...50).contains(label.utf8.count) && isValidTopicName(label)
    }
}
