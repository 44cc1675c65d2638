import Foundation
import NIOConcurrencyHelpers
import RichPushCore
import RichPushServer

/// A push service that exists only in the tests: everything the server needs to know of it is in this folder, and
/// it joins a server with one line (its entry in ``Providers``). Tokens are `pigeon-<name>`; the pigeon delivers
/// the message's title to its loft, or is lost (`pigeon-lost`: the token is gone) or tired (try again later).
final class PigeonProvider: PushProvider {
    let id = DeliveryProvider(rawValue: "pigeon")
    /// What reached the loft: token and title, in order.
    private let loft = NIOLockedValueBox<[(token: String, title: String)]>([])
    /// The longest title a pigeon carries.
    static let maxTitle = 20

    var delivered: [(token: String, title: String)] { loft.withLockedValue { $0 } }

    func tokenProblem(_ token: String) -> (rule: String, message: String)? {
        token.hasPrefix("pigeon-") ? nil : ("pigeon-token", "a pigeon's token starts with 'pigeon-'")
    }

    func sizeIssues(
        _ message: PushMessage,
        audience: Audience,
        now: @escaping @Sendable () -> Date
    ) -> [ValidationIssue] {
        guard (message.alert.title ?? "").count > Self.maxTitle else { return [] }
        return [
            .init(
                path: "title",
                rule: "pigeon-too-heavy",
                message: "a pigeon carries at most \(Self.maxTitle) characters"
            )
        ]
    }

    func dryRun(_ message: PushMessage, app: ServerApp, audience: Audience) async -> ProviderDryRun? {
        ProviderDryRun(request: ["note": .string(message.alert.title ?? "")])
    }

    func send(
        _ delivery: DeliveryRecord,
        message: PushMessage,
        app: ServerApp,
        receipt: ReceiptStamp?
    ) async -> SendResult {
        switch delivery.target {
        case "pigeon-lost": return .failed(.dropToken, reason: "pigeon_lost")
        case "pigeon-tired": return .failed(.retryAfter(3600), reason: "pigeon_tired")
        default:
            loft.withLockedValue { $0.append((delivery.target.stored, message.alert.title ?? "")) }
            return .delivered(providerID: "feather-\(delivery.id)")
        }
    }

    func shutdown() async {}
}
