import Foundation
import RichPushAPNs
import RichPushFCM
import RichPushSandbox

extension Sandbox {
    /// An APNs client signed with the sandbox's key and trusting its CA.
    public func apnsClient(requestTimeout: TimeInterval = 10) throws -> APNsClient {
        let c = credentials
        return APNsClient(
            configuration: .init(
                endpoint: .custom(host: "127.0.0.1", port: apns.port),
                authentication: .token(try APNsSigningKey(p8: c.apnsKeyPEM, keyID: c.apnsKeyID, teamID: c.apnsTeamID)),
                trust: .certificateAuthority(pem: c.caCertificatePEM),
                requestTimeout: requestTimeout
            )
        )
    }

    /// An FCM client with the sandbox's service account, trusting its CA.
    public func fcmClient(requestTimeout: TimeInterval = 10) throws -> FCMClient {
        let account = try ServiceAccount(contentsOf: files["service-account"]!)
        return FCMClient(
            configuration: .init(
                serviceAccount: account,
                endpoint: .custom(host: "127.0.0.1", port: fcm.port),
                trust: .certificateAuthority(pem: credentials.caCertificatePEM),
                requestTimeout: requestTimeout
            )
        )
    }
}
