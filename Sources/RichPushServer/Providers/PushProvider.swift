import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RichPushCore
import RichPushTransport

/// The name of a push service the server sends through, as stored with devices and deliveries and used in the
/// API (`"apns"`, `"fcm"`). Open: a provider registered in ``Providers`` brings its own.
public struct DeliveryProvider: RawRepresentable, Sendable, Hashable, Comparable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public var description: String { rawValue }
    public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }

    public static let apns = DeliveryProvider(rawValue: "apns")
    public static let fcm = DeliveryProvider(rawValue: "fcm")
}

/// A push service: everything the server knows of one lives in its folder under `Providers/` and reaches the rest
/// through this protocol. The API asks it about tokens and dry runs, the send path about sizes, and the workers
/// send through it; ``Providers`` lists the ones a server has.
///
/// A provider serves every app: it keeps the clients it builds from each app's credentials (and rebuilds them
/// when the app's revision changes), and closes them in ``shutdown()``.
public protocol PushProvider: Sendable {
    /// Its stored name.
    var id: DeliveryProvider { get }

    /// Why a device token cannot be one of this service's (nil: it has the right form), with the rule's name.
    func tokenProblem(_ token: String) -> (rule: String, message: String)?

    /// The size problems of a message as this service would carry it to the audience (none when the audience does
    /// not reach it).
    func sizeIssues(
        _ message: PushMessage,
        audience: Audience,
        now: @escaping @Sendable () -> Date
    ) -> [ValidationIssue]

    /// What a dry run shows for this service: the request it would make (under `requests.<id>`) and anything the
    /// service can say of the audience's targets without delivering (top-level fields); nil when the audience
    /// does not reach it.
    func dryRun(_ message: PushMessage, app: ServerApp, audience: Audience) async -> ProviderDryRun?

    /// A warning when the audience may reach this service and the app holds no credentials for it (outside sandbox
    /// mode): its deliveries would fail `<service>_not_configured`, so the send's answer and its dry run say so
    /// before anything is sent. nil when the audience does not reach it or it can send for the app.
    func missingCredentials(for app: ServerApp, audience: Audience) -> ValidationIssue?

    /// Sends one delivery of a message for an app: delivered, or failed with the retry decision its reason calls
    /// for. Never throws: every attempt ends in an outcome. `receipt`, when given, is the delivery's part of the
    /// receipt address: it replaces the placeholder the message's `receiptURL` ends with, in what is sent.
    func send(
        _ delivery: DeliveryRecord,
        message: PushMessage,
        app: ServerApp,
        receipt: ReceiptStamp?
    ) async -> SendResult

    /// The push service origin (`scheme://host:port`) a delivery of this app goes to: the unit a node bounds its
    /// sends and keeps a circuit for. Nil when the provider cannot say (the send then counts only for its app).
    func origin(of delivery: DeliveryRecord, app: ServerApp) -> String?

    /// Closes every connection it opened.
    func shutdown() async
}

extension PushProvider {
    /// Credentials that cannot be missing: a service whose sends need none of the app's.
    public func missingCredentials(for app: ServerApp, audience: Audience) -> ValidationIssue? { nil }

    /// No origin: a provider that names none is bounded per app only.
    public func origin(of delivery: DeliveryRecord, app: ServerApp) -> String? { nil }
}

/// A provider's part of a dry-run answer.
public struct ProviderDryRun: Sendable {
    public var request: JSONValue
    public var extra: [String: JSONValue]

    public init(request: JSONValue, extra: [String: JSONValue] = [:]) {
        self.request = request
        self.extra = extra
    }
}

/// The result of one attempt.
public enum SendResult: Sendable, Hashable {
    case delivered(providerID: String?)
    case failed(RetryDecision, reason: String)
}

/// The push services a server sends through, each under its name, and the event loops their connections share.
///
/// ```swift
/// let providers = Providers.standard(apns: .init(), fcm: .init())
/// ```
public final class Providers: Sendable {
    /// In the order given (dry runs list them in this order).
    public let all: [any PushProvider]
    private let byID: [DeliveryProvider: any PushProvider]
    private let group: MultiThreadedEventLoopGroup?

    /// `group`: event loops the providers' connections run on, shut down after them (nil: theirs to manage).
    public init(_ providers: [any PushProvider], group: MultiThreadedEventLoopGroup? = nil) {
        all = providers
        byID = Dictionary(providers.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        self.group = group
    }

    /// APNs, FCM and Web Push, their connections on one event loop thread of their own.
    public static func standard(
        apns: APNsProvider.Configuration = .init(),
        fcm: FCMProvider.Configuration = .init(),
        webPush: WebPushProvider.Configuration = .init(),
        extra: [any PushProvider] = []
    ) -> Providers {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        return Providers(
            [
                APNsProvider(apns, eventLoopGroup: group), FCMProvider(fcm, eventLoopGroup: group),
                WebPushProvider(webPush, eventLoopGroup: group),
            ] + extra,
            group: group
        )
    }

    public subscript(id: DeliveryProvider) -> (any PushProvider)? { byID[id] }

    public var ids: [DeliveryProvider] { all.map(\.id) }

    public func shutdown() async {
        for provider in all { await provider.shutdown() }
        do { try await group?.shutdownGracefully() } catch {
            // Shutting down a group twice (or one already shut down) is the only failure, and harmless.
            assert(error is EventLoopError, "\(error)")
        }
    }
}

/// The clients a provider built for each app, by the app's revision: rebuilt when the credentials change, shared by
/// every send until then.
final class AppClients<Client: Sendable>: Sendable {
    private struct Built: Sendable {
        var revision: Int
        var client: Client?
        var problem: String?
    }

    private let built = NIOLockedValueBox<[String: Built]>([:])
    /// Clients replaced by newer credentials: closed with the rest at shutdown (a send may still be using one).
    private let retired = NIOLockedValueBox<[Client]>([])
    private let close: @Sendable (Client) async -> Void

    init(close: @escaping @Sendable (Client) async -> Void) { self.close = close }

    /// The app's client, built by `make` from its credentials (nil: none); a build failure is kept as the problem.
    func client(for app: ServerApp, make: (ServerApp) throws -> Client?) -> (client: Client?, problem: String?) {
        if let b = built.withLockedValue({ $0[app.id] }), b.revision == app.revision { return (b.client, b.problem) }
        var b = Built(revision: app.revision)
        do { b.client = try make(app) } catch { b.problem = "\(error)" }
        // Two callers may build at once: one wins, the other's client (or the replaced one) is retired.
        let winner = built.withLockedValue { all -> Built in
            if let current = all[app.id], current.revision >= b.revision {
                if let c = b.client { retired.withLockedValue { $0.append(c) } }
                return current
            }
            if let c = all[app.id]?.client { retired.withLockedValue { $0.append(c) } }
            all[app.id] = b
            return b
        }
        return (winner.client, winner.problem)
    }

    func shutdown() async {
        let clients = built.withLockedValue { all -> [Client] in
            defer { all.removeAll() }
            return all.values.compactMap(\.client)
        }
        let old = retired.withLockedValue { all -> [Client] in
            defer { all.removeAll() }
            return all
        }
        for c in clients + old { await close(c) }
    }
}
