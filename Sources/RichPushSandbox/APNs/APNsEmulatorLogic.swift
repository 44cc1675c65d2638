import Crypto
import Foundation
import RichPushCore
import RichPushTransport

/// One client connection's authentication state, as APNs keeps it.
final class APNsConnectionState {
    var boundTeam: String?
    var boundKey: String?
    var currentToken: String?
    var currentTokenSince: Date?
    /// The verified token and its issue time, so that later requests with it skip decoding.
    var verified: Set<String> = []
    var verifiedIssuedAt: Double = 0
    var limitRaised = false
    let hasClientCertificate: Bool

    init(hasClientCertificate: Bool) { self.hasClientCertificate = hasClientCertificate }
}

/// The request rules of APNs' provider API: method, path, headers, push type and topic, JWT and its
/// connection binding, device registry, payload size.
struct APNsEmulatorLogic: EmulatorLogic {
    let state: APNsEmulatorState
    let configuration: APNsEmulator.Configuration

    var initialMaxConcurrentStreams: Int { configuration.certificateMode ? configuration.maxConcurrentStreams : 1 }
    var responseDelay: ResponseDelay { configuration.responseDelay }

    func makeConnection(hasClientCertificate: Bool) -> APNsConnectionState {
        APNsConnectionState(hasClientCertificate: hasClientCertificate)
    }

    func handle(
        _ request: EmulatorRequest,
        connection: APNsConnectionState,
        control: ConnectionControl
    ) -> EmulatorAction {
        let apnsID =
            request.header("apns-id").flatMap { UUID(uuidString: $0) != nil ? $0.lowercased() : nil }
            ?? RequestID.uuid()
        if let fault = state.nextFault(),
            let action = act(fault, apnsID: apnsID, connection: connection, control: control)
        {
            return action
        }
        if request.path.hasPrefix("/1/apps/") {
            return manageChannels(request, connection: connection, control: control)
        }
        if request.path.hasPrefix("/4/broadcasts/apps/") {
            return broadcast(request, connection: connection, control: control)
        }
        do throws(Refusal) {
            let h = try readHeaders(request)
            if let problem = authenticate(request, bundle: h.bundle, connection: connection, control: control) {
                throw Refusal(problem.0, problem.1)
            }
            try checkDevice(h)
            // The payload.
            guard !request.body.isEmpty else { throw Refusal(400, "PayloadEmpty") }
            if request.body.count > h.pushType.payloadLimit { throw Refusal(413, "PayloadTooLarge") }
            guard case .object(let payload)? = try? JSONValue.parse(request.body) else {
                throw Refusal(400, "PayloadEmpty")
            }
            if h.pushType == .liveactivity { applyLiveActivity(.object(payload), h) }
            state.record(
                RecordedAPNsNotification(
                    apnsID: apnsID,
                    deviceToken: h.token,
                    topic: h.topic,
                    pushType: h.pushType.rawValue,
                    priority: h.priority,
                    expiration: h.expiration,
                    collapseID: request.header("apns-collapse-id"),
                    payload: request.body,
                    receivedAt: configuration.now()
                )
            )
        } catch {
            state.reject(error.reason)
            var body: [String: Any] = ["reason": error.reason]
            if let timestamp = error.timestamp { body["timestamp"] = Int64(timestamp.timeIntervalSince1970 * 1000) }
            return .respond(.json(error.status, body, headers: idHeaders(apnsID)))
        }
        var headers = idHeaders(apnsID)
        if configuration.environment == .sandbox { headers.append(("apns-unique-id", RequestID.uuid())) }
        return .respond(EmulatorResponse(status: 200, headers: headers))
    }

    /// An answer APNs gives with its status and reason (and, for a token gone, when it went).
    struct Refusal: Error {
        var status: Int
        var reason: String
        var timestamp: Date?
        init(_ status: Int, _ reason: String, timestamp: Date? = nil) {
            self.status = status
            self.reason = reason
            self.timestamp = timestamp
        }
    }

    /// A fault the test asked for, acted out; nil when it only changed the connection and the request goes on.
    private func act(
        _ fault: APNsFault,
        apnsID: String,
        connection: APNsConnectionState,
        control: ConnectionControl
    ) -> EmulatorAction? {
        switch fault {
        case let .status(status, reason, retryAfter):
            state.reject(reason)
            var h = idHeaders(apnsID)
            if let r = retryAfter { h.append(("retry-after", String(r))) }
            return .respond(.json(status, ["reason": reason], headers: h))
        case .goAway(let reason, let processed): return .goAway(debugReason: reason, processed: processed)
        case .reset: return .resetConnection
        case .stall: return .stall
        case .refuseStream: return .refuseStream
        case .hostile(let answer):
            return .respond(answer.response(extraHeaders: idHeaders(apnsID)))
        case .drain(let reason):
            control.drain(reason: reason)
            return nil
        case .lowerStreamLimit(let n):
            control.announceMaxConcurrentStreams(n)
            connection.limitRaised = false
            return nil
        }
    }

    /// What a send's request line and headers say, checked as APNs checks them.
    struct SendHeaders {
        /// The device token, in lower case.
        var token: String
        var pushType: PushType
        var topic: String
        /// The topic without the push type's suffix.
        var bundle: String
        var priority: Int
        var expiration: Int64?
    }

    private func readHeaders(_ request: EmulatorRequest) throws(Refusal) -> SendHeaders {
        guard request.method == "POST" else { throw Refusal(405, "MethodNotAllowed") }
        guard request.path.hasPrefix("/3/device/") else { throw Refusal(404, "BadPath") }
        let token = String(request.path.dropFirst("/3/device/".count))
        guard !token.isEmpty else { throw Refusal(400, "MissingDeviceToken") }
        for name in [
            "apns-id", "apns-topic", "apns-push-type", "apns-priority", "apns-expiration", "apns-collapse-id",
            "authorization",
        ]
        where request.count(name) > 1 {
            throw Refusal(400, "DuplicateHeaders")
        }
        if let id = request.header("apns-id"), UUID(uuidString: id) == nil { throw Refusal(400, "BadMessageId") }
        let pushTypeName = request.header("apns-push-type") ?? "alert"
        guard let pushType = PushType(rawValue: pushTypeName) else { throw Refusal(400, "InvalidPushType") }
        guard let topic = request.header("apns-topic"), !topic.isEmpty else { throw Refusal(400, "MissingTopic") }
        if !pushType.topicSuffix.isEmpty && !topic.hasSuffix(pushType.topicSuffix) {
            throw Refusal(400, "TopicDisallowed")
        }
        let bundle = String(topic.dropLast(pushType.topicSuffix.count))
        var priority = 10
        if let p = request.header("apns-priority") {
            guard let v = Int(p), [1, 5, 10].contains(v) else { throw Refusal(400, "BadPriority") }
            priority = v
        }
        if pushType == .background && priority == 10 { throw Refusal(400, "BadPriority") }
        // Live Activity updates go at 5 or 10 (10 counts against the activity's budget).
        if pushType == .liveactivity && priority == 1 { throw Refusal(400, "BadPriority") }
        var expiration: Int64?
        if let e = request.header("apns-expiration") {
            guard let v = Int64(e), v >= 0 else { throw Refusal(400, "BadExpirationDate") }
            expiration = v
        }
        if let c = request.header("apns-collapse-id"), c.utf8.count > 64 { throw Refusal(400, "BadCollapseId") }
        if MessageValidator.apnsTokenProblem(token, strict: configuration.strictTokenLength) != nil {
            throw Refusal(400, "BadDeviceToken")
        }
        return SendHeaders(
            token: token.lowercased(),
            pushType: pushType,
            topic: topic,
            bundle: bundle,
            priority: priority,
            expiration: expiration
        )
    }

    /// The device registry: the token is known (or registered on first use when tokens register themselves), of
    /// this environment and app, and not unregistered.
    private func checkDevice(_ h: SendHeaders) throws(Refusal) {
        let device: APNsEmulatorState.Device? = state.data.withLockedValue { d in
            if let existing = d.devices[h.token] { return existing }
            guard configuration.autoRegisterTokens else { return nil }
            let new = APNsEmulatorState.Device(topic: h.bundle, environment: configuration.environment)
            d.devices[h.token] = new
            return new
        }
        guard let device else { throw Refusal(400, "BadDeviceToken") }
        if device.environment != configuration.environment { throw Refusal(400, "BadDeviceToken") }
        // A token unregistered before it was ever used has no topic: it is gone for any app.
        if !device.topic.isEmpty && device.topic != h.bundle { throw Refusal(400, "DeviceTokenNotForTopic") }
        if let gone = device.unregisteredAt { throw Refusal(410, "Unregistered", timestamp: gone) }
    }

    /// A Live Activity push: the activities it starts, updates or ends, and the update tokens a start issues (device
    /// tokens of the same app).
    private func applyLiveActivity(_ payload: JSONValue, _ h: SendHeaders) {
        let autoRegister = configuration.autoRegisterTokens
        let issue = { () -> String in
            var bytes = [UInt8](repeating: 0, count: 32)
            for i in bytes.indices { bytes[i] = UInt8.random(in: 0...255) }
            return bytes.map { String(format: "%02x", $0) }.joined()
        }
        state.data.withLockedValue { d in
            var issued: [String] = []
            d.live.apply(payload: payload, token: h.token, topic: h.bundle, autoRegister: autoRegister) {
                let t = issue()
                issued.append(t)
                return t
            }
            for t in issued { d.devices[t] = .init(topic: h.bundle, environment: configuration.environment) }
        }
    }

    private func idHeaders(_ id: String) -> [(String, String)] { [("apns-id", id)] }

    /// The connection's credentials for this app: a provider token (whose first success raises the stream
    /// limit) or a client certificate. nil when the request may go on.
    func authenticate(
        _ request: EmulatorRequest,
        bundle: String,
        connection: APNsConnectionState,
        control: ConnectionControl
    ) -> (Int, String)? {
        if configuration.certificateMode {
            return connection.hasClientCertificate ? nil : (403, "MissingProviderToken")
        }
        if let problem = checkToken(request.header("authorization"), bundle: bundle, connection: connection) {
            return problem
        }
        if !connection.limitRaised {
            connection.limitRaised = true
            control.announceMaxConcurrentStreams(configuration.maxConcurrentStreams)
        }
        return nil
    }

    /// The provider-token rules; nil when the token may be used.
    private func checkToken(_ header: String?, bundle: String, connection: APNsConnectionState) -> (Int, String)? {
        guard let header, !header.isEmpty else { return (403, "MissingProviderToken") }
        let parts = header.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer", !parts[1].isEmpty else {
            return (403, "MissingProviderToken")
        }
        let token = String(parts[1])
        let now = configuration.now()
        if token == connection.currentToken, connection.verified.contains(token) {
            return now.timeIntervalSince1970 - connection.verifiedIssuedAt > 3600 ? (403, "ExpiredProviderToken") : nil
        }
        guard let jwt = JWT.Parts(token) else { return (403, "InvalidProviderToken") }
        let jose = jwt.header
        let claims = jwt.claims
        guard jose["alg"] as? String == "ES256", let kid = jose["kid"] as? String, let iss = claims["iss"] as? String
        else {
            return (403, "InvalidProviderToken")
        }
        let key: APNsEmulatorState.Key? = state.data.withLockedValue { $0.keys[kid] }
        guard let key, key.teamID == iss, jwt.verifiesES256(with: key.publicKey) else {
            return (403, "InvalidProviderToken")
        }
        if let env = key.environment, env != configuration.environment { return (403, "BadEnvironmentKeyIdInToken") }
        if let teams = configuration.teamTopics[iss], !teams.contains(bundle) { return (403, "InvalidProviderToken") }
        guard let iat = Self.issuedAt(claims["iat"]) else { return (403, "InvalidProviderToken") }
        if now.timeIntervalSince1970 - iat > 3600 { return (403, "ExpiredProviderToken") }
        if iat - now.timeIntervalSince1970 > 3600 { return (403, "InvalidProviderToken") }
        // One connection, one team and one key.
        if let team = connection.boundTeam, team != iss { return (403, "InvalidProviderToken") }
        if let bound = connection.boundKey, bound != kid { return (403, "UnrelatedKeyIdInToken") }
        if let current = connection.currentToken, current != token, let since = connection.currentTokenSince,
            now.timeIntervalSince(since) < APNsEmulator.minimumTokenInterval
        {
            return (429, "TooManyProviderTokenUpdates")
        }
        connection.boundTeam = iss
        connection.boundKey = kid
        if connection.currentToken != token {
            connection.currentToken = token
            connection.currentTokenSince = now
        }
        connection.verified = [token]
        connection.verifiedIssuedAt = iat
        return nil
    }

    /// `iat` as seconds: a number or a numeric string, and a millisecond value read as milliseconds.
    static func issuedAt(_ value: Any?) -> Double? {
        var v: Double?
        if let n = value as? NSNumber { v = n.doubleValue } else if let s = value as? String { v = Double(s) }
        guard let raw = v else { return nil }
        return raw > 1e12 ? raw / 1000 : raw
    }
}
