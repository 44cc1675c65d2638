import Foundation
import RichPushCore

/// A Live Activity as the emulated device shows it: what ActivityKit would hold after each push it was sent.
public struct EmulatedActivity: Sendable, Hashable {
    public var id: String
    public var topic: String
    public var attributesType: String?
    public var attributes: [String: JSONValue]?
    public var contentState: [String: JSONValue]?
    /// The timestamp of the state shown; an older one is ignored.
    public var timestamp: Int64
    public var staleDate: Int64?
    public var dismissalDate: Int64?
    public var relevanceScore: Double?
    public var ended: Bool
    /// The token its updates come to (none: started without `input-push-token`, updated by channel only).
    public var updateToken: String?
    /// The broadcast channel it listens to.
    public var channel: String?
    /// The last alert an update or end carried.
    public var lastAlert: JSONValue?
    /// States applied (the start included).
    public var applied: Int
    /// Timestamps of the applied states, in order (at most the last 1,000).
    public var history: [Int64]

    public var json: JSONValue {
        var o: [String: JSONValue] = [
            "id": .string(id), "topic": .string(topic), "timestamp": .int(timestamp), "ended": .bool(ended),
            "applied": .int(Int64(applied)),
        ]
        if let attributesType { o["attributes_type"] = .string(attributesType) }
        if let attributes { o["attributes"] = .object(attributes) }
        if let contentState { o["content_state"] = .object(contentState) }
        if let staleDate { o["stale_date"] = .int(staleDate) }
        if let dismissalDate { o["dismissal_date"] = .int(dismissalDate) }
        if let relevanceScore { o["relevance_score"] = .double(relevanceScore) }
        if let updateToken { o["update_token"] = .string(updateToken) }
        if let channel { o["channel"] = .string(channel) }
        if let lastAlert { o["last_alert"] = lastAlert }
        return .object(o)
    }
}

/// A broadcast channel the emulator keeps for an app.
public struct EmulatedChannel: Sendable, Hashable {
    public var id: String
    public var bundleID: String
    /// 0: no message stored for an offline device; 1: the most recent one stored.
    public var storagePolicy: Int
    public var subscribers: Set<String> = []
}

/// The device side of Live Activities and the channels of broadcast pushes: ActivityKit's rules for what a
/// device applies, shows and ignores.
struct LiveActivityModel {
    /// Activities by id.
    var activities: [String: EmulatedActivity] = [:]
    /// Activity ids by update token.
    var byToken: [String: String] = [:]
    /// Push-to-start tokens and the attributes type each was issued for (none: any).
    var pushToStart: [String: String?] = [:]
    var channels: [String: EmulatedChannel] = [:]
    /// Pushes the device accepted from APNs but did not apply, by reason.
    var ignored: [String: Int] = [:]

    /// Apple's limit of channels per app and environment.
    static let maxChannelsPerApp = 10_000
    static let historyLimit = 1000
    /// The activities one emulator keeps (a flood of starts must not grow it without end): past it a start or an
    /// unknown token's update is ignored as `activity-limit`.
    static let maxActivities = 200_000

    mutating func ignore(_ reason: String) { ignored[reason, default: 0] += 1 }

    /// Applies a push that APNs accepted for `token` (an update token or a push-to-start token).
    mutating func apply(payload: JSONValue, token: String, topic: String, autoRegister: Bool, newToken: () -> String) {
        guard case .object(let aps)? = payload["aps"] else { return ignore("no-aps") }
        guard let eventName = aps["event"]?.stringValue, let event = LiveActivity.Event(rawValue: eventName) else {
            return ignore("no-event")
        }
        guard let timestamp = aps["timestamp"]?.intValue else { return ignore("no-timestamp") }
        if event == .start {
            if let registered = pushToStart[token], let type = registered, type != aps["attributes-type"]?.stringValue {
                return ignore("attributes-type-mismatch")
            }
            if pushToStart[token] == nil && (byToken[token] != nil || !autoRegister) {
                return ignore("not-a-push-to-start-token")
            }
            guard activities.count < Self.maxActivities else { return ignore("activity-limit") }
            start(aps: aps, timestamp: timestamp, topic: topic, newToken: newToken)
            return
        }
        var id = byToken[token]
        if id == nil {
            // An activity the app started itself, whose token the device has handed out.
            guard autoRegister, pushToStart[token] == nil else { return ignore("no-activity") }
            guard activities.count < Self.maxActivities else { return ignore("activity-limit") }
            let new = EmulatedActivity(
                id: UUID().uuidString.lowercased(),
                topic: topic,
                timestamp: 0,
                ended: false,
                updateToken: token,
                applied: 0,
                history: []
            )
            activities[new.id] = new
            byToken[token] = new.id
            id = new.id
        }
        update(id: id!, event: event, aps: aps, timestamp: timestamp)
    }

    private mutating func start(aps: [String: JSONValue], timestamp: Int64, topic: String, newToken: () -> String) {
        guard let type = aps["attributes-type"]?.stringValue, !type.isEmpty else {
            return ignore("start-without-attributes-type")
        }
        guard case .object(let attributes)? = aps["attributes"] else { return ignore("start-without-attributes") }
        guard case .object(let state)? = aps["content-state"] else { return ignore("no-content-state") }
        guard aps["alert"] != nil else { return ignore("start-without-alert") }
        var a = EmulatedActivity(
            id: UUID().uuidString.lowercased(),
            topic: topic,
            attributesType: type,
            attributes: attributes,
            contentState: state,
            timestamp: timestamp,
            staleDate: aps["stale-date"]?.intValue,
            relevanceScore: aps["relevance-score"]?.doubleValue,
            ended: false,
            lastAlert: aps["alert"],
            applied: 1,
            history: [timestamp]
        )
        if aps["input-push-token"]?.intValue == 1 {
            let token = newToken()
            a.updateToken = token
            byToken[token] = a.id
        }
        if let channel = aps["input-push-channel"]?.stringValue {
            if channels[channel] != nil {
                a.channel = channel
                channels[channel]?.subscribers.insert(a.id)
            } else {
                ignore("unknown-input-push-channel")
            }
        }
        activities[a.id] = a
    }

    /// Applies an update or end to one activity, as ActivityKit would.
    mutating func update(id: String, event: LiveActivity.Event, aps: [String: JSONValue], timestamp: Int64) {
        guard var a = activities[id] else { return ignore("no-activity") }
        if a.ended { return ignore("ended") }
        if timestamp < a.timestamp { return ignore("older-timestamp") }
        let state: [String: JSONValue]?
        switch aps["content-state"] {
        case .object(let s)?: state = s
        case nil where event == .end: state = a.contentState
        default: return ignore("no-content-state")
        }
        a.contentState = state
        a.timestamp = timestamp
        if let s = aps["stale-date"]?.intValue { a.staleDate = s }
        if let r = aps["relevance-score"]?.doubleValue { a.relevanceScore = r }
        if let alert = aps["alert"] { a.lastAlert = alert }
        if event == .end {
            a.ended = true
            a.dismissalDate = aps["dismissal-date"]?.intValue
        }
        a.applied += 1
        a.history.append(timestamp)
        if a.history.count > Self.historyLimit { a.history.removeFirst(a.history.count - Self.historyLimit) }
        activities[id] = a
    }

    /// A broadcast: the push applied to every activity listening to the channel.
    mutating func broadcast(payload: JSONValue, channel: String) -> Int {
        guard let c = channels[channel], case .object(let aps)? = payload["aps"] else { return 0 }
        guard let name = aps["event"]?.stringValue, let event = LiveActivity.Event(rawValue: name), event != .start
        else {
            ignore("broadcast-event")
            return c.subscribers.count
        }
        guard let timestamp = aps["timestamp"]?.intValue else {
            ignore("no-timestamp")
            return c.subscribers.count
        }
        for id in c.subscribers.sorted() { update(id: id, event: event, aps: aps, timestamp: timestamp) }
        return c.subscribers.count
    }
}

extension APNsEmulatorLogic {
    /// The request's own `apns-request-id` when it is a UUID, else a new one (as APNs answers).
    static func requestID(_ request: EmulatorRequest) -> String {
        request.header("apns-request-id").flatMap { UUID(uuidString: $0) != nil ? $0.lowercased() : nil }
            ?? RequestID.uuid()
    }

    /// A refusal of a channel or broadcast request, counted by reason.
    func refuse(_ status: Int, _ reason: String, requestID: String) -> EmulatorAction {
        state.reject(reason)
        return .respond(.json(status, ["reason": reason], headers: [("apns-request-id", requestID)]))
    }

    /// `/1/apps/<bundle>/channels` and `/1/apps/<bundle>/all-channels`: create, read, delete and list channels.
    func manageChannels(
        _ request: EmulatorRequest,
        connection: APNsConnectionState,
        control: ConnectionControl
    )
        -> EmulatorAction
    {
        let requestID = Self.requestID(request)
        func answer(_ status: Int, _ body: Any? = nil, _ extra: [(String, String)] = []) -> EmulatorAction {
            let headers = [("apns-request-id", requestID)] + extra
            if let body { return .respond(.json(status, body, headers: headers)) }
            return .respond(EmulatorResponse(status: status, headers: headers))
        }
        func reject(_ status: Int, _ reason: String) -> EmulatorAction { refuse(status, reason, requestID: requestID) }
        let parts = request.path.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        // "", "1", "apps", bundle, "channels" | "all-channels"
        guard parts.count == 5, parts[1] == "1", parts[2] == "apps", !parts[3].isEmpty,
            parts[4] == "channels" || parts[4] == "all-channels"
        else { return reject(404, "BadPath") }
        let bundle = parts[3]
        if let problem = authenticate(request, bundle: bundle, connection: connection, control: control) {
            return reject(problem.0, problem.1)
        }
        if parts[4] == "all-channels" {
            guard request.method == "GET" else { return reject(405, "MethodNotAllowed") }
            let ids = state.data.withLockedValue { d in
                d.live.channels.values.filter { $0.bundleID == bundle }.map(\.id).sorted()
            }
            return answer(200, ["channels": ids])
        }
        switch request.method {
        case "POST":
            guard case .object(let body)? = try? JSONValue.parse(request.body) else {
                return reject(400, "BadRequest")
            }
            guard let policy = body["message-storage-policy"]?.intValue, policy == 0 || policy == 1 else {
                return reject(400, "InvalidPolicy")
            }
            guard body["push-type"]?.stringValue == "LiveActivity" else { return reject(400, "InvalidPushType") }
            let id: String? = state.data.withLockedValue { d in
                guard
                    d.live.channels.values.filter({ $0.bundleID == bundle }).count < LiveActivityModel.maxChannelsPerApp
                else { return nil }
                var bytes = [UInt8](repeating: 0, count: 16)
                for i in bytes.indices { bytes[i] = UInt8.random(in: 0...255) }
                let id = Data(bytes).base64EncodedString()
                d.live.channels[id] = EmulatedChannel(id: id, bundleID: bundle, storagePolicy: Int(policy))
                return id
            }
            guard let id else { return reject(400, "TooManyChannels") }
            return answer(201, nil, [("apns-channel-id", id)])
        case "GET", "DELETE":
            guard let id = request.header("apns-channel-id"), !id.isEmpty else {
                return reject(400, "MissingChannelId")
            }
            let found: EmulatedChannel? = state.data.withLockedValue { d in
                guard let c = d.live.channels[id], c.bundleID == bundle else { return nil }
                if request.method == "DELETE" {
                    d.live.channels[id] = nil
                    for a in c.subscribers { d.live.activities[a]?.channel = nil }
                }
                return c
            }
            guard let found else { return reject(404, "ChannelNotRegistered") }
            if request.method == "DELETE" { return answer(204) }
            return answer(200, ["message-storage-policy": found.storagePolicy, "push-type": "LiveActivity"])
        default:
            return reject(405, "MethodNotAllowed")
        }
    }

    /// `POST /4/broadcasts/apps/<bundle>`: one push to every device listening to a channel.
    func broadcast(
        _ request: EmulatorRequest,
        connection: APNsConnectionState,
        control: ConnectionControl
    )
        -> EmulatorAction
    {
        let requestID = Self.requestID(request)
        func reject(_ status: Int, _ reason: String) -> EmulatorAction { refuse(status, reason, requestID: requestID) }
        guard request.method == "POST" else { return reject(405, "MethodNotAllowed") }
        let bundle = String(request.path.dropFirst("/4/broadcasts/apps/".count))
        guard !bundle.isEmpty, !bundle.contains("/") else { return reject(404, "BadPath") }
        for name in ["apns-channel-id", "apns-push-type", "apns-priority", "apns-expiration", "authorization"]
        where request.count(name) > 1 {
            return reject(400, "DuplicateHeaders")
        }
        guard let channel = request.header("apns-channel-id"), !channel.isEmpty else {
            return reject(400, "MissingChannelId")
        }
        guard request.header("apns-push-type") == "liveactivity" else { return reject(400, "InvalidPushType") }
        var priority = 10
        if let p = request.header("apns-priority") {
            guard let v = Int(p), v == 5 || v == 10 || v == 1 else { return reject(400, "BadPriority") }
            priority = v
        }
        if let e = request.header("apns-expiration"), Int64(e).map({ $0 < 0 }) ?? true {
            return reject(400, "BadExpirationDate")
        }
        if let problem = authenticate(request, bundle: bundle, connection: connection, control: control) {
            return reject(problem.0, problem.1)
        }
        guard !request.body.isEmpty else { return reject(400, "PayloadEmpty") }
        if request.body.count > PushType.liveactivity.payloadLimit { return reject(413, "PayloadTooLarge") }
        guard let payload = try? JSONValue.parse(request.body), case .object = payload else {
            return reject(400, "PayloadEmpty")
        }
        let known = state.data.withLockedValue { d -> Bool in
            guard let c = d.live.channels[channel], c.bundleID == bundle else { return false }
            _ = d.live.broadcast(payload: payload, channel: channel)
            return true
        }
        guard known else { return reject(400, "ChannelNotRegistered") }
        state.record(
            RecordedAPNsNotification(
                apnsID: requestID,
                deviceToken: "",
                topic: bundle + PushType.liveactivity.topicSuffix,
                pushType: "liveactivity",
                priority: priority,
                expiration: request.header("apns-expiration").flatMap { Int64($0) },
                collapseID: nil,
                payload: request.body,
                receivedAt: configuration.now(),
                channelID: channel
            )
        )
        var headers = [("apns-request-id", requestID)]
        if configuration.environment == .sandbox { headers.append(("apns-unique-id", RequestID.uuid())) }
        return .respond(EmulatorResponse(status: 200, headers: headers))
    }
}
