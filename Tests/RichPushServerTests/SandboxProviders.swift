import Foundation
import RichPushAPNs
import RichPushCore
import RichPushFCM
import RichPushSandbox
import RichPushServer
import RichPushTransport

extension Providers {
    /// APNs and FCM pointed at a sandbox: its endpoints for apps with credentials of their own, its clients (given,
    /// or made with `requestTimeout`) for apps without.
    static func sandbox(
        _ sandbox: Sandbox,
        apns: APNsClient? = nil,
        fcm: FCMClient? = nil,
        requestTimeout: Double = 5,
        fallbacks: Bool = true
    ) throws -> Providers {
        let account = try ServiceAccount(contentsOf: sandbox.files["service-account"]!)
        let trust = TLSTrust.certificateAuthority(pem: sandbox.credentials.caCertificatePEM)
        return Providers([
            APNsProvider(
                .init(
                    endpoint: .custom(host: "127.0.0.1", port: sandbox.apns.port),
                    trust: trust,
                    fallback: fallbacks ? try apns ?? sandbox.apnsClient(requestTimeout: requestTimeout) : nil
                )
            ),
            FCMProvider(
                .init(
                    endpoint: .custom(host: "127.0.0.1", port: sandbox.fcm.port),
                    tokenURI: account.tokenURI,
                    trust: trust,
                    fallback: fallbacks ? try fcm ?? sandbox.fcmClient(requestTimeout: requestTimeout) : nil,
                    fallbackProjectID: fallbacks ? account.projectID : nil
                )
            ),
        ])
    }
}

extension ProviderDeliverySender {
    /// Every delivery's app is a plain one without credentials (the providers' fallbacks send for it).
    convenience init(
        providers: Providers,
        bundleID: String = "com.example.app",
        message: @escaping @Sendable (String) async -> PushMessage?
    ) {
        self.init(providers: providers, app: { ServerApp(id: $0, name: "App", bundleID: bundleID) }, message: message)
    }
}
