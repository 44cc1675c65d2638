import Foundation
import Hummingbird
import RichPushCore

/// Dry runs: a send checked in full (validation, media preflight, sizes as sent) and shown as the provider requests
/// it would make, with the deliveries it would create counted, without storing or sending anything.
extension NotificationsController {
    func dryRunAnswer(
        app: ServerApp,
        message: PushMessage,
        audience: Audience,
        warnings: [ValidationIssue],
        showsReach: Bool
    ) async throws -> Response {
        var out: [String: JSONValue] = ["dry_run": true]
        var warnings = warnings
        if showsReach {
            let counts = try await self.counts.reach(app.id, audience) {
                try await backend.countByProvider(appID: app.id, audience: audience)
            }
            warnings += pipeline.credentialWarnings(app: app, audience: audience, counts: counts)
            out["deliveries"] = .object(
                Dictionary(
                    uniqueKeysWithValues: providers.ids.map { ($0.rawValue, JSONValue.int(Int64(counts[$0] ?? 0))) }
                )
            )
        } else {
            // Not counted at all: nothing to learn, and no count of the whole registry for a key that may not read it.
            out["deliveries"] = .null
            out["deliveries_withheld"] =
                "how many registered devices the audience reaches needs a key with the read scope"
            warnings += pipeline.credentialWarnings(app: app, audience: audience)
        }
        out["warnings"] = .array(warnings.map(\.json))
        // Each provider's request is shown whenever the audience may use it, even with no device registered yet:
        // what would be sent is the point of a dry run (a composer previews it).
        var requests: [String: JSONValue] = [:]
        for provider in providers.all {
            guard let part = await provider.dryRun(message, app: app, audience: audience) else { continue }
            requests[provider.id.rawValue] = part.request
            out.merge(part.extra) { first, _ in first }
        }
        out["requests"] = .object(requests)
        // The message as it would be sent: media re-hosted where the preflight chose to, the chart's PNG address set.
        out["message"] = message.json
        return Response.json(200, .object(out))
    }
}
