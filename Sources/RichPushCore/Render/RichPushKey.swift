/// Our own payload key: one namespaced, versioned object that carries media, chart and overrides.
///
/// ```json
/// "rp": {"v": 1, "m": [{"u": "https://…/a.jpg", "k": "image", "c": [0, 0, 1, 0.5]}], "c": {…}, "o": {"b": "…"}}
/// ```
/// Short keys keep room for a chart's data inside the 4 KB limit. Documented in `docs/payload-format.md`.
public enum RichPushKey {
    /// The top-level key, a sibling of `aps`.
    public static let name = "rp"
    /// The format version this code writes; readers accept this and older versions.
    public static let version: Int64 = 1

    /// Whether the message carries something for the device's extension (media, chart, override or link), and
    /// so an `rp` key.
    public static func isNeeded(for m: PushMessage) -> Bool {
        !m.media.isEmpty || m.chart != nil || m.contentOverride != nil || m.deepLink != nil
    }

    /// The object for a message, or nil when the message carries nothing for the device.
    public static func encode(_ m: PushMessage) -> JSONValue? {
        guard isNeeded(for: m) else { return nil }
        var o: [String: JSONValue] = [:]
        if !m.media.isEmpty {
            o["m"] = .array(
                m.media.map { media in
                    var mo: [String: JSONValue] = ["u": .string(media.url)]
                    if let k = media.kind { mo["k"] = .string(k.rawValue) }
                    if let t = media.mimeType { mo["t"] = .string(t) }
                    if let thumb = media.thumbnail {
                        if let c = thumb.crop {
                            mo["c"] = [.double(c.x), .double(c.y), .double(c.width), .double(c.height)]
                        }
                        if let time = thumb.time { mo["f"] = .double(time) }
                        if thumb.hidden == true { mo["h"] = 1 }
                    }
                    return .object(mo)
                }
            )
        }
        if let chart = m.chart { o["c"] = chart.json }
        if let co = m.contentOverride {
            var oo: [String: JSONValue] = [:]
            if let t = co.title { oo["t"] = .string(t) }
            if let s = co.subtitle { oo["s"] = .string(s) }
            if let b = co.body { oo["b"] = .string(b) }
            if !oo.isEmpty { o["o"] = .object(oo) }
        }
        if let link = m.deepLink { o["l"] = .string(link) }
        guard !o.isEmpty else { return nil }
        // Only with something for the extension to do: a receipt reports what it did.
        if let receipt = m.receiptURL { o["r"] = .string(receipt) }
        if let id = m.id { o["id"] = .string(id) }
        o["v"] = .int(version)
        return .object(o)
    }
}
