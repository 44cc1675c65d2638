import Foundation
import RichPushCore

/// A send, decoded once at the edge: the message, its audience and the send's options, every value typed and in
/// range. Every problem in the body is collected and answered at once (422, each naming its field and rule), so
/// the handler only ever sees values it can use.
struct SendRequest {
    var message: PushMessage
    var audience: Audience
    var options: SendOptions
    /// Registered Live Activity tokens the send goes to, read by the handler (``audience`` is then empty until
    /// it replaces it with them).
    var live: LiveAudience?
    /// Warnings found while reading (they do not stop the send).
    var report: ValidationReport

    /// The fields of the body that are not the message's.
    static let sendFields = ["audience", "send_at", "spread_seconds", "media_check", "rehost", "receipts", "dry_run"]

    static func decode(
        _ body: JSONValue,
        validation: MessageValidator.Options,
        maxTokens: Int,
        now: Date
    ) throws(APIError) -> SendRequest {
        guard case .object(var fields) = body else {
            throw APIError(.invalid, "the body must be a message object")
        }
        var sendFields: [String: JSONValue] = [:]
        for key in Self.sendFields { sendFields[key] = fields.removeValue(forKey: key) }
        var (message, report) = PushMessage.read(.object(fields), strict: true)
        // Sizes are checked later, on the message as it will be sent (media re-hosted, id and receipt address set)
        // and for the providers the audience uses.
        var checks = validation
        checks.checksSizes = false
        report.merge(MessageValidator(options: checks).validate(message))
        let audience = Audience.resolve(
            sendFields["audience"],
            targets: message.targets,
            maxTokens: maxTokens,
            into: &report
        )
        let options = SendOptions.read(sendFields, now: now, into: &report)
        let live = LiveAudience.read(sendFields["audience"], message: message, into: &report)
        if case .apnsChannel? = audience { Self.checkBroadcast(message, into: &report) }
        guard report.isValid, let audience else {
            throw APIError(
                .invalid,
                "the notification is not valid",
                issues: report.errors
            )
        }
        // A live activity's state is dated when it is accepted, so that retries and slow deliveries keep their
        // place: the device ignores a state older than one it has shown.
        if message.liveActivity != nil && message.liveActivity?.timestamp == nil {
            message.liveActivity?.timestamp = Int64(max(now, options.notBefore).timeIntervalSince1970)
        }
        return SendRequest(message: message, audience: audience, options: options, live: live, report: report)
    }
}

extension SendRequest {
    /// A broadcast updates or ends the activities listening to the channel; starting one is push-to-start's.
    static func checkBroadcast(_ m: PushMessage, into report: inout ValidationReport) {
        guard let live = m.liveActivity else {
            report.add(
                "audience.apns_channel",
                "channel-needs-live-activity",
                "a broadcast channel carries Live Activity updates: the message needs live_activity"
            )
            return
        }
        if live.event == .start {
            report.add(
                "live_activity.event",
                "channel-start",
                "a channel updates or ends activities; start them with push-to-start (audience.live_start)"
            )
        }
    }
}

extension LiveAudience {
    /// `audience.live_activity` (an activity id) or `audience.live_start` (`{}` or `{"user": id}`), checked
    /// against the message; nil for other audiences.
    static func read(_ json: JSONValue?, message m: PushMessage, into report: inout ValidationReport) -> LiveAudience? {
        guard case .object(let a)? = json else { return nil }
        var r = FieldReader(strict: true, refusesNUL: true)
        defer { report.merge(r.report) }
        if a["live_activity"] != nil {
            guard let id = r.text(a, "live_activity", at: "audience", lengths: 1...256) else { return nil }
            if m.liveActivity == nil {
                r.report.add("audience.live_activity", "needs-live-activity", "the message needs live_activity")
            } else if m.liveActivity?.event == .start {
                r.report.add(
                    "live_activity.event",
                    "start-by-push-to-start",
                    "an activity is started with audience.live_start; its id's tokens update and end it"
                )
            }
            return .activity(id)
        }
        guard let start = a["live_start"] else { return nil }
        guard case .object(let o) = start else {
            r.report.add("audience.live_start", "type", "audience.live_start is an object: {} or {\"user\": id}")
            return nil
        }
        r.rejectUnknown(o, known: ["user"], at: "audience.live_start")
        let user = o["user"] == nil ? nil : r.text(o, "user", at: "audience.live_start", lengths: 1...256)
        guard let live = m.liveActivity, live.event == .start, let type = live.attributesType, !type.isEmpty else {
            r.report.add(
                "audience.live_start",
                "needs-start",
                "push-to-start sends a live_activity start, whose attributes_type chooses the tokens"
            )
            return nil
        }
        return .pushToStart(type: type, userID: user)
    }
}

/// How a send is carried out, beside its message.
struct SendOptions {
    var notBefore: Date
    var spread: TimeInterval = 0
    var onFailure = MediaService.OnFailure.reject
    var rehost = MediaService.Rehost.auto
    var dryRun = false
    var receipts = true

    /// The notification's end: no delivery is attempted after it (`expiresAt`, with a TTL), hosted media is kept
    /// until it, and its receipt address takes reports until an hour after it.
    func expiry(ttl: Int?) -> (expiresAt: Date?, end: Date) {
        let expiresAt = ttl.map { notBefore.addingTimeInterval(TimeInterval($0) + spread) }
        return (expiresAt, expiresAt ?? notBefore.addingTimeInterval(spread + MediaStore.defaultLifetime))
    }

    static func read(_ fields: [String: JSONValue], now: Date, into report: inout ValidationReport) -> SendOptions {
        var o = SendOptions(notBefore: now)
        if let s = fields["send_at"] {
            switch SendTime.read(s, now: now) {
            case .success(let t): o.notBefore = t
            case .failure(let problem): report.add("send_at", problem.rule, problem.message)
            }
        }
        if let s = fields["spread_seconds"] {
            if let v = s.doubleValue, v >= 0, v <= 86_400 {
                o.spread = v
            } else {
                report.add("spread_seconds", "range", "spread_seconds is a number of seconds from 0 to 86400")
            }
        }
        if let c = fields["media_check"] {
            if let v = c.stringValue.flatMap(MediaService.OnFailure.init(rawValue:)) {
                o.onFailure = v
            } else {
                report.add("media_check", "enum", "media_check is reject, drop or off")
            }
        }
        if let r = fields["rehost"] {
            if let v = r.stringValue.flatMap(MediaService.Rehost.init(rawValue:)) {
                o.rehost = v
            } else {
                report.add("rehost", "enum", "rehost is auto, always or never")
            }
        }
        if let d = fields["dry_run"] {
            if case .bool(let b) = d { o.dryRun = b } else { report.add("dry_run", "type", "dry_run is true or false") }
        }
        if let r = fields["receipts"] {
            if case .bool(let b) = r {
                o.receipts = b
            } else {
                report.add("receipts", "type", "receipts is true or false")
            }
        }
        return o
    }
}

extension Audience {
    static let kinds: Set<String> = [
        "all", "user", "tag", "topic", "tokens", "apns_tokens", "fcm_tokens", "fcm_topic", "fcm_condition",
        "apns_channel", "live_activity", "live_start",
    ]

    /// The audience of a send: the `audience` field, or else the message's own targets; checked (one kind, its
    /// value's type and shape, token formats, FCM topic names and conditions, the per-request token limit) with
    /// each problem named by its field.
    static func resolve(
        _ json: JSONValue?,
        targets t: PushMessage.Targets,
        maxTokens: Int,
        into report: inout ValidationReport
    ) -> Audience? {
        var r = FieldReader(strict: true, refusesNUL: true)
        defer { report.merge(r.report) }
        guard let json else { return fromTargets(t, maxTokens: maxTokens, &r) }
        guard case .object(let a) = json else {
            r.report.add(
                "audience",
                "type",
                "audience is an object with one of all, user, tag, topic, tokens, apns_tokens/fcm_tokens, fcm_topic, fcm_condition"
            )
            return nil
        }
        r.rejectUnknown(a, known: kinds, at: "audience")
        let given = a.keys.filter(kinds.contains).sorted()
        let direct = !given.isEmpty && Set(given).isSubset(of: ["apns_tokens", "fcm_tokens"])
        guard given.count == 1 || direct else {
            r.report.add(
                "audience",
                "one-kind",
                given.isEmpty
                    ? "give one of all, user, tag, topic, tokens, apns_tokens/fcm_tokens, fcm_topic, fcm_condition"
                    : "give only one of \(given.joined(separator: ", ")) (apns_tokens and fcm_tokens may go together)"
            )
            return nil
        }
        return direct ? providerTokens(a, maxTokens: maxTokens, &r) : read(given[0], a, maxTokens: maxTokens, &r)
    }

    static func tooMany(_ maxTokens: Int) -> String {
        "at most \(maxTokens) tokens per request; register devices and use a tag or topic for more"
    }

    /// No `audience`: the message's own targets.
    private static func fromTargets(_ t: PushMessage.Targets, maxTokens: Int, _ r: inout FieldReader) -> Audience? {
        if !t.apnsTokens.isEmpty || !t.fcmTokens.isEmpty {
            // The message's validator checks each token; the count is the request's limit.
            if t.apnsTokens.count + t.fcmTokens.count > maxTokens {
                r.report.add("targets", "max-tokens", tooMany(maxTokens))
            }
            return .providerTokens(apns: t.apnsTokens, fcm: t.fcmTokens)
        }
        if let topic = t.topic { return .fcmTopic(topic) }
        if let condition = t.condition { return .fcmCondition(condition) }
        r.report.add(
            "audience",
            "required",
            "give audience {all|user|tag|topic|tokens|apns_tokens/fcm_tokens|fcm_topic|fcm_condition}, or targets in the message"
        )
        return nil
    }

    /// An audience of one kind other than provider tokens.
    private static func read(
        _ kind: String,
        _ a: [String: JSONValue],
        maxTokens: Int,
        _ r: inout FieldReader
    ) -> Audience? {
        switch kind {
        case "all":
            guard a["all"] == .bool(true) else {
                r.report.add("audience.all", "enum", "audience.all is true (every registered device)")
                return nil
            }
            return .all
        case "user": return r.text(a, "user", at: "audience", lengths: 1...256).map(Audience.user)
        case "apns_channel":
            guard let id = r.text(a, "apns_channel", at: "audience", lengths: 1...128) else { return nil }
            guard Audience.isChannelID(id) else {
                r.report.add("audience.apns_channel", "channel-id", "a channel id is the base64 text APNs gave")
                return nil
            }
            return .apnsChannel(id)
        case "live_activity", "live_start":
            // Registered tokens, read by the handler (LiveAudience); none until then.
            return .providerTokens(apns: [], fcm: [])
        case "tag": return r.text(a, "tag", at: "audience", lengths: 1...100).map(Audience.tag)
        case "topic": return r.text(a, "topic", at: "audience", lengths: 1...100).map(Audience.topic)
        case "fcm_topic":
            guard let topic = r.text(a, "fcm_topic", at: "audience", lengths: 1...908) else { return nil }
            if let p = MessageValidator.fcmTopicProblem(topic) {
                r.report.add("audience.fcm_topic", p.rule, p.message)
                return nil
            }
            return .fcmTopic(topic)
        case "fcm_condition":
            guard let condition = r.text(a, "fcm_condition", at: "audience", lengths: 1...4096) else { return nil }
            if let p = MessageValidator.fcmConditionProblem(condition) {
                r.report.add("audience.fcm_condition", p.rule, p.message)
                return nil
            }
            return .fcmCondition(condition)
        default:  // "tokens", the one kind left
            guard let tokens = r.texts(a, "tokens", at: "audience", maxCount: maxTokens, lengths: 1...4096) else {
                if a["tokens"] == .null {
                    r.report.add("audience.tokens", "type", "audience.tokens is a list of registered tokens")
                }
                return nil
            }
            if tokens.isEmpty { r.report.add("audience.tokens", "empty", "audience.tokens holds at least one token") }
            return tokens.isEmpty ? nil : .tokens(tokens)
        }
    }

    /// `apns_tokens` and `fcm_tokens`, together or alone: each token checked for its provider.
    private static func providerTokens(_ a: [String: JSONValue], maxTokens: Int, _ r: inout FieldReader) -> Audience? {
        let apns = r.texts(a, "apns_tokens", at: "audience", maxCount: maxTokens, lengths: 1...400) ?? []
        let fcm = r.texts(a, "fcm_tokens", at: "audience", maxCount: maxTokens, lengths: 1...4096) ?? []
        for (i, t) in apns.enumerated() {
            if let p = MessageValidator.apnsTokenProblem(t) {
                r.report.add("audience.apns_tokens[\(i)]", "apns-token", p)
            }
        }
        for (i, t) in fcm.enumerated() {
            if let p = MessageValidator.fcmTokenProblem(t) {
                r.report.add("audience.fcm_tokens[\(i)]", "fcm-token", p)
            }
        }
        if apns.isEmpty && fcm.isEmpty {
            r.report.add("audience", "empty", "audience.apns_tokens/fcm_tokens hold at least one token")
        }
        if apns.count + fcm.count > maxTokens { r.report.add("audience", "max-tokens", tooMany(maxTokens)) }
        return r.report.isValid ? .providerTokens(apns: apns, fcm: fcm) : nil
    }
}
