import Foundation
import Hummingbird
import RichPushCore
import RichPushFCM

/// Dry runs: a send checked in full (validation, media preflight, sizes as sent) and shown as the provider requests
/// it would make, with the deliveries it would create counted, without storing or sending anything.
extension NotificationsController {
    /// FCM tokens checked with `validate_only` per dry run at most.
    static let dryRunTokenChecks = 100

    func dryRunAnswer(
        app: ServerApp,
        message: PushMessage,
        audience: Audience,
        warnings: [ValidationIssue]
    ) async throws -> Response {
        let counts = try await backend.countByProvider(appID: app.id, audience: audience)
        let setup = providers?(app)
        var out: [String: JSONValue] = [
            "dry_run": true,
            "deliveries": ["apns": .int(Int64(counts[.apns] ?? 0)), "fcm": .int(Int64(counts[.fcm] ?? 0))],
            "warnings": .array(warnings.map(\.json)),
        ]
        var requests: [String: JSONValue] = [:]
        // Each provider's request is shown whenever the audience may use it, even with no device registered yet:
        // what would be sent is the point of a dry run (a composer previews it).
        if audience.mayUseAPNs {
            let sample = audience.directTargets?.first { $0.0 == .apns }?.1 ?? "<device token>"
            let r = APNsRenderer(bundleID: app.bundleID).render(message, deviceToken: sample)
            requests["apns"] = [
                "path": .string(r.path),
                "headers": .object(
                    Dictionary(r.headers.map { ($0.name, JSONValue.string($0.value)) }, uniquingKeysWith: { a, _ in a })
                ),
                "payload": r.payload, "bytes": .int(Int64(r.body.count)),
            ]
        }
        if audience.fcmTargetKind != nil {
            let renderer = FCMRenderer(
                projectID: setup.map(\.fcmProjectID).flatMap { $0.isEmpty ? nil : $0 } ?? app.fcmProjectID
                    ?? "<project>",
                chartImageURL: message.chartImageURL
            )
            let sample: FCMTarget
            switch audience {
            case .fcmTopic(let t): sample = .topic(t)
            case .fcmCondition(let c): sample = .condition(c)
            default: sample = .token(audience.directTargets?.first { $0.0 == .fcm }?.1 ?? "<device token>")
            }
            let r = renderer.render(message, to: sample)
            requests["fcm"] = ["path": .string(r.path), "body": r.body, "bytes": .int(Int64(r.payloadSize))]
            // Tokens given as they are: FCM says which it would refuse (UNREGISTERED, INVALID_ARGUMENT…) without
            // delivering anything. APNs has no such check: its tokens are only checked for their form.
            if case .providerTokens(_, let fcmTokens) = audience, !fcmTokens.isEmpty, let client = setup?.fcm {
                let checked = Array(Set(fcmTokens)).sorted().prefix(Self.dryRunTokenChecks)
                let results = await withTaskGroup(of: (String, String).self) { group -> [String: JSONValue] in
                    for token in checked {
                        group.addTask {
                            do throws(FCMFailure) {
                                _ = try await client.send(
                                    renderer.render(message, to: .token(token), validateOnly: true)
                                )
                                return (token, "valid")
                            } catch {
                                return (token, error.label)
                            }
                        }
                    }
                    var found: [String: JSONValue] = [:]
                    for await (token, result) in group { found[token] = .string(result) }
                    return found
                }
                out["fcm_tokens"] = .object(results)
                if Set(fcmTokens).count > checked.count {
                    out["fcm_tokens_unchecked"] = .int(Int64(Set(fcmTokens).count - checked.count))
                }
            }
        }
        out["requests"] = .object(requests)
        // The message as it would be sent: media re-hosted where the preflight chose to, the chart's PNG address set.
        out["message"] = message.json
        return Response.json(200, .object(out))
    }
}
