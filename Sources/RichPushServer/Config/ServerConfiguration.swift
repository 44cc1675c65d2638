import Foundation
import RichPushCore

/// How `richpush serve` runs: from a JSON file, then `RICHPUSH_*` environment variables, then flags, each
/// overriding the one before. With nothing given it runs on `richpush.sqlite` with the sandbox on.
///
/// ```json
/// {"database": "richpush.sqlite", "host": "0.0.0.0", "port": 8080, "public_url": "https://push.example.com",
///  "rate_limit": 200, "lease_seconds": 60, "workers": {"batch_size": 200, "concurrency": 200, "lanes": 2,
///  "in_flight_per_app": 150, "in_flight_per_origin": 150},
///  "sandbox": {"enabled": false}, "media": {"directory": "richpush-media", "cache_megabytes": 64}}
/// ```
public struct ServerConfiguration: Sendable, Equatable {
    /// An SQLite file, or a PostgreSQL URL (`postgres://USER:PASSWORD@HOST:PORT/DB?sslmode=require`) that any
    /// number of nodes share.
    public var database = "richpush.sqlite"
    /// This node's id among the nodes of one PostgreSQL database (default: host, process id and a random part).
    public var nodeID: String?
    public var host = "127.0.0.1"
    public var port = 8080
    /// Read from the file, `RICHPUSH_ADMIN_KEY` or `--admin-key`; generated and printed once when none is given.
    public var adminKey: String?
    /// The address devices reach this server at (for hosted media and chart images); default `http://host:port`.
    public var publicURL: String?
    public var rateLimit: Double = 200
    public var leaseSeconds: Double = 60
    /// Webhooks: whether this node sends them, how long a receiver has to answer, and how many endpoints the node
    /// sends to at once (`webhooks.enabled`, `webhooks.timeout_seconds`, `webhooks.endpoints_in_flight`).
    public var webhooksEnabled = true
    public var webhookTimeoutSeconds: Double = 15
    public var webhookEndpointsInFlight = 32
    /// `live.token` events that public callers (the public key) may cause per app, a second on average
    /// (`webhooks.public_events_per_second`; bursts of a thousand times that). Past it the registration is kept and
    /// its event is not written: a page or app holding the public key cannot fill the outbox.
    public var webhookPublicEventsPerSecond: Double = 20
    public var batchSize = 200
    public var concurrency = 200
    /// Workers that claim and send side by side, sharing `concurrency` between them.
    public var lanes = 2
    /// Deliveries one app may hold on this node at once (`workers.in_flight_per_app`; default nine tenths of what
    /// the workers hold: `concurrency` in flight and each worker's reserve of half a claim): another app's send
    /// always finds a slot.
    public var inFlightPerApp: Int?
    /// Sends in flight at once from this node to one push service origin (`workers.in_flight_per_origin`; default
    /// nine tenths of `concurrency`): a push service that stops answering holds no more than these.
    public var inFlightPerOrigin: Int?

    /// What the node's workers keep claimed and ready beside their sends in flight, all lanes together (each
    /// keeps half of what one claim takes: see ``DeliveryWorker/Configuration``).
    var workerReserves: Int {
        let lanes = max(1, min(self.lanes, concurrency))
        return (1...lanes).reduce(0) { sum, lane in
            let c = concurrency / lanes + (lane <= concurrency % lanes ? 1 : 0)
            return sum + DeliveryWorker.Configuration(batchSize: batchSize, concurrency: c).claimThreshold
        }
    }

    /// The node's bounds as they apply.
    public var admissionLimits: DeliveryAdmission.Limits {
        let defaults = DeliveryAdmission.Limits.defaults(concurrency: concurrency, reserve: workerReserves)
        return DeliveryAdmission.Limits(
            perApp: inFlightPerApp ?? defaults.perApp,
            perOrigin: inFlightPerOrigin ?? defaults.perOrigin
        )
    }
    /// In sandbox mode every provider request goes to the emulators (started in this process, or a running
    /// `richpush sandbox` when the ports are given), and apps without credentials use the sandbox's.
    public var sandbox = true
    public var sandboxDirectory = ".richpush-sandbox"
    /// Lets sandbox mode listen on an address other machines reach (`--sandbox-public`).
    public var sandboxPublic = false
    public var externalSandboxAPNsPort: Int?
    public var externalSandboxFCMPort: Int?
    /// Where hosted media is stored; default `richpush-media` beside the database.
    public var mediaDirectory: String?
    public var mediaCacheMegabytes = 64
    /// Days hosted media is kept after the last moment a device may fetch it (its notification's TTL, or 28 days);
    /// 0 keeps it for ever.
    public var mediaRetentionDays: Double = 7
    /// Days a notification is kept, with its deliveries and receipts, once all its deliveries have ended (the
    /// outcome, the console's list and idempotency keys reach back this far); 0 keeps them for ever.
    public var notificationRetentionDays: Double = 30
    /// The address devices fetch hosted media from (a CDN in front of `/media/`); default the public URL.
    public var mediaPublicURL: String?
    /// Give each rich notification a receipt address (`rp.r`) the device library posts its report to. On by
    /// default, but only used where devices can reach the server: in sandbox mode, or with a `public_url`.
    public var receipts = true
    /// Priority-10 Live Activity updates one activity (or one broadcast channel) may get in an hour before the
    /// rest go at priority 5 (`live.priority10_per_hour`; nil: no budget). Apple budgets them on the device and
    /// publishes no number: set the figure your app's activities need.
    public var livePriority10PerHour: Int?
    /// The file holding the key provider credentials are sealed with in the database; default the database's
    /// path with `.key` added. Made (readable by its owner only) on first start.
    public var credentialsKeyFile: String?
    /// What one app may make a node spend on media: `quotas.upload_megabytes_per_day` (default 1024),
    /// `quotas.fetches_per_app` at once (8) and `quotas.fetches` at once for the node (64).
    public var quotas = Quotas.Limits()
    /// Requests a second one client address may make with an app's public key (the `register` scope alone),
    /// bursts of ten times as many (`public_rate_per_client`).
    public var publicRatePerClient: Double = 10
    /// The operator's proxies and load balancers (`trusted_proxies`: addresses or CIDR ranges): requests from them
    /// are counted under the client they forwarded for (`X-Forwarded-For`, `Forwarded`), not under the proxy.
    public var trustedProxies = TrustedProxies()
    /// Connections one client address may hold (`connections.per_client`, 1,024), the node may hold
    /// (`connections.max`, its descriptor limit less 1,024, at most 65,536) and how long one may stay idle
    /// (`connections.idle_seconds`, 30).
    public var connections = ConnectionLimits.Limits()
    /// Writes are refused (507) while the disk holding the database or the hosted media has less free space
    /// than this (`disk.min_free_megabytes`); reads and deliveries already accepted go on. 0 turns it off.
    public var minFreeDiskMegabytes: Double = 512
    /// What the registry keeps (`registrations.devices_per_app` 5,000,000, `devices_per_user` 20,
    /// `live_tokens_per_app` 5,000,000, `live_tokens_per_user` 20, `live_tokens_per_activity` 1,000 and at most
    /// 10,000, the tokens one send may name), counted in the database whatever the number of nodes.
    public var registrations = RegistrationLimits()
    /// Versions one notification may have (`updates.max_versions`, default 100) and how fast updates to it may come
    /// (`updates.per_second`, 2, with bursts of `updates.burst`, 10), counted in the database.
    public var updates = UpdateLimits()
    /// Live views (`…/notifications/{id}/events`) a node holds: `insight.max_views` (1,000), one app's keys together
    /// `insight.max_views_per_app` (100), one key `insight.max_views_per_key` (50), one notification
    /// `insight.max_views_per_notification` (200).
    public var insightViews = InsightStreams.Limits()

    /// The credentials key file in use: beside an SQLite file, or `richpush-credentials.key` in the working folder
    /// for PostgreSQL (every node of a cluster needs a copy of the same key).
    public var resolvedCredentialsKeyFile: String {
        credentialsKeyFile ?? (isPostgres ? "richpush-credentials.key" : database + ".key")
    }

    /// Whether the database is PostgreSQL (else an SQLite file).
    public var isPostgres: Bool { PostgresSettings.isPostgresURL(database) }

    public init() {}

    /// Whether notifications carry receipt addresses.
    public var receiptsEnabled: Bool { receipts && (sandbox || publicURL != nil) }

    /// A configuration problem, naming the key and the rule.
    public struct Problem: Error, CustomStringConvertible {
        public var key: String
        public var rule: String
        public var description: String { "configuration: \(key): \(rule)" }
    }

    static let keys: [String: Set<String>] = [
        "": [
            "database", "node_id", "host", "port", "admin_key", "public_url", "rate_limit", "lease_seconds", "workers",
            "sandbox", "media", "receipts", "credentials_key_file", "notifications", "quotas", "live",
            "public_rate_per_client", "trusted_proxies", "disk", "registrations", "updates", "insight",
            "connections", "webhooks",
        ],
        "webhooks": ["enabled", "timeout_seconds", "endpoints_in_flight", "public_events_per_second"],
        "registrations": [
            "devices_per_app", "devices_per_user", "live_tokens_per_app", "live_tokens_per_user",
            "live_tokens_per_activity",
        ],
        "disk": ["min_free_megabytes"],
        "connections": ["per_client", "max", "idle_seconds"],
        "updates": ["max_versions", "per_second", "burst"],
        "insight": ["max_views", "max_views_per_app", "max_views_per_key", "max_views_per_notification"],
        "live": ["priority10_per_hour"],
        "quotas": ["upload_megabytes_per_day", "fetches_per_app", "fetches"],
        "notifications": ["retention_days"],
        "workers": ["batch_size", "concurrency", "lanes", "in_flight_per_app", "in_flight_per_origin"],
        "sandbox": ["enabled", "directory", "apns_port", "fcm_port"],
        "media": ["directory", "cache_megabytes", "public_url", "retention_days"],
    ]

    /// Applies a JSON configuration file's text; unknown keys and wrong types are errors.
    /// `checking` false: the combination is checked later, by the caller, once every source is applied (the serve
    /// command: a flag may mend what the file or the environment alone would not pass).
    public mutating func apply(json text: String, checking: Bool = true) throws {
        let root: JSONValue
        do { root = try JSONValue.parse(text) } catch { throw Problem(key: "(file)", rule: "not JSON: \(error)") }
        guard case .object(let o) = root else {
            throw Problem(key: "(file)", rule: "the file must hold one JSON object")
        }
        try Self.checkKeys(o, section: "")
        let file = ConfigObject(fields: o, path: "")
        try applyServer(file)
        try applyLimits(file)
        try applyStorage(file)
        if checking { try check() }
    }

    /// The keys at the top of the file: where the server listens, who it trusts, its keys.
    private mutating func applyServer(_ o: ConfigObject) throws {
        if let s = try o.string("database") { database = s }
        if let s = try o.string("node_id") { nodeID = s }
        if let s = try o.string("host") { host = s }
        if let p = try o.int("port", 0...65535) { port = p }
        if let s = try o.string("admin_key") { adminKey = s }
        if let s = try o.string("public_url") { publicURL = s }
        if let r = try o.number("rate_limit", 0.001...10_000_000) { rateLimit = r }
        if let l = try o.number("lease_seconds", 1...3600) { leaseSeconds = l }
        if let r = try o.number("public_rate_per_client", 0.001...1_000_000) { publicRatePerClient = r }
        if let t = o.fields["trusted_proxies"] {
            guard let list = t.arrayValue, list.count <= 1000 else {
                throw Problem(key: "trusted_proxies", rule: "must be an array of at most 1,000 addresses or ranges")
            }
            let entries = try list.map { v -> String in
                guard let s = v.stringValue else {
                    throw Problem(key: "trusted_proxies", rule: "each entry is a string such as 10.0.0.0/8")
                }
                return s
            }
            let (proxies, problem) = TrustedProxies.parse(entries)
            guard let proxies else { throw Problem(key: "trusted_proxies", rule: problem ?? "not a range") }
            trustedProxies = proxies
        }
        if let s = try o.string("credentials_key_file") { credentialsKeyFile = s }
        if let b = try o.bool("receipts") { receipts = b }
    }

    /// The bounds: connections, disk, workers, Live Activities, updates, live views, quotas, registrations.
    private mutating func applyLimits(_ o: ConfigObject) throws {
        if let c = try o.section("connections") {
            if let n = try c.int("per_client", 1...1_000_000) { connections.perClient = n }
            if let n = try c.int("max", 1...10_000_000) { connections.total = n }
            if let n = try c.number("idle_seconds", 1...3_600) { connections.idleSeconds = n }
        }
        if let d = try o.section("disk"), let m = try d.number("min_free_megabytes", 0...100_000_000) {
            minFreeDiskMegabytes = m
        }
        if let w = try o.section("workers") {
            if let n = try w.int("batch_size", 1...10_000) { batchSize = n }
            if let n = try w.int("concurrency", 1...10_000) { concurrency = n }
            if let n = try w.int("lanes", 1...16) { lanes = n }
            if let n = try w.int("in_flight_per_app", 1...10_000) { inFlightPerApp = n }
            if let n = try w.int("in_flight_per_origin", 1...10_000) { inFlightPerOrigin = n }
        }
        if let w = try o.section("webhooks") {
            if let b = try w.bool("enabled") { webhooksEnabled = b }
            if let t = try w.number("timeout_seconds", 0.1...120) { webhookTimeoutSeconds = t }
            if let n = try w.int("endpoints_in_flight", 1...10_000) { webhookEndpointsInFlight = n }
            if let r = try w.number("public_events_per_second", 0.001...1_000_000) { webhookPublicEventsPerSecond = r }
        }
        if let l = try o.section("live"), let n = try l.int("priority10_per_hour", 1...100_000) {
            livePriority10PerHour = n
        }
        if let u = try o.section("updates") {
            if let n = try u.int("max_versions", 1...1_000_000) { updates.maxVersions = n }
            if let r = try u.number("per_second", 0.001...1_000) { updates.perSecond = r }
            if let b = try u.number("burst", 1...1_000_000) { updates.burst = b }
        }
        if let i = try o.section("insight") {
            if let n = try i.int("max_views", 1...1_000_000) { insightViews.node = n }
            if let n = try i.int("max_views_per_app", 1...1_000_000) { insightViews.perApp = n }
            if let n = try i.int("max_views_per_key", 1...1_000_000) { insightViews.perKey = n }
            if let n = try i.int("max_views_per_notification", 1...1_000_000) { insightViews.perNotification = n }
        }
        if let q = try o.section("quotas") {
            if let mb = try q.number("upload_megabytes_per_day", 0...10_000_000) {
                quotas.uploadBytesPerDay = Int(mb * 1_048_576)
            }
            if let n = try q.int("fetches_per_app", 1...10_000) { quotas.fetchesPerApp = n }
            if let n = try q.int("fetches", 1...100_000) { quotas.fetches = n }
        }
        if let g = try o.section("registrations") {
            if let n = try g.int("devices_per_app", 1...1_000_000_000) { registrations.devicesPerApp = n }
            if let n = try g.int("devices_per_user", 1...10_000) { registrations.devicesPerUser = n }
            if let n = try g.int("live_tokens_per_app", 1...1_000_000_000) { registrations.liveTokensPerApp = n }
            if let n = try g.int("live_tokens_per_user", 1...10_000) { registrations.liveTokensPerUser = n }
            // An activity's tokens are all named in one update: at most what one send may name.
            if let n = try g.int("live_tokens_per_activity", 1...10_000) { registrations.liveTokensPerActivity = n }
        }
    }

    /// What is kept and where: notifications, the sandbox, hosted media.
    private mutating func applyStorage(_ o: ConfigObject) throws {
        if let n = try o.section("notifications"), let r = try n.number("retention_days", 0...36_500) {
            notificationRetentionDays = r
        }
        if let s = try o.section("sandbox") {
            if let b = try s.bool("enabled") { sandbox = b }
            if let d = try s.string("directory") { sandboxDirectory = d }
            if let p = try s.int("apns_port", 1...65535) { externalSandboxAPNsPort = p }
            if let p = try s.int("fcm_port", 1...65535) { externalSandboxFCMPort = p }
        }
        if let m = try o.section("media") {
            if let d = try m.string("directory") { mediaDirectory = d }
            if let c = try m.int("cache_megabytes", 0...65536) { mediaCacheMegabytes = c }
            if let u = try m.string("public_url") { mediaPublicURL = u }
            if let r = try m.number("retention_days", 0...36_500) { mediaRetentionDays = r }
        }
    }

    /// One object of the configuration file, read key by key with each value's rule; an error names the key with
    /// its section (`workers.lanes`).
    struct ConfigObject {
        let fields: [String: JSONValue]
        /// The section's name ("" at the top of the file).
        let path: String

        func name(_ key: String) -> String { path.isEmpty ? key : path + "." + key }

        func string(_ key: String) throws -> String? {
            guard let v = fields[key] else { return nil }
            guard let s = v.stringValue, !s.isEmpty else {
                throw Problem(key: name(key), rule: "must be a non-empty string")
            }
            return s
        }

        func number(_ key: String, _ range: ClosedRange<Double>) throws -> Double? {
            guard let v = fields[key] else { return nil }
            guard let d = v.doubleValue, range.contains(d) else {
                throw Problem(key: name(key), rule: "must be a number from \(range.lowerBound) to \(range.upperBound)")
            }
            return d
        }

        /// A whole number within `range` (whose bounds are well inside `Int`); a fraction is refused, not dropped.
        func int(_ key: String, _ range: ClosedRange<Double>) throws -> Int? {
            guard let v = fields[key] else { return nil }
            guard let d = v.doubleValue, d.rounded() == d, range.contains(d) else {
                throw Problem(
                    key: name(key),
                    rule: "must be a whole number from \(Int(range.lowerBound)) to \(Int(range.upperBound))"
                )
            }
            return Int(d)
        }

        func bool(_ key: String) throws -> Bool? {
            guard let v = fields[key] else { return nil }
            guard case .bool(let b) = v else { throw Problem(key: name(key), rule: "must be true or false") }
            return b
        }

        /// The section `key`: an object whose keys are all known (``ServerConfiguration/keys``); nil when absent.
        func section(_ key: String) throws -> ConfigObject? {
            guard let v = fields[key] else { return nil }
            guard case .object(let o) = v else { throw Problem(key: name(key), rule: "must be an object") }
            try ServerConfiguration.checkKeys(o, section: name(key))
            return ConfigObject(fields: o, path: name(key))
        }
    }

    static func checkKeys(_ o: [String: JSONValue], section: String) throws {
        let known = keys[section] ?? []
        if let unknown = o.keys.sorted().first(where: { !known.contains($0) }) {
            throw Problem(
                key: section.isEmpty ? unknown : section + "." + unknown,
                rule: "unknown key (known: \(known.sorted().joined(separator: ", ")))"
            )
        }
    }

    /// Applies `RICHPUSH_DATABASE`, `_HOST`, `_PORT`, `_ADMIN_KEY`, `_PUBLIC_URL`, `_RATE_LIMIT`, `_SANDBOX` (1/0),
    /// `_RECEIPTS` (1/0), `_CREDENTIALS_KEY_FILE`.
    public mutating func apply(environment env: [String: String], checking: Bool = true) throws {
        if let v = env["RICHPUSH_DATABASE"], !v.isEmpty { database = v }
        if let v = env["RICHPUSH_NODE_ID"], !v.isEmpty { nodeID = v }
        if let v = env["RICHPUSH_HOST"], !v.isEmpty { host = v }
        if let v = env["RICHPUSH_PORT"] {
            guard let p = Int(v), (0...65535).contains(p) else {
                throw Problem(key: "RICHPUSH_PORT", rule: "must be a port number")
            }
            port = p
        }
        if let v = env["RICHPUSH_ADMIN_KEY"], !v.isEmpty { adminKey = v }
        if let v = env["RICHPUSH_PUBLIC_URL"], !v.isEmpty { publicURL = v }
        if let v = env["RICHPUSH_RATE_LIMIT"] {
            guard let r = Double(v), r > 0 else {
                throw Problem(key: "RICHPUSH_RATE_LIMIT", rule: "must be a positive number")
            }
            rateLimit = r
        }
        if let v = env["RICHPUSH_CREDENTIALS_KEY_FILE"], !v.isEmpty { credentialsKeyFile = v }
        if let v = env["RICHPUSH_RECEIPTS"] {
            switch v.lowercased() {
            case "1", "true", "on", "yes": receipts = true
            case "0", "false", "off", "no": receipts = false
            default: throw Problem(key: "RICHPUSH_RECEIPTS", rule: "must be 1 or 0")
            }
        }
        if let v = env["RICHPUSH_SANDBOX"] {
            switch v.lowercased() {
            case "1", "true", "on", "yes": sandbox = true
            case "0", "false", "off", "no": sandbox = false
            default: throw Problem(key: "RICHPUSH_SANDBOX", rule: "must be 1 or 0")
            }
        }
        if checking { try check() }
    }

    /// Rules across keys.
    public func check() throws {
        if (externalSandboxAPNsPort == nil) != (externalSandboxFCMPort == nil) {
            throw Problem(key: "sandbox", rule: "give both apns_port and fcm_port, or neither")
        }
        if let u = publicURL {
            guard let url = URL(string: u), url.scheme == "http" || url.scheme == "https", url.host != nil else {
                throw Problem(key: "public_url", rule: "must be an http(s) URL")
            }
        }
        if let u = mediaPublicURL {
            guard let url = URL(string: u), url.scheme == "http" || url.scheme == "https", url.host != nil else {
                throw Problem(key: "media.public_url", rule: "must be an http(s) URL")
            }
        }
        if adminKey.map({ $0.count < 16 }) == true {
            throw Problem(key: "admin_key", rule: "must be at least 16 characters")
        }
        if isPostgres {
            do { _ = try PostgresSettings(url: database) } catch {
                throw Problem(key: "database", rule: error.description)
            }
        }
        if let id = nodeID,
            id.isEmpty || id.count > 100
                || !id.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "-_.".contains($0)) })
        {
            throw Problem(key: "node_id", rule: "1 to 100 letters, digits, - _ and .")
        }
        // Flags and the environment reach here without the file's range checks; the values feed conversions.
        if !(0.001...10_000_000).contains(rateLimit) {
            throw Problem(key: "rate_limit", rule: "must be 0.001...10000000 requests a second")
        }
        if !(0.001...1_000_000).contains(publicRatePerClient) {
            throw Problem(key: "public_rate_per_client", rule: "must be 0.001...1000000 requests a second")
        }
        if !(1...3600).contains(leaseSeconds) { throw Problem(key: "lease_seconds", rule: "must be 1...3600 seconds") }
        if let n = inFlightPerApp, !(1...10_000).contains(n) {
            throw Problem(key: "workers.in_flight_per_app", rule: "must be 1...10000 deliveries")
        }
        if let n = inFlightPerOrigin, !(1...10_000).contains(n) {
            throw Problem(key: "workers.in_flight_per_origin", rule: "must be 1...10000 sends")
        }
        if !(0...65535).contains(port) { throw Problem(key: "port", rule: "must be a port number (0...65535)") }
        if sandbox && !sandboxPublic && !Self.isLoopback(host) {
            throw Problem(
                key: "host",
                rule: "sandbox mode listens on loopback only (\(host) given): it fetches media from any "
                    + "address; turn sandbox mode off, or pass --sandbox-public to force it"
            )
        }
    }

    /// True for a name or address that only this machine reaches.
    public static func isLoopback(_ host: String) -> Bool {
        let h = host.lowercased()
        if h == "localhost" || h == "::1" || h == "[::1]" { return true }
        let parts = h.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { UInt8($0) != nil }
    }

    /// The media folder in use.
    public var resolvedMediaDirectory: String {
        mediaDirectory
            ?? (isPostgres
                ? "richpush-media"
                : URL(fileURLWithPath: database).deletingLastPathComponent().appendingPathComponent("richpush-media")
                    .path)
    }

    /// The address devices fetch hosted media from.
    public func mediaBase(boundPort: Int) -> String {
        if let u = mediaPublicURL { return u.hasSuffix("/") ? String(u.dropLast()) : u }
        return publicBase(boundPort: boundPort)
    }

    /// The address devices reach this server at.
    public func publicBase(boundPort: Int) -> String {
        if let u = publicURL { return u.hasSuffix("/") ? String(u.dropLast()) : u }
        let h = host == "0.0.0.0" || host == "::" ? "127.0.0.1" : host
        return "http://\(h):\(boundPort)"
    }
}
