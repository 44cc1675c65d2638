import Foundation

/// Reads the media keys of every known provider out of a received payload (the `userInfo` of a
/// notification) into one ``ReceivedRichContent``.
///
/// Hostile values (wrong types, nulls, empty strings, junk URLs) never crash and never stop the rest from
/// being read: each becomes a ``PayloadProblem``. The table of keys is in `docs/payload-format.md`.
///
/// ```swift
/// let content = ReceivedPayloadDecoder.decode(userInfo: request.content.userInfo)
/// for media in content.media { … }
/// ```
public enum ReceivedPayloadDecoder {
    public static func decode(userInfo: [AnyHashable: Any]) -> ReceivedRichContent {
        var root: [String: JSONValue] = [:]
        var content = ReceivedRichContent()
        for (k, v) in userInfo {
            guard let key = k.base as? String else { continue }
            if let value = JSONValue(foundation: v) {
                root[key] = value
            } else {
                content.problems.append(
                    PayloadProblem(path: key, code: "type", message: "value of type \(type(of: v)) is not JSON")
                )
            }
        }
        var decoded = decode(.object(root))
        decoded.problems.insert(contentsOf: content.problems, at: 0)
        return decoded
    }

    public static func decode(_ payload: JSONValue) -> ReceivedRichContent {
        var d = Decoding()
        guard case .object(let root) = payload else {
            d.problem("", "type", "payload is \(payload.typeName), not an object")
            return d.content
        }
        d.readRichPush(root)
        d.readAirship(root)
        d.readFCM(root)
        d.readBraze(root)
        d.readOneSignal(root)
        d.readCleverTap(root)
        d.readIterable(root)
        d.readCustomerIO(root)
        d.readKlaviyo(root)
        d.readPushwoosh(root)
        return d.content
    }
}

private struct Decoding {
    var content = ReceivedRichContent()
    var seenURLs = Set<String>()

    mutating func problem(_ path: String, _ code: String, _ message: String) {
        content.problems.append(PayloadProblem(path: path, code: code, message: message))
    }

    mutating func found(_ source: PayloadSource) {
        if !content.sources.contains(source) { content.sources.append(source) }
    }

    /// A non-empty string at `path`, or nil with a problem recorded when the value is something else.
    mutating func string(_ value: JSONValue?, _ path: String) -> String? {
        switch value {
        case nil, .null?: return nil
        case .string(let s)?:
            let t = s.trimmingCharacters(in: .whitespacesAndNewlines)
            if t.isEmpty {
                problem(path, "empty", "empty string")
                return nil
            }
            return t
        case let other?:
            problem(path, "type", "expected a string, found \(other.typeName)")
            return nil
        }
    }

    mutating func object(_ value: JSONValue?, _ path: String) -> [String: JSONValue]? {
        switch value {
        case nil, .null?: return nil
        case .object(let o)?: return o
        case .string(let s)?:
            // Some senders put a JSON object in a string (FCM data values are strings).
            if let parsed = try? JSONValue.parse(s), case .object(let o) = parsed { return o }
            problem(path, "type", "expected an object, found a string")
            return nil
        case let other?:
            problem(path, "type", "expected an object, found \(other.typeName)")
            return nil
        }
    }

    /// A URL at `path` exactly as written (``MediaURL`` trims it by its own rule), or nil with a problem recorded when
    /// the value is not a string or is blank.
    mutating func urlString(_ value: JSONValue?, _ path: String) -> String? {
        guard case .string(let s)? = value else { return string(value, path) }
        return string(value, path) == nil ? nil : s
    }

    /// Adds media after reading its URL (``MediaURL``: the rule a refused one breaks is the problem's code); two
    /// spellings of one URL, from one provider or two, are kept once.
    mutating func add(
        _ url: String,
        _ path: String,
        source: PayloadSource,
        kind: MediaKind? = nil,
        type: String? = nil,
        thumbnail: PushMedia.Thumbnail? = nil
    ) {
        let media: MediaURL
        do { media = try MediaURL(url) } catch {
            problem(path, error.code, "'\(url.prefix(100))': \(error.message)")
            return
        }
        found(source)
        guard seenURLs.insert(media.comparisonKey).inserted else { return }
        content.media.append(
            ReceivedMedia(
                url: url,
                kindHint: kind,
                typeHint: type,
                thumbnail: thumbnail,
                source: source,
                fetched: media.fetched
            )
        )
    }

    mutating func number(_ value: JSONValue?, _ path: String) -> Double? {
        switch value {
        case nil, .null?: return nil
        case .string(let s)?:
            if let d = Double(s), d.isFinite { return d }
            problem(path, "type", "expected a number, found '\(s.prefix(20))'")
            return nil
        case let v?:
            if let d = v.doubleValue { return d }
            problem(path, "type", "expected a number, found \(v.typeName)")
            return nil
        }
    }

    mutating func flag(_ value: JSONValue?, _ path: String) -> Bool? {
        switch value {
        case nil, .null?: return nil
        case .bool(let b)?: return b
        case .int(let i)?: return i != 0
        case .string(let s)?: return ["true", "1", "yes"].contains(s.lowercased())
        case let other?:
            problem(path, "type", "expected a boolean, found \(other.typeName)")
            return nil
        }
    }

    mutating func crop(_ value: JSONValue?, _ path: String) -> UnitRect? {
        var rect: UnitRect?
        switch value {
        case nil, .null?: return nil
        case .array(let a)?:
            let n = a.compactMap(\.doubleValue)
            if n.count == 4 && a.count == 4 { rect = UnitRect(x: n[0], y: n[1], width: n[2], height: n[3]) }
        case .object(let o)?:
            if let x = number(o["x"], path + ".x"), let y = number(o["y"], path + ".y"),
                let w = number(o["width"], path + ".width"), let h = number(o["height"], path + ".height")
            {
                rect = UnitRect(x: x, y: y, width: w, height: h)
            }
        default: break
        }
        guard let rect, rect.isInsideUnitSquare else {
            problem(path, "bad-crop", "crop must be a unit rectangle inside 0…1; ignored")
            return nil
        }
        return rect
    }

    // MARK: - Providers

    mutating func readRichPush(_ root: [String: JSONValue]) {
        guard let value = root[RichPushKey.name], !value.isNull else { return }
        let p = RichPushKey.name
        guard let rp = object(value, p) else { return }
        found(.richpush)
        if let v = rp["v"], let version = v.intValue, version > RichPushKey.version {
            problem(
                "\(p).v",
                "newer-version",
                "format version \(version) is newer than this library's \(RichPushKey.version); reading the fields it knows"
            )
        }
        content.notificationID = string(rp["id"], "\(p).id")
        switch rp["m"] {
        case nil, .null?: break
        case .array(let list)?:
            for (i, element) in list.enumerated() {
                let mp = "\(p).m[\(i)]"
                if case .string(let s) = element {
                    add(s, mp, source: .richpush)
                    continue
                }
                guard let m = object(element, mp), let url = urlString(m["u"], "\(mp).u") else { continue }
                let kind = string(m["k"], "\(mp).k").flatMap(MediaKind.init(hint:))
                var thumb = PushMedia.Thumbnail(
                    crop: crop(m["c"], "\(mp).c"),
                    time: number(m["f"], "\(mp).f"),
                    hidden: flag(m["h"], "\(mp).h")
                )
                if thumb.time.map({ $0 < 0 }) == true { thumb.time = nil }
                add(
                    url,
                    mp,
                    source: .richpush,
                    kind: kind,
                    type: string(m["t"], "\(mp).t"),
                    thumbnail: thumb == PushMedia.Thumbnail() ? nil : thumb
                )
            }
        case let other?:
            problem("\(p).m", "type", "expected an array, found \(other.typeName)")
        }
        if let c = rp["c"], !c.isNull {
            do { content.chart = try ChartSpec.decode(c) } catch {
                problem(
                    "\(p).c",
                    "bad-chart",
                    "chart ignored: " + error.issues.map(\.description).joined(separator: "; ")
                )
            }
        }
        if let o = object(rp["o"], "\(p).o") {
            let co = PushMessage.ContentOverride(
                title: string(o["t"], "\(p).o.t"),
                subtitle: string(o["s"], "\(p).o.s"),
                body: string(o["b"], "\(p).o.b")
            )
            if co != PushMessage.ContentOverride() { content.contentOverride = co }
        }
        if let l = string(rp["l"], "\(p).l") { content.deepLink = l }
        if let r = string(rp["r"], "\(p).r") {
            let scheme = URL(string: r)?.scheme?.lowercased()
            if scheme == "https" || scheme == "http" {
                content.receiptURL = r
            } else {
                problem("\(p).r", "url", "the receipt address is not an http(s) URL")
            }
        }
    }

    mutating func readFCM(_ root: [String: JSONValue]) {
        guard let o = object(root["fcm_options"], "fcm_options") else { return }
        if let url = urlString(o["image"], "fcm_options.image") {
            add(url, "fcm_options.image", source: .fcm, kind: .image)
        }
    }

    mutating func readBraze(_ root: [String: JSONValue]) {
        guard let ab = object(root["ab"], "ab") else { return }
        if let att = object(ab["att"], "ab.att"), let url = urlString(att["url"], "ab.att.url") {
            let type = string(att["type"], "ab.att.type")
            add(url, "ab.att.url", source: .braze, kind: type.flatMap(MediaKind.init(hint:)), type: type)
        }
        if content.deepLink == nil, let link = string(root["ab_uri"], "ab_uri") { content.deepLink = link }
    }

    mutating func readOneSignal(_ root: [String: JSONValue]) {
        var places: [(JSONValue?, String)] = [(root["att"], "att"), (root["at"], "at")]
        if let os = object(root["os_data"], "os_data") {
            places += [(os["att"], "os_data.att"), (os["at"], "os_data.at")]
            if content.deepLink == nil, let custom = object(os["custom"], "os_data.custom"),
                let u = string(custom["u"], "os_data.custom.u")
            {
                content.deepLink = u
            }
        }
        for (value, path) in places {
            switch value {
            case nil, .null?: continue
            case .string(let s)?:
                if let url = urlString(.string(s), path) { add(url, path, source: .onesignal) }
            case .object(let o)?:
                for key in o.keys.sorted() {
                    if let url = urlString(o[key], "\(path).\(key)") { add(url, "\(path).\(key)", source: .onesignal) }
                }
            case let other?:
                problem(path, "type", "expected an object of id → url, found \(other.typeName)")
            }
        }
        if content.deepLink == nil, let custom = object(root["custom"], "custom"),
            let u = string(custom["u"], "custom.u")
        {
            content.deepLink = u
        }
    }

    mutating func readAirship(_ root: [String: JSONValue]) {
        let p = "com.urbanairship.media_attachment"
        guard let a = object(root[p], p) else { return }
        var entries: [(url: String, id: String?, path: String)] = []
        switch a["url"] {
        case nil, .null?: break
        case .string?: if let u = urlString(a["url"], "\(p).url") { entries.append((u, nil, "\(p).url")) }
        case .array(let list)?:
            for (i, v) in list.enumerated() {
                if let u = urlString(v, "\(p).url[\(i)]") { entries.append((u, nil, "\(p).url[\(i)]")) }
            }
        case let other?: problem("\(p).url", "type", "expected a string or an array, found \(other.typeName)")
        }
        switch a["urls"] {
        case nil, .null?: break
        case .array(let list)?:
            for (i, v) in list.enumerated() {
                let ip = "\(p).urls[\(i)]"
                guard let o = object(v, ip), let u = urlString(o["url"], "\(ip).url") else { continue }
                entries.append((u, string(o["url_id"], "\(ip).url_id"), "\(ip).url"))
            }
        case let other?: problem("\(p).urls", "type", "expected an array, found \(other.typeName)")
        }
        // The thumbnail's attachment goes first: the system shows the first attachment's thumbnail.
        if let thumb = string(a["thumbnail_id"], "\(p).thumbnail_id"),
            let i = entries.firstIndex(where: { $0.id == thumb })
        {
            entries.insert(entries.remove(at: i), at: 0)
        }
        var thumbnail: PushMedia.Thumbnail?
        if let options = object(a["options"], "\(p).options") {
            let t = PushMedia.Thumbnail(
                crop: crop(options["crop"], "\(p).options.crop"),
                time: number(options["time"], "\(p).options.time"),
                hidden: flag(options["hidden"], "\(p).options.hidden")
            )
            if t != PushMedia.Thumbnail() { thumbnail = t }
        }
        for (n, e) in entries.enumerated() { add(e.url, e.path, source: .airship, thumbnail: n == 0 ? thumbnail : nil) }
        if content.contentOverride == nil, let c = object(a["content"], "\(p).content") {
            let co = PushMessage.ContentOverride(
                title: string(c["title"], "\(p).content.title"),
                subtitle: string(c["subtitle"], "\(p).content.subtitle"),
                body: string(c["body"], "\(p).content.body")
            )
            if co != PushMessage.ContentOverride() { content.contentOverride = co }
        }
        if content.deepLink == nil, let link = string(root["^d"], "^d") { content.deepLink = link }
    }

    mutating func readCleverTap(_ root: [String: JSONValue]) {
        guard let url = urlString(root["ct_mediaUrl"], "ct_mediaUrl") else { return }
        let type = string(root["ct_mediaType"], "ct_mediaType")
        add(
            url,
            "ct_mediaUrl",
            source: .clevertap,
            kind: type.flatMap(MediaKind.init(hint:)),
            type: type == "gif" ? "gif" : nil
        )
        if content.deepLink == nil, let link = string(root["wzrk_dl"], "wzrk_dl") { content.deepLink = link }
    }

    mutating func readIterable(_ root: [String: JSONValue]) {
        guard let itbl = object(root["itbl"], "itbl") else { return }
        if let url = urlString(itbl["attachment-url"], "itbl.attachment-url") {
            add(url, "itbl.attachment-url", source: .iterable)
        }
    }

    mutating func readCustomerIO(_ root: [String: JSONValue]) {
        guard let cio = object(root["CIO"], "CIO"), let push = object(cio["push"], "CIO.push") else { return }
        if let url = urlString(push["image"], "CIO.push.image") { add(url, "CIO.push.image", source: .customerio) }
        if content.deepLink == nil, let link = string(push["link"], "CIO.push.link") { content.deepLink = link }
    }

    mutating func readKlaviyo(_ root: [String: JSONValue]) {
        guard let url = urlString(root["rich-media"], "rich-media") else { return }
        let type = string(root["rich-media-type"], "rich-media-type")
        add(url, "rich-media", source: .klaviyo, kind: type.flatMap(MediaKind.init(hint:)), type: type)
    }

    mutating func readPushwoosh(_ root: [String: JSONValue]) {
        guard let url = urlString(root["attachment"], "attachment") else { return }
        add(url, "attachment", source: .pushwoosh)
    }
}
