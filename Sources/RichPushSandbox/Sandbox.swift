import Crypto
import Foundation
import Logging
import NIOCore
import NIOPosix
import RichPushCore
import RichPushTransport

/// Both emulators and their admin API, started together with one set of credentials: the whole of
/// `richpush sandbox`, usable from Swift.
///
/// ```swift
/// let sandbox = try await Sandbox.start(directory: URL(fileURLWithPath: ".richpush-sandbox"))
/// print(sandbox.summary)                    // endpoints and credential files
/// sandbox.apns.inject(.status(503, reason: "ServiceUnavailable"))
/// await sandbox.stop()
/// ```
public final class Sandbox: Sendable {
    public let credentials: SandboxCredentials
    public let apns: APNsEmulator
    public let fcm: FCMEmulator
    public let webPush: WebPushEmulator
    /// A webhook receiver an app's endpoints may name (`https://127.0.0.1:<port>/hooks/<name>`).
    public let webhooks: WebhookReceiver
    public let files: [String: URL]
    public let adminPort: Int
    /// The folder of the credentials; while the sandbox runs it also holds `sandbox.json`, the ``summary``, so
    /// that a client started later (`richpush send --sandbox DIR`) finds the endpoints.
    public let directory: URL
    let admin: AdminServer
    let group: EventLoopGroup

    public struct Ports: Sendable {
        public var apns = 0
        public var fcm = 0
        public var admin = 0
        public var webPush = 0
        public var webhooks = 0
        public init(apns: Int = 0, fcm: Int = 0, admin: Int = 0, webPush: Int = 0, webhooks: Int = 0) {
            self.webhooks = webhooks
            self.apns = apns
            self.fcm = fcm
            self.admin = admin
            self.webPush = webPush
        }
    }

    init(
        credentials: SandboxCredentials,
        apns: APNsEmulator,
        fcm: FCMEmulator,
        webPush: WebPushEmulator,
        webhooks: WebhookReceiver,
        files: [String: URL],
        directory: URL,
        admin: AdminServer,
        adminPort: Int,
        group: EventLoopGroup
    ) {
        self.credentials = credentials
        self.directory = directory
        self.apns = apns
        self.fcm = fcm
        self.webPush = webPush
        self.webhooks = webhooks
        self.files = files
        self.admin = admin
        self.adminPort = adminPort
        self.group = group
    }

    /// Starts everything on loopback. Credentials are read from `directory` when it holds them, else generated
    /// and written there (so that restarts keep the same keys and CA).
    public static func start(
        directory: URL,
        ports: Ports = Ports(),
        apnsConfiguration: APNsEmulator.Configuration = .init(),
        fcmConfiguration: FCMEmulator.Configuration = .init(),
        webPushConfiguration: WebPushEmulator.Configuration = .init(),
        threads: Int = System.coreCount,
        logger: Logger = .disabled
    ) async throws -> Sandbox {
        let credentials: SandboxCredentials
        if FileManager.default.fileExists(atPath: directory.appendingPathComponent("service-account.json").path) {
            credentials = try SandboxCredentials.read(from: directory)
        } else {
            credentials = try SandboxCredentials.generate()
        }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: max(1, threads))
        var apnsLog = logger
        apnsLog[metadataKey: "emulator"] = "apns"
        var fcmLog = logger
        fcmLog[metadataKey: "emulator"] = "fcm"
        let apns = try APNsEmulator(
            credentials: credentials,
            configuration: apnsConfiguration,
            eventLoopGroup: group,
            logger: apnsLog
        )
        let fcm = try FCMEmulator(
            credentials: credentials,
            configuration: fcmConfiguration,
            eventLoopGroup: group,
            logger: fcmLog
        )
        var webPushLog = logger
        webPushLog[metadataKey: "emulator"] = "webpush"
        let webPush = try WebPushEmulator(
            credentials: credentials,
            configuration: webPushConfiguration,
            eventLoopGroup: group,
            logger: webPushLog
        )
        try await apns.start(port: ports.apns)
        try await fcm.start(port: ports.fcm)
        _ = try await webPush.start(port: ports.webPush)
        var hooksLog = logger
        hooksLog[metadataKey: "emulator"] = "webhooks"
        let webhooks = try WebhookReceiver(credentials: credentials, eventLoopGroup: group, logger: hooksLog)
        _ = try await webhooks.start(port: ports.webhooks)
        let files = try credentials.write(to: directory, tokenURI: fcm.tokenURI)
        let admin = AdminServer(group: group) { method, path, query, body in
            if path.hasPrefix("/webpush/") {
                return Sandbox.route(webPush: webPush, method: method, path: path, query: query, body: body)
            }
            if path.hasPrefix("/webhooks/") {
                return Sandbox.route(webhooks: webhooks, method: method, path: path, query: query, body: body)
            }
            return Sandbox.route(apns: apns, fcm: fcm, method: method, path: path, query: query, body: body)
        }
        let adminPort = try await admin.start(port: ports.admin)
        let sandbox = Sandbox(
            credentials: credentials,
            apns: apns,
            fcm: fcm,
            webPush: webPush,
            webhooks: webhooks,
            files: files,
            directory: directory,
            admin: admin,
            adminPort: adminPort,
            group: group
        )
        try Data(sandbox.summary.prettyPrinted().utf8).write(
            to: directory.appendingPathComponent(summaryFile),
            options: .atomic
        )
        logger.info(
            "sandbox running",
            metadata: [
                "apns_port": "\(apns.port)", "fcm_port": "\(fcm.port)", "webpush_port": "\(webPush.port)",
                "admin_port": "\(adminPort)",
            ]
        )
        return sandbox
    }

    /// The name of the summary file in ``directory``.
    public static let summaryFile = "sandbox.json"

    public func stop() async {
        try? FileManager.default.removeItem(at: directory.appendingPathComponent(Self.summaryFile))
        await admin.stop()
        await apns.stop()
        await fcm.stop()
        await webPush.stop()
        await webhooks.stop()
        try? await group.shutdownGracefully()
    }

    /// What a client needs, as JSON.
    public var summary: JSONValue {
        [
            "apns": [
                "host": "127.0.0.1", "port": .int(Int64(apns.port)), "key_file": .string(files["apns-key"]?.path ?? ""),
                "key_id": .string(credentials.apnsKeyID), "team_id": .string(credentials.apnsTeamID),
                "environment": .string(apns.configuration.environment.rawValue),
            ],
            "fcm": [
                "url": .string("https://127.0.0.1:\(fcm.port)"), "token_uri": .string(fcm.tokenURI),
                "service_account_file": .string(files["service-account"]?.path ?? ""),
                "project_id": .string(credentials.fcmProjectID),
            ],
            "webpush": [
                "url": .string("https://127.0.0.1:\(webPush.port)"),
                "subscribe": .string("http://127.0.0.1:\(adminPort)/webpush/subscriptions"),
            ],
            "webhooks": [
                "url": .string("https://127.0.0.1:\(webhooks.port)/hooks/"),
                "received": .string("http://127.0.0.1:\(adminPort)/webhooks/received"),
            ],
            "ca_file": .string(files["ca"]?.path ?? ""),
            "admin": .string("http://127.0.0.1:\(adminPort)"),
        ]
    }

    static func route(
        apns: APNsEmulator,
        fcm: FCMEmulator,
        method: String,
        path: String,
        query: [String: String],
        body: JSONValue?
    ) -> (Int, JSONValue) {
        // A count from the query: a negative one reads as none (it would trap a suffix), a huge one as all.
        let limit = min(max(0, Int(query["limit"] ?? "") ?? 100), 1_000_000)
        if path.hasPrefix("/apns/") {
            return apnsRoute(apns, method: method, path: path, query: query, limit: limit, body: body)
        }
        if path.hasPrefix("/fcm/") { return fcmRoute(fcm, method: method, path: path, limit: limit, body: body) }
        switch (method, path) {
        case ("GET", "/health"): return (200, ["ok": true])
        case ("DELETE", "/records"):
            apns.resetRecords()
            fcm.resetRecords()
            return (200, ["cleared": true])
        default:
            return (404, ["error": .string("no route \(method) \(path)")])
        }
    }

    /// The APNs emulator's admin routes: what it received, its activities and channels, devices, faults.
    static func apnsRoute(
        _ apns: APNsEmulator,
        method: String,
        path: String,
        query: [String: String],
        limit: Int,
        body: JSONValue?
    ) -> (Int, JSONValue) {
        switch (method, path) {
        case ("GET", "/apns/notifications"):
            let (kept, newest): (Int, [RecordedAPNsNotification])
            if let token = query["token"] {
                let all = apns.recorded(token: token)
                (kept, newest) = (all.count, Array(all.suffix(max(0, limit))))
            } else {
                (kept, newest) = apns.newest(limit)
            }
            return (
                200,
                [
                    "count": .int(Int64(kept)), "accepted_total": .int(Int64(apns.acceptedCount)),
                    "notifications": .array(newest.map(\.json)),
                ]
            )
        case ("GET", "/apns/activities"):
            // What the device shows: every Live Activity, its state, and what it ignored and why.
            let all = apns.activities()
            return (
                200,
                [
                    "count": .int(Int64(all.count)), "activities": .array(all.prefix(max(0, limit)).map(\.json)),
                    "ignored": .object(apns.liveIgnoredCounts.mapValues { .int(Int64($0)) }),
                ]
            )
        case ("GET", "/apns/channels"):
            return (
                200,
                [
                    "channels": .array(
                        apns.channels().prefix(max(0, limit)).map { c in
                            [
                                "id": .string(c.id), "bundle_id": .string(c.bundleID),
                                "message_storage_policy": .int(Int64(c.storagePolicy)),
                                "subscribers": .int(Int64(c.subscribers.count)),
                            ]
                        }
                    )
                ]
            )
        default:
            return apnsControl(apns, method: method, path: path, body: body)
        }
    }

    /// The APNs emulator's routes that change it: tokens and devices registered or gone, faults injected.
    static func apnsControl(_ apns: APNsEmulator, method: String, path: String, body: JSONValue?) -> (Int, JSONValue) {
        switch (method, path) {
        case ("POST", "/apns/push-to-start-tokens"):
            guard let token = body?["token"]?.stringValue, !token.isEmpty else {
                return (400, ["error": "token is required"])
            }
            apns.registerPushToStartToken(token, attributesType: body?["attributes_type"]?.stringValue)
            return (201, ["token": .string(token)])
        case ("GET", "/apns/stats"):
            return (
                200,
                [
                    "accepted": .int(Int64(apns.acceptedCount)),
                    "rejected": .object(apns.rejectedCounts.mapValues { .int(Int64($0)) }),
                ]
            )
        case ("POST", "/apns/devices"):
            guard let token = body?["token"]?.stringValue, let topic = body?["topic"]?.stringValue else {
                return (400, ["error": "token and topic are required"])
            }
            apns.registerDevice(token, topic: topic)
            return (201, ["registered": .string(token)])
        case ("POST", "/apns/devices/unregister"):
            guard let token = body?["token"]?.stringValue else { return (400, ["error": "token is required"]) }
            apns.unregisterDevice(
                token,
                at: body?["timestamp_ms"]?.doubleValue.map { Date(timeIntervalSince1970: $0 / 1000) }
            )
            return (200, ["unregistered": .string(token)])
        case ("POST", "/apns/faults"):
            if let problem = faultNumbersProblem(body) { return (400, ["error": .string(problem)]) }
            guard let fault = apnsFault(body) else {
                return (400, ["error": "kind must be status, goaway, drain, reset, stall, refuse or lower_streams"])
            }
            if let rate = body?["rate"]?.doubleValue {
                apns.inject(fault, rate: rate)
            } else {
                apns.inject(fault, count: Int(body?["count"]?.intValue ?? 1))
            }
            return (201, ["injected": true])
        case ("DELETE", "/apns/faults"):
            apns.clearFaults()
            return (200, ["cleared": true])
        default:
            return (404, ["error": .string("no route \(method) \(path)")])
        }
    }

    /// The FCM emulator's admin routes: what it received, its counts, devices, faults.
    static func fcmRoute(
        _ fcm: FCMEmulator,
        method: String,
        path: String,
        limit: Int,
        body: JSONValue?
    ) -> (Int, JSONValue) {
        switch (method, path) {
        case ("GET", "/fcm/messages"):
            let all = fcm.recorded()
            return (
                200,
                [
                    "count": .int(Int64(all.count)), "accepted_total": .int(Int64(fcm.acceptedCount)),
                    "messages": .array(all.suffix(limit).map(\.json)),
                ]
            )
        case ("GET", "/fcm/stats"):
            return (
                200,
                [
                    "accepted": .int(Int64(fcm.acceptedCount)),
                    "errors": .object(fcm.errorCounts.mapValues { .int(Int64($0)) }),
                    "token_exchanges": .int(Int64(fcm.tokenExchangeCount)),
                ]
            )
        case ("POST", "/fcm/devices/unregister"):
            guard let token = body?["token"]?.stringValue else { return (400, ["error": "token is required"]) }
            fcm.unregister(token: token)
            return (200, ["unregistered": .string(token)])
        case ("POST", "/fcm/faults"):
            if let problem = faultNumbersProblem(body) { return (400, ["error": .string(problem)]) }
            guard let fault = fcmFault(body) else {
                return (400, ["error": "kind must be quota, unavailable, internal, reset, stall or goaway"])
            }
            if let rate = body?["rate"]?.doubleValue {
                fcm.inject(fault, rate: rate)
            } else {
                fcm.inject(fault, count: Int(body?["count"]?.intValue ?? 1))
            }
            return (201, ["injected": true])
        case ("DELETE", "/fcm/faults"):
            fcm.clearFaults()
            return (200, ["cleared": true])
        default:
            return (404, ["error": .string("no route \(method) \(path)")])
        }
    }

    /// The numbers of a fault, each within what it can be (a count summed with others, a status on the wire, a
    /// stream limit sent as 32 bits): a number out of range traps where it is used, so it is refused here.
    static func faultNumbersProblem(_ body: JSONValue?) -> String? {
        let ranges: [(String, ClosedRange<Int64>)] = [
            ("count", 0...1_000_000), ("status", 100...599), ("streams", 0...2_147_483_647),
            ("retry_after", 0...31_536_000),
        ]
        for (key, range) in ranges {
            guard let v = body?[key] else { continue }
            guard let n = v.intValue, range.contains(n) else {
                return "\(key) is a whole number from \(range.lowerBound) to \(range.upperBound)"
            }
        }
        if let v = body?["rate"], !(v.doubleValue.map { (0...1).contains($0) } ?? false) {
            return "rate is a number from 0 to 1"
        }
        return nil
    }

    static func apnsFault(_ body: JSONValue?) -> APNsFault? {
        let retryAfter = body?["retry_after"]?.intValue.map { Int($0) }
        switch body?["kind"]?.stringValue {
        case "status":
            return .status(
                Int(body?["status"]?.intValue ?? 503),
                reason: body?["reason"]?.stringValue ?? "ServiceUnavailable",
                retryAfter: retryAfter
            )
        case "goaway":
            return .goAway(
                reason: body?["reason"]?.stringValue ?? "Shutdown",
                processed: body?["processed"]?.boolValue ?? false
            )
        case "drain": return .drain(reason: body?["reason"]?.stringValue ?? "Shutdown")
        case "reset": return .reset
        case "stall": return .stall
        case "refuse": return .refuseStream
        case "lower_streams": return .lowerStreamLimit(Int(body?["streams"]?.intValue ?? 1))
        default: return nil
        }
    }

    static func fcmFault(_ body: JSONValue?) -> FCMFault? {
        let retryAfter = body?["retry_after"]?.intValue.map { Int($0) }
        switch body?["kind"]?.stringValue {
        case "quota": return .quotaExceeded(retryAfter: retryAfter ?? 60)
        case "unavailable": return .unavailable(retryAfter: retryAfter)
        case "internal": return .internalError
        case "reset": return .reset
        case "stall": return .stall
        case "goaway": return .goAway
        default: return nil
        }
    }
}
