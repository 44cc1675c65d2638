import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RichPushAPNs
import RichPushFCM
import RichPushTransport

/// The provider clients of each app, built from the app's own credentials and rebuilt when they change (by the
/// app's revision). An app without credentials of its own uses the fallback clients (the sandbox's), if any.
///
/// `routing` points every app at other endpoints than Apple's and Google's: the sandbox emulators.
public final class ProviderClients: Sendable {
    public struct Routing: Sendable {
        /// Where APNs requests go instead of the app's environment (production or development).
        public var apnsEndpoint: APNsConfiguration.Endpoint?
        public var fcmEndpoint: FCMConfiguration.Endpoint?
        /// The OAuth token endpoint instead of the service account's `token_uri`.
        public var fcmTokenURI: String?
        public var trust: TLSTrust

        public init(
            apnsEndpoint: APNsConfiguration.Endpoint? = nil,
            fcmEndpoint: FCMConfiguration.Endpoint? = nil,
            fcmTokenURI: String? = nil,
            trust: TLSTrust = .system
        ) {
            self.apnsEndpoint = apnsEndpoint
            self.fcmEndpoint = fcmEndpoint
            self.fcmTokenURI = fcmTokenURI
            self.trust = trust
        }
    }

    /// Clients for apps without credentials of their own.
    public struct Fallback: Sendable {
        public var apns: APNsClient?
        public var fcm: FCMClient?
        public var fcmProjectID: String?
        public init(apns: APNsClient?, fcm: FCMClient?, fcmProjectID: String?) {
            self.apns = apns
            self.fcm = fcm
            self.fcmProjectID = fcmProjectID
        }
    }

    private struct Built {
        var revision: Int
        var apns: APNsClient?
        var fcm: FCMClient?
        var problem: String?
    }

    let routing: Routing
    let fallback: Fallback?
    let group: MultiThreadedEventLoopGroup
    private let built = NIOLockedValueBox<[String: Built]>([:])

    public init(routing: Routing = .init(), fallback: Fallback? = nil, threads: Int = 1) {
        self.routing = routing
        self.fallback = fallback
        group = MultiThreadedEventLoopGroup(numberOfThreads: threads)
    }

    /// The sending setup of an app.
    public func sender(for app: ServerApp, chartImageURL: String? = nil) -> ProviderDeliverySender.App {
        let b = clients(for: app)
        return .init(
            apns: b.apns ?? (app.apns == nil ? fallback?.apns : nil),
            bundleID: app.bundleID,
            fcm: b.fcm ?? (app.fcm == nil ? fallback?.fcm : nil),
            fcmProjectID: app.fcm?.projectID ?? app.fcmProjectID ?? fallback?.fcmProjectID ?? "",
            chartImageURL: chartImageURL
        )
    }

    private func clients(for app: ServerApp) -> Built {
        if let b = built.withLockedValue({ $0[app.id] }), b.revision == app.revision { return b }
        var b = Built(revision: app.revision)
        if let c = app.apns {
            do {
                let key = try APNsSigningKey(p8: c.keyPEM, keyID: c.keyID, teamID: c.teamID)
                let endpoint = routing.apnsEndpoint ?? (c.environment == .production ? .production : .sandbox)
                b.apns = APNsClient(
                    configuration: .init(endpoint: endpoint, authentication: .token(key), trust: routing.trust),
                    eventLoopGroup: group
                )
            } catch { b.problem = "apns key: \(error)" }
        }
        if let c = app.fcm {
            do {
                var account = try ServiceAccount(json: Data(c.serviceAccountJSON.utf8))
                if let uri = routing.fcmTokenURI { account.tokenURI = uri }
                // Checked again before any connection: a row stored before the check, or edited in the database,
                // must not point the server at an address of someone's choosing.
                guard routing.fcmTokenURI != nil || ServiceAccount.isGoogleTokenEndpoint(account.tokenURI) else {
                    throw ServiceAccount.Problem(
                        description: "token_uri is not Google's token endpoint; not connecting"
                    )
                }
                b.fcm = FCMClient(
                    configuration: .init(
                        serviceAccount: account,
                        endpoint: routing.fcmEndpoint ?? .production,
                        trust: routing.trust
                    ),
                    eventLoopGroup: group
                )
            } catch { b.problem = "fcm service account: \(error)" }
        }
        // Two callers may build at once: one wins, the other's clients (or the replaced ones) are closed.
        let (winner, discarded) = built.withLockedValue { all -> (Built, Built?) in
            if let current = all[app.id], current.revision >= b.revision { return (current, b) }
            let old = all[app.id]
            all[app.id] = b
            return (b, old)
        }
        if let d = discarded {
            Task {
                await d.apns?.shutdown()
                await d.fcm?.shutdown()
            }
        }
        return winner
    }

    public func shutdown() async {
        let all = built.withLockedValue { all -> [Built] in
            defer { all.removeAll() }
            return Array(all.values)
        }
        for b in all {
            await b.apns?.shutdown()
            await b.fcm?.shutdown()
        }
        try? await group.shutdownGracefully()
    }
}
