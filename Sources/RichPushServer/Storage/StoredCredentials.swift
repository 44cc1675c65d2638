import Crypto
import Foundation
import RichPushCore

/// How an app's credentials and the server's secrets are kept in database columns, whatever the database: JSON
/// text (a secret: its bytes), sealed with the ``CredentialSealer`` when there is one. Values stored before sealing
/// was on are read as they are and sealed when a store opens.
struct StoredCredentials: Sendable {
    let sealer: CredentialSealer?

    /// The `apns`, `fcm` and `webpush` columns of an app.
    func columns(_ app: ServerApp) throws -> (apns: String?, fcm: String?, webPush: String?) {
        let apns: String? = app.apns.map {
            JSONValue.object([
                "key": .string($0.keyPEM), "key_id": .string($0.keyID), "team_id": .string($0.teamID),
                "environment": .string($0.environment.rawValue),
            ]).jsonString
        }
        let fcm: String? = app.fcm.map {
            JSONValue.object([
                "service_account": .string($0.serviceAccountJSON), "project_id": .string($0.projectID),
                "client_email": .string($0.clientEmail),
            ]).jsonString
        }
        let webPush: String? = app.webPush.map {
            var o: [String: JSONValue] = [
                "private_key": .string(Data($0.privateKey).base64EncodedString()), "subject": .string($0.subject),
            ]
            if let d = $0.defaultURL { o["default_url"] = .string(d) }
            return JSONValue.object(o).jsonString
        }
        guard let sealer else { return (apns, fcm, webPush) }
        return (try apns.map(sealer.seal), try fcm.map(sealer.seal), try webPush.map(sealer.seal))
    }

    /// An app from its columns.
    func app(
        id: String,
        name: String,
        bundleID: String,
        fcmProjectID: String?,
        apns apnsColumn: String?,
        fcm fcmColumn: String?,
        webPush webPushColumn: String?,
        revision: Int
    ) throws -> ServerApp {
        let open: (String) throws -> String = { [sealer] in try sealer?.open($0) ?? $0 }
        // A column that is there but unreadable is an error, not "no credentials": read as missing, the app would
        // send with the sandbox's credentials or fail every delivery with a reason that hides the cause.
        func unreadable(_ column: String, _ why: String) -> UnreadableCredentials {
            UnreadableCredentials(appID: id, column: column, reason: why)
        }
        let apns = try apnsColumn.map(open).map { text -> APNsCredentials in
            let j: JSONValue
            do { j = try JSONValue.parse(text) } catch { throw unreadable("apns", "not JSON: \(error)") }
            guard let key = j["key"]?.stringValue, let id = j["key_id"]?.stringValue,
                let team = j["team_id"]?.stringValue
            else { throw unreadable("apns", "key, key_id or team_id is missing") }
            let environment =
                j["environment"]?.stringValue.flatMap(APNsCredentials.Environment.init(rawValue:)) ?? .production
            return APNsCredentials(keyPEM: key, keyID: id, teamID: team, environment: environment)
        }
        let fcm = try fcmColumn.map(open).map { text -> FCMCredentials in
            let j: JSONValue
            do { j = try JSONValue.parse(text) } catch { throw unreadable("fcm", "not JSON: \(error)") }
            guard let sa = j["service_account"]?.stringValue, let p = j["project_id"]?.stringValue else {
                throw unreadable("fcm", "service_account or project_id is missing")
            }
            return FCMCredentials(
                serviceAccountJSON: sa,
                projectID: p,
                clientEmail: j["client_email"]?.stringValue ?? ""
            )
        }
        let webPush = try webPushColumn.map(open).map { text -> WebPushCredentials in
            let j: JSONValue
            do { j = try JSONValue.parse(text) } catch { throw unreadable("webpush", "not JSON: \(error)") }
            guard let key = j["private_key"]?.stringValue.flatMap({ Data(base64Encoded: $0) }), key.count == 32,
                let subject = j["subject"]?.stringValue
            else { throw unreadable("webpush", "private_key or subject is missing") }
            guard (try? P256.Signing.PrivateKey(rawRepresentation: key)) != nil else {
                throw unreadable("webpush", "private_key is not a P-256 private key")
            }
            return WebPushCredentials(
                privateKey: Array(key),
                subject: subject,
                defaultURL: j["default_url"]?.stringValue
            )
        }
        return ServerApp(
            id: id,
            name: name,
            bundleID: bundleID,
            fcmProjectID: fcmProjectID,
            apns: apns,
            fcm: fcm,
            webPush: webPush,
            revision: revision
        )
    }

    /// A credentials column as it should be stored now: sealed when it was not (nil: leave it), after checking
    /// that a sealed one opens with this key. Without a key, a sealed column is an error naming the app.
    func resealed(_ stored: String, app: String) throws -> String? {
        if CredentialSealer.isSealed(stored) {
            guard let sealer else {
                throw CredentialSealer.Problem(
                    description: "app \(app): its credentials are sealed, and no credentials key was given"
                )
            }
            _ = try sealer.open(stored)
            return nil
        }
        return try sealer.map { try $0.seal(stored) }
    }

    /// A stored secret's bytes, and what to store instead when it was not sealed yet.
    func openSecret(_ stored: Data, name: String) throws -> (bytes: [UInt8], replacement: Data?) {
        let text = String(decoding: stored, as: UTF8.self)
        if CredentialSealer.isSealed(text) {
            guard let sealer else {
                throw CredentialSealer.Problem(
                    description: "the \(name) secret is sealed, and no credentials key was given"
                )
            }
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

/// An app's stored credentials column that cannot be read (not JSON, or a field missing): the database was changed
/// outside the server, or the sealing key is not the one the column was sealed with. Never holds the credentials.
public struct UnreadableCredentials: Error, CustomStringConvertible {
    public var appID: String
    public var column: String
    public var reason: String
    public var description: String { "app \(appID): the stored \(column) credentials cannot be read (\(reason))" }
}
