import Foundation
import Hummingbird
import NIOCore
import RichPushAPNs
import RichPushCore

/// `/v1/apps/{app}/live`: Live Activity tokens (registered by the app, like devices: the `register` or `manage`
/// scope) and broadcast channels (kept by APNs for the app: created and deleted with `manage`, read with `read`).
/// Sends go through `POST /notifications` with `audience.live_start`, `audience.live_activity` or
/// `audience.apns_channel` (see `docs/live.md`).
///
/// With the public key a token speaks for its device only (``Registrant``): an activity's update token, and a
/// user's push-to-start token, need the app backend's identity proof listing them. Removing a token with the public
/// key answers alike whether or not it was registered, and removes it only when no one holds it or the proof's
/// user does.
struct LiveController: AppRoutes {
    let store: any ServerStore
    let liveTokens: any LiveTokenStore
    let providers: Providers
    let maxBodyBytes: Int
    let limits: RegistrationLimits
    /// The `live.token` events the public key may cause, per app: past it a registration or removal is done and
    /// its event not written (the outbox holds what the app's backend causes, and a bounded share of the rest).
    var eventBudget: RateLimiter?
    var metrics: ServerMetrics?

    func addRoutes(to group: RouterGroup<APIRequestContext>) {
        let registering = group.app(.register, .manage, store: store)
        let reading = group.app(.read, store: store)
        let managing = group.app(.manage, store: store)
        registering.post("live/tokens", use: registerToken)
        registering.delete("live/tokens/:token", use: removeToken)
        reading.get("live/channels", use: listChannels)
        managing.post("live/channels", use: createChannel)
        reading.get("live/channels/:channel", use: readChannel)
        managing.delete("live/channels/:channel", use: deleteChannel)
    }

    // MARK: Tokens

    /// `POST /v1/apps/{app}/live/tokens`: `{"kind": "push_to_start"|"activity", "token", "activity_type",
    /// "activity_id" (activity tokens), "user_id"}`.
    func registerToken(_ request: Request, _ context: AppRequestContext) async throws -> RegisteredLiveToken {
        let app = context.app
        var token = try Self.decodeToken(try await bodyJSON(request), appID: app.id)
        let registrant = try await Registrant.of(request, context, store: store)
        let owner = try registrant.admit(&token)
        // A server key's registrations always tell; public callers' within the app's event budget.
        let events: LiveTokenEvents
        if case .server = registrant { events = { true } } else { events = publicEvents(app.id) }
        do {
            try await liveTokens.register(token, owner: owner, limits: limits, events: events)
        } catch let quota as QuotaReached {
            throw APIError(quota)
        }
        return RegisteredLiveToken(token)
    }

    static func decodeToken(_ json: JSONValue, appID: String) throws(APIError) -> LiveToken {
        guard case .object(let o) = json else { throw APIError(.invalid, "the body must be an object") }
        var r = FieldReader(strict: true, refusesNUL: true)
        r.rejectUnknown(o, known: ["kind", "token", "activity_type", "activity_id", "user_id"], at: "")
        var kind: LiveToken.Kind?
        if let k = r.text(o, "kind", at: "", lengths: 1...32) {
            kind = LiveToken.Kind(rawValue: k)
            if kind == nil { r.report.add("kind", "enum", "kind is push_to_start or activity") }
        } else if o["kind"] == nil {
            r.report.add("kind", "required", "kind is push_to_start or activity")
        }
        let token = r.text(o, "token", at: "", lengths: DeviceBody.apnsTokenLengths)
        if o["token"] == nil { r.report.add("token", "required", "token is the hex token ActivityKit gave") }
        if let t = token, let p = MessageValidator.apnsTokenProblem(t) { r.report.add("token", "apns-token", p) }
        let type = r.text(o, "activity_type", at: "", lengths: 1...256)
        if o["activity_type"] == nil {
            r.report.add("activity_type", "required", "activity_type names the app's ActivityAttributes type")
        }
        let activityID = o["activity_id"] == nil ? nil : r.text(o, "activity_id", at: "", lengths: 1...256)
        let user = o["user_id"] == nil ? nil : DeviceBody.userID(o, &r)
        if kind == .activity && o["activity_id"] == nil {
            r.report.add("activity_id", "required", "an activity token names its activity (updates are sent by it)")
        }
        if kind == .pushToStart && o["activity_id"] != nil {
            r.report.add("activity_id", "push-to-start", "a push-to-start token belongs to no activity yet")
        }
        guard r.report.isValid, let kind, let token, let type else {
            throw APIError(.invalid, "the token is not valid", issues: r.report.errors)
        }
        return LiveToken(
            appID: appID,
            token: token.lowercased(),
            kind: kind,
            activityType: type,
            activityID: kind == .activity ? activityID : nil,
            userID: user
        )
    }

    func removeToken(_ request: Request, _ context: AppRequestContext) async throws -> LiveTokenRemoval {
        let app = context.app
        let token = (context.parameters.get("token") ?? "").lowercased()
        let registrant = try await Registrant.of(request, context, store: store)
        if case .server = registrant {
            guard try await liveTokens.remove(appID: app.id, token: token) else {
                throw APIError(.notFound, "no such live activity token")
            }
            return LiveTokenRemoval(removed: token, token: nil)
        }
        // The public key: one answer whether the token was registered, held by someone else, or removed, so that
        // the route tells nothing about a token that it did not already know.
        guard MessageValidator.apnsTokenProblem(token) == nil else {
            throw APIError(.notFound, "not a live activity token (hex, whole bytes)")
        }
        _ = try await liveTokens.remove(
            appID: app.id,
            token: token,
            heldBy: registrant.user,
            events: publicEvents(app.id)
        )
        return LiveTokenRemoval(removed: nil, token: token)
    }

    /// The app's budget of events public callers cause, asked by the store once per event a change would write
    /// (a request that changes nothing, such as removing a token never registered, spends nothing).
    func publicEvents(_ app: String) -> LiveTokenEvents {
        { [eventBudget = self.eventBudget, metrics = self.metrics] in
            guard let eventBudget, eventBudget.check(app) != nil else { return true }
            metrics?.webhookEventUnwritten(type: WebhookEventType.liveToken.rawValue)
            return false
        }
    }

    // MARK: Channels

    func channelClient(_ app: ServerApp) throws -> APNsClient {
        guard let apns = providers[.apns] as? APNsProvider, let client = apns.channelClient(for: app) else {
            throw Self.refusal("no-apns-key", "the app has no APNs key: APNs keeps channels for the app's key")
        }
        return client
    }

    static func refusal(_ rule: String, _ message: String) -> APIError {
        var r = ValidationReport()
        r.add("apns", rule, message)
        return APIError(.invalid, message, issues: r.errors)
    }

    /// APNs' refusal as the API's: a channel it does not know is 404, a request or a key it refused 422 (naming
    /// the reason), its own failures 502 (with Retry-After when a retry may help).
    static func apiError(_ f: APNsFailure) -> APIError {
        if f.status == 404 || f.reason == .channelNotRegistered {
            return APIError(.notFound, "APNs knows no such channel for this app")
        }
        if f.status == 403 {
            return refusal("apns-credentials", "APNs refused the app's key: \(f)")
        }
        if let s = f.status, s == 400 || s == 413 {
            return refusal("apns-refused", "APNs refused the request: \(f)")
        }
        var e = APIError(.providerError, "APNs could not answer: \(f)")
        if f.retry != .never { e.retryAfter = 5 }
        return e
    }

    /// `GET /v1/apps/{app}/live/channels`: the ids APNs keeps for the app (at most 10,000).
    func listChannels(_ request: Request, _ context: AppRequestContext) async throws -> ChannelList {
        let app = context.app
        let client = try channelClient(app)
        do {
            let ids = try await client.allChannels(bundleID: app.bundleID)
            return ChannelList(channels: ids, count: ids.count)
        } catch { throw Self.apiError(error) }
    }

    /// `POST /v1/apps/{app}/live/channels`: `{"storage_policy": "none"|"most_recent"}`.
    func createChannel(_ request: Request, _ context: AppRequestContext) async throws -> EditedResponse<ChannelReply> {
        let app = context.app
        let body = try await bodyJSON(request, upTo: 1024)
        guard case .object(let o) = body else { throw APIError(.invalid, "the body must be an object") }
        var r = FieldReader(strict: true, refusesNUL: true)
        r.rejectUnknown(o, known: ["storage_policy"], at: "")
        var policy = APNsChannel.StoragePolicy.noMessageStored
        if o["storage_policy"] != nil {
            switch r.text(o, "storage_policy", at: "", lengths: 1...32) {
            case "none"?: policy = .noMessageStored
            case "most_recent"?: policy = .mostRecentMessageStored
            case .some: r.report.add("storage_policy", "enum", "storage_policy is none or most_recent")
            case nil: break
            }
        }
        guard r.report.isValid else { throw APIError(.invalid, "the channel is not valid", issues: r.report.errors) }
        let client = try channelClient(app)
        do {
            let channel = try await client.createChannel(bundleID: app.bundleID, storagePolicy: policy)
            return ChannelReply(id: channel.id, policy: policy).created
        } catch { throw Self.apiError(error) }
    }

    /// The path's channel id, percent-decoded; only base64 text (APNs' form) goes on to APNs, as a header.
    func channelID(_ context: AppRequestContext) throws -> String {
        let raw = context.parameters.get("channel") ?? ""
        let id = raw.removingPercentEncoding ?? raw
        guard Audience.isChannelID(id) else {
            throw APIError(.notFound, "no such channel")
        }
        return id
    }

    func readChannel(_ request: Request, _ context: AppRequestContext) async throws -> ChannelReply {
        let app = context.app
        let id = try channelID(context)
        let client = try channelClient(app)
        do {
            let channel = try await client.channel(bundleID: app.bundleID, id: id)
            return ChannelReply(id: id, policy: channel.storagePolicy)
        } catch { throw Self.apiError(error) }
    }

    func deleteChannel(_ request: Request, _ context: AppRequestContext) async throws -> Removed {
        let app = context.app
        let id = try channelID(context)
        let client = try channelClient(app)
        do {
            try await client.deleteChannel(bundleID: app.bundleID, id: id)
            return Removed(removed: id)
        } catch { throw Self.apiError(error) }
    }
}
