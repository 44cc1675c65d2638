import Foundation
import RichPushApp

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

#if canImport(UserNotifications)
import UserNotifications
#else
import UserNotificationsStandIn
#endif

/// An app's push setup with RichPushApp, as an app delegate would hold it. In an iOS app:
///
/// - `application(_:didFinishLaunchingWithOptions:)`: `await setup.start()`, then
///   `UIApplication.shared.registerForRemoteNotifications()`;
/// - `application(_:didRegisterForRemoteNotificationsWithDeviceToken:)`: `await setup.didRegister(token)`;
/// - `userNotificationCenter(_:didReceive:withCompletionHandler:)`: `await setup.didReceive(response)`;
/// - when the app comes to the foreground: `await setup.willEnterForeground()`; when the network comes back:
///   `await setup.push.flush()`.
///
/// Only a key with the `register` scope ships in the app (`POST /v1/apps/{app}/keys` with
/// `{"scopes": ["register"]}`). That key speaks for the device only: which user it belongs to is proved by the
/// app's own backend, which signs a short-lived proof for its signed-in user (``proofs(from:session:)``; the
/// backend's side is `Examples/Backend/PushIdentitySigner.swift`).
public final class PushSetup: Sendable {
    public let push: RichPushApp

    public init(
        server: URL,
        appID: String,
        registerKey: String,
        directory: URL,
        identity: RichPushApp.IdentityProvider? = nil
    ) {
        push = RichPushApp(
            configuration: .init(
                server: server,
                appID: appID,
                key: registerKey,
                directory: directory,
                identity: identity
            )
        )
    }

    /// Proofs from the app's backend: `GET endpoint` with the signed-in session answers the proof as text (the
    /// backend signs it for the session's user; a user id that is not the session's gets none).
    public static func proofs(
        from endpoint: URL,
        session: @escaping @Sendable () async -> String?
    ) -> RichPushApp.IdentityProvider {
        { userID in
            guard let token = await session() else { return nil }
            var request = URLRequest(url: endpoint)
            request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
            request.setValue(userID, forHTTPHeaderField: "X-User-ID")
            guard let (data, response) = try? await URLSession.shared.data(for: request),
                (response as? HTTPURLResponse)?.statusCode == 200
            else { return nil }
            return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        }
    }

    /// Asks permission once, and tells the server the device's language.
    public func start(userID: String?) async -> UNAuthorizationStatus {
        let status = await push.requestPermission([.alert, .sound, .badge])
        await push.setLocale(Locale.current.identifier.replacingOccurrences(of: "_", with: "-"))
        await push.setUser(userID)
        return status
    }

    public func didRegister(_ deviceToken: Data) async {
        await push.register(deviceToken: deviceToken)
        await push.flush()
    }

    /// Reports the open (or dismissal) and returns where the notification's deep link points, if anywhere.
    public func didReceive(_ response: UNNotificationResponse) async -> URL? {
        let opened = await push.handle(response)
        await push.flush()
        return opened?.deepLink
    }

    /// Permission may have changed in Settings while the app was away: the server hears of it if it did.
    public func willEnterForeground() async {
        await push.permission()
        await push.flush()
    }

    /// The reader chose topics: they become the device's tags, which sends can target.
    public func follow(_ topics: [String]) async {
        await push.setTags(topics)
        await push.flush()
    }
}
