import Foundation
import Hummingbird
import RichPushCore

extension NotificationsController {
    /// The fields of a send that an update may not give: it goes to the notification's devices, at once.
    static let fieldsNotInUpdates = ["audience", "send_at", "spread_seconds", "dry_run", "targets"]

    /// `POST /v1/apps/{app}/notifications/{id}/updates`: a new version of a notification, sent to every device the
    /// notification was sent to with the notification's `collapse_id` (so the device replaces what it shows).
    /// What is still queued of the version before is superseded; the answer names the version.
    func update(_ request: Request, _ context: AppRequestContext) async throws -> Response {
        let app = context.app
        let idempotencyKey = try SendPipeline.idempotencyKey(request)
        let (family, collapseID) = try await updatableRoot(context, of: app)
        let body = try await bodyJSON(request)
        // The notification updated is part of the request: the same key and body for another notification is another
        // request (it once answered with the first notification's update).
        let idempotency = IdempotentRequest(
            key: idempotencyKey,
            body: ["notification": .string(family.rootID), "body": body]
        )
        try Self.checkUpdateFields(body, collapseID: collapseID)
        let now = Date()
        // Read as a send to the root's devices is (every check of the message's), then held to the root's collapse id.
        var fields: [String: JSONValue] = [:]
        if case .object(let o) = body { fields = o }
        fields["collapse_id"] = .string(collapseID)
        fields["audience"] = ["all": true]
        let send = try SendRequest.decode(
            .object(fields),
            validation: validation,
            maxTokens: maxTokensPerRequest,
            now: now
        )
        var (message, report, options) = (send.message, send.report, send.options)
        let pipeline = self.pipeline
        try await pipeline.prepareMedia(&message, options: options, report: &report, context: context)
        let updateID = UUID().uuidString.lowercased()
        options.notBefore = now
        // Sizes are held to every service's limits: an update goes wherever its notification went.
        let (expiresAt, end) = try pipeline.fit(
            &message,
            id: updateID,
            audience: .all,
            options: options,
            report: &report,
            what: "the update"
        )
        try await pipeline.keepMedia(message, until: end)
        let warnings = JSONValue.array(report.warnings.map(\.json))
        let plan = UpdatePlan(
            notification: .init(id: updateID, appID: app.id, message: message.json, response: .null, createdAt: now),
            rootID: family.rootID,
            idempotencyKey: idempotencyKey,
            expiresAt: expiresAt,
            limits: updateLimits
        )
        let accepted: UpdateAccepted
        do {
            accepted = try await backend.updates.accept(plan) { version, queued, superseded in
                idempotency.stored([
                    "id": .string(updateID), "status": "accepted", "root_id": .string(family.rootID),
                    "version": .int(Int64(version)), "deliveries": .int(Int64(queued)),
                    "superseded": .int(Int64(superseded)), "warnings": warnings,
                ])
            }
        } catch UpdateRefused.noRoot {
            throw APIError(.notFound, "no such notification")
        } catch UpdateRefused.fanOutPending {
            throw APIError(
                .fanOutPending,
                "the notification's devices are still being queued; try again",
                retryAfter: 1
            )
        } catch let refused as UpdateRefused {
            throw Self.refusal(refused, updateLimits)
        }
        guard accepted.created else { return try idempotency.answer(accepted.notification.response, replay: true) }
        pipeline.accepted(updateID, app: app.id, message: message, queued: accepted.queued)
        return try idempotency.answer(accepted.notification.response, replay: false)
    }

    /// The notification the path names, when an update may be made to it: the app's, not a Live Activity, sent
    /// with a `collapse_id` (which it returns), its fan-out done, and below its bound on versions.
    func updatableRoot(_ context: AppRequestContext, of app: ServerApp) async throws -> (NotificationFamily, String) {
        guard let id = context.parameters.get("id"), let family = try await backend.updates.family(of: id),
            family.appID == app.id, let root = try await store.notification(id: family.rootID)
        else {
            throw APIError(.notFound, "no such notification")
        }
        let rootMessage = try PushMessage.decode(root.message)
        guard rootMessage.liveActivity == nil else {
            throw APIError(
                .notUpdatable,
                "a Live Activity is updated by sending live_activity.event update to its activity or channel"
            )
        }
        guard let collapseID = rootMessage.collapseID else {
            throw APIError(
                .notUpdatable,
                "this notification was sent without collapse_id: a device cannot replace it; send it with collapse_id to update it in place"
            )
        }
        guard !family.fanOutPending else {
            throw APIError(
                .fanOutPending,
                "the notification's devices are still being queued; try again",
                retryAfter: 1
            )
        }
        // The count is known already: a notification at its bound costs no preparation (the database checks again).
        guard family.latest < updateLimits.maxVersions else {
            throw Self.refusal(.tooManyVersions(updateLimits.maxVersions), updateLimits)
        }
        return (family, collapseID)
    }

    /// The fields an update may not give, and a `collapse_id` other than its notification's, each named.
    static func checkUpdateFields(_ body: JSONValue, collapseID: String) throws {
        var r = ValidationReport()
        if case .object(let fields) = body {
            for key in Self.fieldsNotInUpdates where fields[key] != nil {
                r.add(key, "not-in-update", "an update goes to the notification's devices at once: \(key) is not given")
            }
            if let given = fields["collapse_id"], given != .string(collapseID) {
                r.add("collapse_id", "update-collapse-id", "an update keeps its notification's collapse_id")
            }
            if fields["live_activity"] != nil {
                r.add("live_activity", "not-in-update", "a notification's update is not a Live Activity")
            }
        }
        guard r.isValid else { throw APIError(.invalid, "the update is not valid", issues: r.errors) }
    }

    /// The answer to an update past a bound, naming the bound and its setting.
    static func refusal(_ refused: UpdateRefused, _ limits: UpdateLimits) -> APIError {
        switch refused {
        case .tooManyVersions(let n):
            return APIError(
                .versionLimit,
                "this notification has its \(n) versions (updates.max_versions): send a new notification instead"
            )
        case .tooFast(let wait):
            let seconds = RateLimiter.retryAfter(wait)
            return APIError(
                .updateRateLimited,
                "updates to one notification come at most \(limits.perSecond) a second, bursts of \(Int(limits.burst)) (updates.per_second, updates.burst); retry after \(seconds) s",
                retryAfter: seconds
            )
        case .noRoot: return APIError(.notFound, "no such notification")
        case .fanOutPending:
            return APIError(
                .fanOutPending,
                "the notification's devices are still being queued; try again",
                retryAfter: 1
            )
        }
    }
}
