import Foundation
import RichPushCore
import RichPushTransport

final class FCMConnectionState {}

/// Google's OAuth token endpoint for service accounts, and FCM's `messages:send`.
struct FCMEmulatorLogic: EmulatorLogic {
    let state: FCMEmulatorState
    let configuration: FCMEmulator.Configuration

    var initialMaxConcurrentStreams: Int { 1000 }
    var responseDelay: ResponseDelay { configuration.responseDelay }

    func makeConnection(hasClientCertificate: Bool) -> FCMConnectionState { FCMConnectionState() }

    func handle(
        _ request: EmulatorRequest,
        connection: FCMConnectionState,
        control: ConnectionControl
    ) -> EmulatorAction {
        let path = String(request.path.split(separator: "?", maxSplits: 1).first ?? "")
        if path == "/token" || path == "/oauth2/token" || path == "/o/oauth2/token" { return tokenEndpoint(request) }
        guard path.hasPrefix("/v1/projects/"), path.hasSuffix("/messages:send") else {
            return .respond(googleError(404, "NOT_FOUND", "The requested URL was not found on this server."))
        }
        guard request.method == "POST" else {
            return .respond(googleError(405, "INVALID_ARGUMENT", "Method not allowed"))
        }
        let project = String(path.dropFirst("/v1/projects/".count).dropLast("/messages:send".count))
        return send(request, project: project)
    }

    // MARK: OAuth

    private func tokenEndpoint(_ request: EmulatorRequest) -> EmulatorAction {
        func oauthError(_ error: String, _ description: String) -> EmulatorAction {
            state.count(error: error)
            return .respond(.json(400, ["error": error, "error_description": description]))
        }
        let form = Self.parseForm(String(decoding: request.body, as: UTF8.self))
        guard form["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer" else {
            return oauthError("unsupported_grant_type", "Invalid grant_type: \(form["grant_type"] ?? "")")
        }
        guard let assertion = form["assertion"], let jwt = JWT.Parts(assertion) else {
            return oauthError("invalid_request", "Invalid JWT: malformed")
        }
        let claims = jwt.claims
        guard jwt.header["alg"] as? String == "RS256", let iss = claims["iss"] as? String else {
            return oauthError("invalid_grant", "Invalid JWT Signature.")
        }
        guard let account = state.data.withLockedValue({ $0.accounts[iss] }), jwt.verifiesRS256(with: account.publicKey)
        else {
            return oauthError("invalid_grant", "Invalid JWT Signature.")
        }
        let now = configuration.now().timeIntervalSince1970
        guard let iat = (claims["iat"] as? NSNumber)?.doubleValue, let exp = (claims["exp"] as? NSNumber)?.doubleValue,
            exp - iat <= 3600 + 60, iat <= now + 300, exp > now
        else {
            return oauthError(
                "invalid_grant",
                "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim."
            )
        }
        guard let aud = claims["aud"] as? String, aud.hasSuffix("/token") else {
            return oauthError("invalid_grant", "Invalid JWT: Failed audience check.")
        }
        let scopes = (claims["scope"] as? String ?? "").split(separator: " ")
        guard
            scopes.contains(where: { $0.hasSuffix("/auth/firebase.messaging") || $0.hasSuffix("/auth/cloud-platform") })
        else {
            return oauthError("invalid_scope", "Invalid OAuth scope or ID token audience provided.")
        }
        let token = "ya29.sandbox-" + UUID().uuidString.lowercased()
        state.data.withLockedValue { d in
            d.accessTokens[token] = (iss, configuration.now().addingTimeInterval(configuration.accessTokenLifetime))
            d.tokenExchanges += 1
        }
        return .respond(
            .json(
                200,
                ["access_token": token, "expires_in": Int(configuration.accessTokenLifetime), "token_type": "Bearer"]
            )
        )
    }

    static func parseForm(_ s: String) -> [String: String] {
        var out: [String: String] = [:]
        for pair in s.split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1)
            let key = String(kv[0]).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String(kv[0])
            let value =
                kv.count > 1
                ? (String(kv[1]).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String(kv[1])) : ""
            out[key] = value
        }
        return out
    }

    // MARK: messages:send

    private func send(_ request: EmulatorRequest, project: String) -> EmulatorAction {
        if let fault = state.nextFault() { return act(fault) }
        // Authentication: a bearer token this endpoint issued, alive, for an account with rights on the project.
        let now = configuration.now()
        if let refusal = checkCaller(request, project: project, now: now) { return .respond(refusal) }

        guard case .object(let root)? = try? JSONValue.parse(request.body) else {
            return .respond(badRequest([.init(field: "", description: "Invalid JSON payload received.")]))
        }
        for key in root.keys where !["message", "validate_only", "validateOnly"].contains(key) {
            return .respond(
                badRequest([
                    .init(
                        field: "",
                        description: "Invalid JSON payload received. Unknown name \"\(key)\": Cannot find field."
                    )
                ])
            )
        }
        guard case .object(let message)? = root["message"] else {
            return .respond(badRequest([.init(field: "message", description: "Message must be set")]))
        }
        let validateOnly = (root["validate_only"] ?? root["validateOnly"])?.boolValue ?? false
        let (target, violations) = FCMMessageValidator.validate(message)
        if !violations.isEmpty { return .respond(badRequest(violations)) }
        guard let target else { return .respond(badRequest([.init(field: "message", description: "No target")])) }

        if case .token(let token) = target, let refusal = checkDevice(token, project: project) {
            return .respond(refusal)
        }
        if let quota = checkQuota(project: project, target: target) { return .respond(quota) }
        if validateOnly { return .respond(.json(200, ["name": "projects/\(project)/messages/fake_message_id"])) }
        let name = "projects/\(project)/messages/\(UInt64.random(in: 1_000_000_000_000...9_999_999_999_999_999))"
        state.record(
            RecordedFCMMessage(name: name, project: project, target: target, message: .object(message), receivedAt: now)
        )
        return .respond(.json(200, ["name": name]))
    }

    /// A fault the test asked for, acted out.
    private func act(_ fault: FCMFault) -> EmulatorAction {
        switch fault {
        case .quotaExceeded(let r):
            return .respond(
                fcmError(
                    429,
                    "RESOURCE_EXHAUSTED",
                    "Quota exceeded for quota metric 'Messages'.",
                    code: "QUOTA_EXCEEDED",
                    headers: [("retry-after", String(r))]
                )
            )
        case .unavailable(let r):
            return .respond(
                fcmError(
                    503,
                    "UNAVAILABLE",
                    "The service is currently unavailable.",
                    code: "UNAVAILABLE",
                    headers: r.map { [("retry-after", String($0))] } ?? []
                )
            )
        case .internalError:
            return .respond(fcmError(500, "INTERNAL", "Internal error encountered.", code: "INTERNAL"))
        case .reset: return .resetConnection
        case .stall: return .stall
        case .goAway: return .goAway(debugReason: "maintenance", processed: false)
        case .hostile(let answer): return .respond(answer.response(extraHeaders: []))
        }
    }

    /// The caller's bearer token (issued here, alive) and its account's right to send for the project; the refusal
    /// when either fails.
    private func checkCaller(_ request: EmulatorRequest, project: String, now: Date) -> EmulatorResponse? {
        let auth = request.header("authorization") ?? ""
        let parts = auth.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer",
            let issued = state.data.withLockedValue({ $0.accessTokens[String(parts[1])] }), issued.expires > now
        else {
            state.count(error: "UNAUTHENTICATED")
            return googleError(
                401,
                "UNAUTHENTICATED",
                "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.",
                headers: [
                    ("www-authenticate", #"Bearer realm="https://accounts.google.com/", error="invalid_token""#)
                ]
            )
        }
        let allowed = state.data.withLockedValue { $0.accounts[issued.email]?.projects.contains(project) ?? false }
        guard allowed else {
            state.count(error: "PERMISSION_DENIED")
            return googleError(
                403,
                "PERMISSION_DENIED",
                "Permission 'cloudmessaging.messages.create' denied on resource '//cloudmessaging.googleapis.com/projects/\(project)' (or it may not exist)."
            )
        }
        return nil
    }

    /// A registration token: well formed, known (or registered on first use when tokens register themselves), not
    /// removed, of this project; the refusal otherwise.
    private func checkDevice(_ token: String, project: String) -> EmulatorResponse? {
        if MessageValidator.fcmTokenProblem(token) != nil || token.count < configuration.minimumTokenLength {
            return fcmError(
                400,
                "INVALID_ARGUMENT",
                "The registration token is not a valid FCM registration token",
                code: "INVALID_ARGUMENT"
            )
        }
        let device: FCMEmulatorState.Device? = state.data.withLockedValue { d in
            if let existing = d.devices[token] { return existing }
            guard configuration.autoRegisterTokens else { return nil }
            d.devices[token] = .init(project: project, removed: false)
            return d.devices[token]
        }
        guard let device, !device.removed else {
            return fcmError(404, "NOT_FOUND", "Requested entity was not found.", code: "UNREGISTERED")
        }
        if device.project != project {
            return fcmError(403, "PERMISSION_DENIED", "SenderId mismatch", code: "SENDER_ID_MISMATCH")
        }
        return nil
    }

    private func checkQuota(project: String, target: FCMTarget) -> EmulatorResponse? {
        let minute = Int64(configuration.now().timeIntervalSince1970 / 60)
        let (projectCount, deviceCount): (Int, Int) = state.data.withLockedValue { d in
            if d.minute != minute {
                d.minute = minute
                d.projectCount.removeAll()
                d.deviceCount.removeAll()
            }
            d.projectCount[project, default: 0] += 1
            var perDevice = 0
            if case .token(let t) = target {
                d.deviceCount[t, default: 0] += 1
                perDevice = d.deviceCount[t]!
            }
            return (d.projectCount[project]!, perDevice)
        }
        let retry = String(60 - Int(configuration.now().timeIntervalSince1970) % 60)
        if projectCount > configuration.projectMessagesPerMinute {
            return fcmError(
                429,
                "RESOURCE_EXHAUSTED",
                "Quota exceeded for quota metric 'Messages' and limit 'Messages per minute' of service 'fcm.googleapis.com' for consumer 'project_number:\(project)'.",
                code: "QUOTA_EXCEEDED",
                headers: [("retry-after", retry)],
                quotaSubject: "project"
            )
        }
        if deviceCount > configuration.deviceMessagesPerMinute {
            return fcmError(
                429,
                "RESOURCE_EXHAUSTED",
                "Message rate exceeded for this device.",
                code: "QUOTA_EXCEEDED",
                headers: [("retry-after", retry)],
                quotaSubject: "device"
            )
        }
        return nil
    }

    private func badRequest(_ violations: [FCMMessageValidator.Violation]) -> EmulatorResponse {
        state.count(error: "INVALID_ARGUMENT")
        let details: [[String: Any]] = [
            ["@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": "INVALID_ARGUMENT"],
            [
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": violations.map { ["field": $0.field, "description": $0.description] },
            ],
        ]
        return .json(
            400,
            [
                "error": [
                    "code": 400, "message": violations.first?.description ?? "Request contains an invalid argument.",
                    "status": "INVALID_ARGUMENT", "details": details,
                ]
            ]
        )
    }

    private func fcmError(
        _ http: Int,
        _ status: String,
        _ message: String,
        code: String,
        headers: [(String, String)] = [],
        quotaSubject: String? = nil
    ) -> EmulatorResponse {
        state.count(error: code)
        var details: [[String: Any]] = [
            ["@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": code]
        ]
        if let subject = quotaSubject {
            details.append([
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [["subject": subject, "description": message]],
            ])
        }
        return .json(
            http,
            ["error": ["code": http, "message": message, "status": status, "details": details]],
            headers: headers
        )
    }

    private func googleError(
        _ http: Int,
        _ status: String,
        _ message: String,
        headers: [(String, String)] = []
    ) -> EmulatorResponse {
        .json(http, ["error": ["code": http, "message": message, "status": status]], headers: headers)
    }
}
