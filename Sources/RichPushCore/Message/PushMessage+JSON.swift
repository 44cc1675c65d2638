extension PushMessage {
    /// The fields a message may have (the server's schema lists the same).
    public static let knownKeys: Set<String> = [
        "id", "alert", "title", "subtitle", "body", "media", "chart", "sound", "badge", "category", "thread_id",
        "collapse_id", "push_type", "priority", "ttl", "expiration", "interruption_level", "relevance_score",
        "content_available", "content_override", "data", "deep_link", "chart_image_url", "receipt_url",
        "analytics_label", "targets", "web", "live_activity", "android_channel_id",
    ]

    /// Reads a message from its JSON form (see `docs/payload-format.md`), throwing every problem found in
    /// the JSON's shape at once. Rules about values (sizes, URLs, tokens) are checked by ``MessageValidator``.
    ///
    /// ```swift
    /// let message = try PushMessage.decode(JSONValue.parse(data))
    /// ```
    public static func decode(_ json: JSONValue) throws(ValidationReport) -> PushMessage {
        let (message, report) = read(json)
        guard report.isValid else { throw report }
        return message
    }

    /// Reads as much of the message as can be read, with a report of every field that could not be.
    /// Fields of the wrong type are left empty, so that validation can still look at the rest.
    /// `strict`: a field given as `null` is refused (the server's edge) instead of read as missing.
    public static func read(_ json: JSONValue, strict: Bool = false) -> (PushMessage, ValidationReport) {
        var r = FieldReader(strict: strict)
        var m = PushMessage()
        guard let o = r.object(json, at: "") else {
            if json.isNull { r.report.add("", "type", "expected a message object, found null") }
            return (m, r.report)
        }
        r.rejectUnknown(o, known: knownKeys, at: "")
        m.id = r.string(o, "id", at: "")

        m.alert = readAlert(o, into: &r)

        m.media = readMedia(o["media"], into: &r)
        if let c = r.present(o["chart"], at: "chart") { m.chart = ChartSpec.read(c, at: "chart", into: &r) }

        m.sound = readSound(o["sound"], into: &r)
        if let b = r.int(o, "badge", at: "") { m.badge = Int(clamping: b) }
        m.category = r.string(o, "category", at: "")
        m.threadID = r.string(o, "thread_id", at: "")
        m.collapseID = r.string(o, "collapse_id", at: "")
        m.androidChannelID = r.string(o, "android_channel_id", at: "")
        if let t = r.string(o, "push_type", at: "") {
            if let pt = PushType(rawValue: t) {
                m.pushType = pt
            } else {
                r.report.add(
                    "push_type",
                    "enum",
                    "unknown push type '\(t)'; one of \(PushType.allCases.map(\.rawValue).joined(separator: ", "))"
                )
            }
        }
        m.priority = readPriority(o["priority"], into: &r)
        if let t = r.int(o, "ttl", at: "") { m.ttl = Int(clamping: t) }
        m.expiration = r.int(o, "expiration", at: "")
        if let l = r.string(o, "interruption_level", at: "") {
            if let il = InterruptionLevel(rawValue: l) {
                m.interruptionLevel = il
            } else {
                r.report.add("interruption_level", "enum", "must be passive, active, time-sensitive or critical")
            }
        }
        m.relevanceScore = r.double(o, "relevance_score", at: "")
        m.contentAvailable = r.bool(o, "content_available", at: "") ?? false
        if let co = r.object(o["content_override"], at: "content_override") {
            r.rejectUnknown(co, known: ["title", "subtitle", "body"], at: "content_override")
            m.contentOverride = ContentOverride(
                title: r.string(co, "title", at: "content_override", allowEmpty: true),
                subtitle: r.string(co, "subtitle", at: "content_override", allowEmpty: true),
                body: r.string(co, "body", at: "content_override", allowEmpty: true)
            )
        }
        m.data = r.object(o["data"], at: "data") ?? [:]
        m.deepLink = r.string(o, "deep_link", at: "")
        m.chartImageURL = r.string(o, "chart_image_url", at: "")
        m.receiptURL = r.string(o, "receipt_url", at: "")
        m.analyticsLabel = r.string(o, "analytics_label", at: "")
        if let w = r.object(o["web"], at: "web") { m.web = readWeb(w, into: &r) }
        if let la = r.object(o["live_activity"], at: "live_activity") {
            m.liveActivity = LiveActivity.read(la, into: &r)
            // The push type follows from the activity unless the sender named one (checked by the validator).
            if o["push_type"] == nil { m.pushType = .liveactivity }
        }
        if let t = r.object(o["targets"], at: "targets") {
            r.rejectUnknown(t, known: ["apns_tokens", "fcm_tokens", "topic", "condition"], at: "targets")
            m.targets = Targets(
                apnsTokens: r.strings(t, "apns_tokens", at: "targets") ?? [],
                fcmTokens: r.strings(t, "fcm_tokens", at: "targets") ?? [],
                topic: r.string(t, "topic", at: "targets"),
                condition: r.string(t, "condition", at: "targets")
            )
        }
        return (m, r.report)
    }

    /// The alert: a string (the body), or an object; the top-level title, subtitle and body are a shorthand for its.
    private static func readAlert(_ o: [String: JSONValue], into r: inout FieldReader) -> Alert {
        var alert = Alert()
        if case .string(let body)? = o["alert"] {
            // A string is the body, held to the body's rule.
            if body.isEmpty { r.report.add("alert", "empty", "must not be empty") } else { alert.body = body }
        } else if let a = r.object(o["alert"], at: "alert") {
            r.rejectUnknown(
                a,
                known: [
                    "title", "subtitle", "body", "title_loc_key", "title_loc_args", "subtitle_loc_key",
                    "subtitle_loc_args", "loc_key", "loc_args", "launch_image",
                ],
                at: "alert"
            )
            alert = Alert(
                title: r.string(a, "title", at: "alert"),
                subtitle: r.string(a, "subtitle", at: "alert"),
                body: r.string(a, "body", at: "alert"),
                titleLocKey: r.string(a, "title_loc_key", at: "alert"),
                titleLocArgs: r.strings(a, "title_loc_args", at: "alert"),
                subtitleLocKey: r.string(a, "subtitle_loc_key", at: "alert"),
                subtitleLocArgs: r.strings(a, "subtitle_loc_args", at: "alert"),
                locKey: r.string(a, "loc_key", at: "alert"),
                locArgs: r.strings(a, "loc_args", at: "alert"),
                launchImage: r.string(a, "launch_image", at: "alert")
            )
        }
        // Top-level title/subtitle/body are a shorthand for the alert's.
        if let t = r.string(o, "title", at: "") { alert.title = t }
        if let t = r.string(o, "subtitle", at: "") { alert.subtitle = t }
        if let t = r.string(o, "body", at: "") { alert.body = t }
        return alert
    }

    /// A sound name, or `{name, critical, volume}`.
    private static func readSound(_ value: JSONValue?, into r: inout FieldReader) -> Sound? {
        switch r.present(value, at: "sound") {
        case .string(let name)?: return Sound(name: name)
        case .object(let so)?:
            r.rejectUnknown(so, known: ["name", "critical", "volume"], at: "sound")
            return Sound(
                name: r.string(so, "name", at: "sound") ?? "default",
                critical: r.bool(so, "critical", at: "sound") ?? false,
                volume: r.double(so, "volume", at: "sound")
            )
        case nil: return nil
        case let other?:
            r.report.add("sound", "type", "expected a sound name or an object, found \(other.typeName)")
            return nil
        }
    }

    /// `high`, `normal`, `low`, or APNs' 10, 5, 1.
    private static func readPriority(_ value: JSONValue?, into r: inout FieldReader) -> Priority? {
        switch r.present(value, at: "priority") {
        case .string(let s)?:
            if let p = Priority(rawValue: s.lowercased()) { return p }
        case let v? where v.intValue != nil:
            if let n = v.intValue, let p = Priority(apnsValue: Int(clamping: n)) { return p }
        case nil: return nil
        case let other?:
            r.report.add("priority", "type", "expected a string or a number, found \(other.typeName)")
            return nil
        }
        r.report.add("priority", "enum", "must be high, normal or low (or 10, 5, 1)")
        return nil
    }

    /// What only browsers show: an icon, a badge and buttons.
    private static func readWeb(_ w: [String: JSONValue], into r: inout FieldReader) -> WebOptions {
        r.rejectUnknown(w, known: ["icon", "badge", "actions"], at: "web")
        var options = WebOptions(icon: r.string(w, "icon", at: "web"), badge: r.string(w, "badge", at: "web"))
        switch w["actions"] {
        case nil: break
        case .array(let list)?:
            for (i, element) in list.enumerated() {
                let path = "web.actions[\(i)]"
                guard let a = r.object(element, at: path) else { continue }
                r.rejectUnknown(a, known: ["action", "title", "navigate"], at: path)
                guard let action = r.string(a, "action", at: path), let title = r.string(a, "title", at: path)
                else {
                    if a["action"] == nil {
                        r.report.add("\(path).action", "required", "a button needs an action id")
                    }
                    if a["title"] == nil { r.report.add("\(path).title", "required", "a button needs a title") }
                    continue
                }
                options.actions.append(
                    WebAction(action: action, title: title, navigate: r.string(a, "navigate", at: path))
                )
            }
        case let other?:
            r.report.add("web.actions", "type", "expected an array of buttons, found \(other.typeName)")
        }
        return options
    }

    private static func readMedia(_ value: JSONValue?, into r: inout FieldReader) -> [PushMedia] {
        guard let value = r.present(value, at: "media") else { return [] }
        let list: [(JSONValue, String)]
        switch value {
        case .array(let a): list = a.enumerated().map { ($1, "media[\($0)]") }
        case .string, .object: list = [(value, "media[0]")]
        default:
            r.report.add("media", "type", "expected a URL, a media object or an array of them, found \(value.typeName)")
            return []
        }
        var out: [PushMedia] = []
        for (element, path) in list {
            if case .string(let url) = element {
                out.append(PushMedia(url: url))
                continue
            }
            guard let mo = r.object(element, at: path) else { continue }
            r.rejectUnknown(mo, known: ["url", "kind", "type", "thumbnail"], at: path)
            guard let url = r.string(mo, "url", at: path) else {
                if mo["url"] == nil { r.report.add("\(path).url", "required", "media needs a url") }
                continue
            }
            var media = PushMedia(url: url)
            if let k = r.string(mo, "kind", at: path) {
                if let kind = MediaKind(hint: k) {
                    media.kind = kind
                } else {
                    r.report.add("\(path).kind", "enum", "must be image, audio or video")
                }
            }
            media.mimeType = r.string(mo, "type", at: path)
            if let t = r.object(mo["thumbnail"], at: "\(path).thumbnail") {
                let tp = "\(path).thumbnail"
                r.rejectUnknown(t, known: ["crop", "time", "hidden"], at: tp)
                var thumb = PushMedia.Thumbnail(time: r.double(t, "time", at: tp), hidden: r.bool(t, "hidden", at: tp))
                if let c = r.object(t["crop"], at: "\(tp).crop") {
                    let cp = "\(tp).crop"
                    r.rejectUnknown(c, known: ["x", "y", "width", "height"], at: cp)
                    let x = r.double(c, "x", at: cp)
                    let y = r.double(c, "y", at: cp)
                    let w = r.double(c, "width", at: cp)
                    let h = r.double(c, "height", at: cp)
                    if let w, let h {
                        thumb.crop = UnitRect(x: x ?? 0, y: y ?? 0, width: w, height: h)
                    } else {
                        r.report.add(cp, "required", "crop needs width and height")
                    }
                }
                media.thumbnail = thumb
            }
            out.append(media)
        }
        return out
    }

    /// The message as JSON, in the same form ``decode(_:)`` reads; empty fields are left out.
    public var json: JSONValue {
        var o: [String: JSONValue] = [:]
        func put(_ key: String, _ value: String?) { if let value { o[key] = .string(value) } }
        put("id", id)
        var a: [String: JSONValue] = [:]
        func putA(_ key: String, _ value: String?) { if let value { a[key] = .string(value) } }
        func putArgs(_ key: String, _ value: [String]?) {
            if let value { a[key] = .array(value.map(JSONValue.string)) }
        }
        putA("title", alert.title)
        putA("subtitle", alert.subtitle)
        putA("body", alert.body)
        putA("title_loc_key", alert.titleLocKey)
        putArgs("title_loc_args", alert.titleLocArgs)
        putA("subtitle_loc_key", alert.subtitleLocKey)
        putArgs("subtitle_loc_args", alert.subtitleLocArgs)
        putA("loc_key", alert.locKey)
        putArgs("loc_args", alert.locArgs)
        putA("launch_image", alert.launchImage)
        if !a.isEmpty { o["alert"] = .object(a) }
        if !media.isEmpty {
            o["media"] = .array(
                media.map { m in
                    var mo: [String: JSONValue] = ["url": .string(m.url)]
                    if let k = m.kind { mo["kind"] = .string(k.rawValue) }
                    if let t = m.mimeType { mo["type"] = .string(t) }
                    if let t = m.thumbnail {
                        var to: [String: JSONValue] = [:]
                        if let c = t.crop {
                            to["crop"] = [
                                "x": .double(c.x), "y": .double(c.y), "width": .double(c.width),
                                "height": .double(c.height),
                            ]
                        }
                        if let time = t.time { to["time"] = .double(time) }
                        if let h = t.hidden { to["hidden"] = .bool(h) }
                        mo["thumbnail"] = .object(to)
                    }
                    return .object(mo)
                }
            )
        }
        if let chart { o["chart"] = chart.json }
        if let sound {
            if !sound.critical && sound.volume == nil {
                o["sound"] = .string(sound.name)
            } else {
                var so: [String: JSONValue] = ["name": .string(sound.name), "critical": .bool(sound.critical)]
                if let v = sound.volume { so["volume"] = .double(v) }
                o["sound"] = .object(so)
            }
        }
        if let badge { o["badge"] = .int(Int64(badge)) }
        put("category", category)
        put("thread_id", threadID)
        put("collapse_id", collapseID)
        put("android_channel_id", androidChannelID)
        if pushType != .alert && !(pushType == .liveactivity && liveActivity != nil) {
            o["push_type"] = .string(pushType.rawValue)
        }
        if let priority { o["priority"] = .string(priority.rawValue) }
        if let ttl { o["ttl"] = .int(Int64(ttl)) }
        if let expiration { o["expiration"] = .int(expiration) }
        if let interruptionLevel { o["interruption_level"] = .string(interruptionLevel.rawValue) }
        if let relevanceScore { o["relevance_score"] = .double(relevanceScore) }
        if contentAvailable { o["content_available"] = .bool(true) }
        if let c = contentOverride {
            var co: [String: JSONValue] = [:]
            if let v = c.title { co["title"] = .string(v) }
            if let v = c.subtitle { co["subtitle"] = .string(v) }
            if let v = c.body { co["body"] = .string(v) }
            o["content_override"] = .object(co)
        }
        if !data.isEmpty { o["data"] = .object(data) }
        put("deep_link", deepLink)
        put("chart_image_url", chartImageURL)
        put("receipt_url", receiptURL)
        put("analytics_label", analyticsLabel)
        if let web {
            var w: [String: JSONValue] = [:]
            if let i = web.icon { w["icon"] = .string(i) }
            if let b = web.badge { w["badge"] = .string(b) }
            if !web.actions.isEmpty {
                w["actions"] = .array(
                    web.actions.map { a in
                        var o: [String: JSONValue] = ["action": .string(a.action), "title": .string(a.title)]
                        if let n = a.navigate { o["navigate"] = .string(n) }
                        return .object(o)
                    }
                )
            }
            o["web"] = .object(w)
        }
        if let liveActivity { o["live_activity"] = liveActivity.json }
        if !targets.isEmpty {
            var t: [String: JSONValue] = [:]
            if !targets.apnsTokens.isEmpty { t["apns_tokens"] = .array(targets.apnsTokens.map(JSONValue.string)) }
            if !targets.fcmTokens.isEmpty { t["fcm_tokens"] = .array(targets.fcmTokens.map(JSONValue.string)) }
            if let v = targets.topic { t["topic"] = .string(v) }
            if let v = targets.condition { t["condition"] = .string(v) }
            o["targets"] = .object(t)
        }
        return .object(o)
    }
}
