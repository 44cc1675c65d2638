import Crypto
import Foundation
import RichPushCore

/// How an app's credentials and the server's secrets are kept in database columns, whatever the database: JSON
/// text (a secret: its bytes), sealed with the ``CredentialSealer`` when there is one. Values stored before sealing
/// was on are read as they are and sealed when a store opens.
struct StoredCredentials: Sendable {
    let sealer: CredentialSealer?

    /// The `apns` and `fcm` columns of an app.
    func columns(_ app: ServerApp) throws -> (apns: String?, fcm: String?) {
        let apns: String? = app.apns.map {
            JSONValue.object(["key": .string($0.keyPEM), "key_id": .string($0.keyID), "team_id": .string($0.teamID), "environment": .string($0.environment.rawValue)]).jsonString
        }
        let fcm: String? = app.fcm.map {
            JSONValue.object(["service_account": .string($0.serviceAccountJSON), "project_id": .string($0.projectID), "client_email": .string($0.clientEmail)]).jsonString
        }
        guard let sealer else { return (apns, fcm) }
        return (try apns.map(sealer.seal), try fcm.map(sealer.seal))
    }

    /// An app from its columns.
    func app(id: String, name: String, bundleID: String, fcmProjectID: String?, apns apnsColumn: String?, fcm fcmColumn: String?, revision: Int) throws -> ServerApp {
        let open: (String) throws -> String = { [sealer] in try sealer?.open($0) ?? $0 }
        let apns = try apnsColumn.map(open).flatMap { try? JSONValue.parse($0) }.flatMap { j -> APNsCredentials? in
            guard let key = j["key"]?.stringValue, let id = j["key_id"]?.stringValue, let team = j["team_id"]?.stringValue else { return nil }
            let environment = j["environment"]?.stringValue.flatMap(APNsCredentials.Environment.init(rawValue:)) ?? .production
            return APNsCredentials(keyPEM: key, keyID: id, teamID: team, environment: environment)
        }
        let fcm = try fcmColumn.map(open).flatMap { try? JSONValue.parse($0) }.flatMap { j -> FCMCredentials? in
            guard let sa = j["service_account"]?.stringValue, let p = j["project_id"]?.stringValue else { return nil }
            return FCMCredentials(serviceAccountJSON: sa, projectID: p, clientEmail: j["client_email"]?.stringValue ?? "")
        }
        return ServerApp(id: id, name: name, bundleID: bundleID, fcmProjectID: fcmProjectID, apns: apns, fcm: fcm, revision: revision)
    }

    /// A credentials column as it should be stored now: sealed when it was not (nil: leave it), after checking
    /// that a sealed one opens with this key. Without a key, a sealed column is an error naming the app.
    func resealed(_ stored: String, app: String) throws -> String? {
        if CredentialSealer.isSealed(stored) {
            guard let sealer else { throw CredentialSealer.Problem(description: "app \(app): its credentials are sealed, and no credentials key was given") }
            _ = try sealer.open(stored)
            return nil
        }
        return try sealer.map { try $0.seal(stored) }
    }

    /// A stored secret's bytes, and what to store instead when it was not sealed yet.
    func openSecret(_ stored: Data, name: String) throws -> (bytes: [UInt8], replacement: Data?) {
        let text = String(decoding: stored, as: UTF8.self)
        if CredentialSealer.isSealed(text) {
            guard let sealer else { throw CredentialSealer.Problem(description: "the \(name) secret is sealed, and no credentials key was given") }
            guard let raw = Data(base64Encoded: try sealer.open(text)) else {
                throw CredentialSealer.Problem(description: "the \(name) secret does not open to a key")
            }
            return (Array(raw), nil)
        }
        return (Array(stored), try sealer.map { Data(try $0.seal(stored.base64EncodedString()).utf8) })
    }

    /// A new random 32-byte secret, and what to store for it.
    func newSecret() throws -> (bytes: [UInt8], stored: Data) {
        let fresh = SymmetricKey(size: .bits256).withUnsafeBytes { Array($0) }
        return (fresh, try sealer.map { Data(try $0.seal(Data(fresh).base64EncodedString()).utf8) } ?? Data(fresh))
    }
}
