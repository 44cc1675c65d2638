import Foundation
import Logging
import NIOCore
import RichPushCore
import RichPushFCM
import RichPushTransport

/// Firebase Cloud Messaging (HTTP v1): one client per app built from its service account, a message rendered for
/// each target (a registration token, a topic or a condition: FCM fans the last two out itself).
public final class FCMProvider: PushProvider {
    public struct Configuration: Sendable {
        /// Where requests go instead of Google's: the sandbox emulator.
        public var endpoint: FCMConfiguration.Endpoint?
        /// The OAuth token endpoint instead of the service account's `token_uri` (the emulator's).
        public var tokenURI: String?
        public var trust: TLSTrust
        /// The client and project for apps without a service account of their own (the sandbox's).
        public var fallback: FCMClient?
        public var fallbackProjectID: String?
        /// Given to every client built for an app.
        public var logger: Logger

        public init(
            endpoint: FCMConfiguration.Endpoint? = nil,
            tokenURI: String? = nil,
            trust: TLSTrust = .system,
            fallback: FCMClient? = nil,
            fallbackProjectID: String? = nil,
            logger: Logger = .disabled
        ) {
            self.endpoint = endpoint
            self.tokenURI = tokenURI
            self.trust = trust
            self.fallback = fallback
            self.fallbackProjectID = fallbackProjectID
            self.logger = logger
        }
    }

    public let id = DeliveryProvider.fcm
    let configuration: Configuration
    let eventLoopGroup: EventLoopGroup?
    let clients = AppClients<FCMClient> { await $0.shutdown() }
    /// FCM tokens checked with `validate_only` per dry run at most.
    static let dryRunTokenChecks = 100

    public init(_ configuration: Configuration = .init(), eventLoopGroup: EventLoopGroup? = nil) {
        self.configuration = configuration
        self.eventLoopGroup = eventLoopGroup
    }

    /// The client an app sends with: its own (from its service account), or the fallback when it has none.
    public func missingCredentials(for app: ServerApp, audience: Audience) -> ValidationIssue? {
        guard audience.fcmTargetKind != nil, app.fcm == nil, configuration.fallback == nil else { return nil }
        return ValidationIssue(
            path: "audience",
            rule: "no-fcm-credentials",
            message:
                "this app has no FCM service account (and the server is not in sandbox mode): its deliveries through FCM will fail fcm_not_configured; give one with PATCH /v1/apps/{app} {\"fcm\": …}",
            severity: .warning
        )
    }

    public func client(for app: ServerApp) -> FCMClient? {
        guard app.fcm != nil else { return configuration.fallback }
        return clients.client(for: app) { app in
            guard let c = app.fcm else { return nil }
            var account = try ServiceAccount(json: Data(c.serviceAccountJSON.utf8))
            if let uri = configuration.tokenURI { account.tokenURI = uri }
            // Checked again before any connection: a row stored before the check, or edited in the database, must
            // not point the server at an address of someone's choosing.
            guard configuration.tokenURI != nil || ServiceAccount.isGoogleTokenEndpoint(account.tokenURI) else {
                throw ServiceAccount.Problem(description: "token_uri is not Google's token endpoint; not connecting")
            }
            return FCMClient(
                configuration: .init(
                    serviceAccount: account,
                    endpoint: configuration.endpoint ?? .production,
                    trust: configuration.trust,
                    logger: configuration.logger
                ),
                eventLoopGroup: eventLoopGroup
            )
        }.client
    }

    /// The project an app's messages go to.
    public func projectID(for app: ServerApp) -> String {
        app.fcm?.projectID ?? app.fcmProjectID ?? configuration.fallbackProjectID ?? ""
    }

    public func tokenProblem(_ token: String) -> (rule: String, message: String)? {
        MessageValidator.fcmTokenProblem(token).map { ("fcm-token", $0) }
    }

    public func sizeIssues(
        _ message: PushMessage,
        audience: Audience,
        now: @escaping @Sendable () -> Date
    ) -> [ValidationIssue] {
        guard let target = audience.fcmTargetKind else { return [] }
        return MessageValidator.sizeIssues(message, apns: false, fcm: target, now: now)
    }

    public func dryRun(_ message: PushMessage, app: ServerApp, audience: Audience) async -> ProviderDryRun? {
        guard audience.fcmTargetKind != nil else { return nil }
        let project = projectID(for: app)
        let renderer = FCMRenderer(
            projectID: project.isEmpty ? "<project>" : project,
            chartImageURL: message.chartImageURL
        )
        let sample = audience.directTargets?.first { $0.0 == .fcm }?.1.fcm ?? .token("<device token>")
        let r = renderer.render(message, to: sample)
        var out = ProviderDryRun(request: [
            "path": .string(r.path), "body": r.body, "bytes": .int(Int64(r.payloadSize)),
        ])
        // Tokens given as they are: FCM says which it would refuse (UNREGISTERED, INVALID_ARGUMENT…) without
        // delivering anything. APNs has no such check: its tokens are only checked for their form.
        guard case .providerTokens(_, let fcmTokens) = audience, !fcmTokens.isEmpty, let client = client(for: app)
        else {
            return out
        }
        let distinct = Set(fcmTokens)
        let checked = distinct.sorted().prefix(Self.dryRunTokenChecks)
        let results = await withTaskGroup(of: (String, String).self) { group -> [String: JSONValue] in
            for token in checked {
                group.addTask {
                    do throws(FCMFailure) {
                        _ = try await client.send(renderer.render(message, to: .token(token), validateOnly: true))
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
        out.extra["fcm_tokens"] = .object(results)
        if distinct.count > checked.count {
            out.extra["fcm_tokens_unchecked"] = .int(Int64(distinct.count - checked.count))
        }
        return out
    }

    public func send(
        _ d: DeliveryRecord,
        message: PushMessage,
        app: ServerApp,
        receipt: ReceiptStamp?
    ) async -> SendResult {
        guard let client = client(for: app) else { return .failed(.fixCredentials, reason: "fcm_not_configured") }
        // Rendered for each target anyway: the receipt address is written in before.
        var message = message
        if let receipt, let template = message.receiptURL { message.receiptURL = receipt.address(template) }
        let request = FCMRenderer(projectID: projectID(for: app)).render(message, to: d.target.fcm)
        do {
            return .delivered(providerID: try await client.send(request))
        } catch {
            return .failed(error.retry, reason: error.label)
        }
    }

    /// FCM's host (or the endpoint every request goes to instead).
    public func origin(of delivery: DeliveryRecord, app: ServerApp) -> String? {
        (configuration.endpoint ?? .production).origin
    }

    public func shutdown() async { await clients.shutdown() }
}
