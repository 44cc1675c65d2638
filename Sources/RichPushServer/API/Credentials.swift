import Foundation
import RichPushAPNs
import RichPushCore
import RichPushFCM

/// Reads the `apns` and `fcm` credential objects of an app's create or update request, checking that the key
/// and the service account can actually be used before they are stored.
enum Credentials {
    /// `"apns": {"key": PEM, "key_id", "team_id", "environment": production|development}`;
    /// `"fcm": {"service_account": object or JSON text}`; `null` removes them.
    ///
    /// `tokenEndpoints` are the OAuth endpoints a service account may name besides Google's (the sandbox's
    /// emulator in sandbox mode).
    static func apply(
        _ body: JSONValue, to app: inout ServerApp, issues: inout [ValidationIssue], tokenEndpoints: Set<String> = []
    ) {
        if let a = body["apns"] {
            if a == .null {
                app.apns = nil
            } else if let c = apns(a, issues: &issues) {
                app.apns = c
            }
        }
        if let f = body["fcm"] {
            if f == .null {
                app.fcm = nil
            } else if let c = fcm(f, issues: &issues, tokenEndpoints: tokenEndpoints) {
                app.fcm = c
                app.fcmProjectID = c.projectID
            }
        }
    }

    static func apns(_ a: JSONValue, issues: inout [ValidationIssue]) -> APNsCredentials? {
        guard case .object = a else {
            issues.append(.init(path: "apns", rule: "type", message: "apns must be an object with key, key_id, team_id and environment"))
            return nil
        }
        let before = issues.count
        let key = a["key"]?.stringValue ?? ""
        let keyID = a["key_id"]?.stringValue ?? ""
        let teamID = a["team_id"]?.stringValue ?? ""
        let env = a["environment"]?.stringValue ?? "production"
        let idRule = { (s: String) in s.count == 10 && s.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber) } }
        if !idRule(keyID) { issues.append(.init(path: "apns.key_id", rule: "apns-key-id", message: "key_id is the 10-character Key ID of the .p8 key")) }
        if !idRule(teamID) { issues.append(.init(path: "apns.team_id", rule: "apns-team-id", message: "team_id is the 10-character Apple Developer Team ID")) }
        let environment = APNsCredentials.Environment(rawValue: env)
        if environment == nil { issues.append(.init(path: "apns.environment", rule: "enum", message: "environment must be production or development")) }
        if key.isEmpty {
            issues.append(.init(path: "apns.key", rule: "required", message: "key is the text of the .p8 file (PEM)"))
        } else if (try? APNsSigningKey(p8: key, keyID: "KEYID00000", teamID: "TEAMID0000")) == nil {
            issues.append(.init(path: "apns.key", rule: "apns-p8", message: "key is not a PEM P-256 private key (.p8)"))
        }
        guard issues.count == before, let environment else { return nil }
        return APNsCredentials(keyPEM: key, keyID: keyID, teamID: teamID, environment: environment)
    }

    static func fcm(_ f: JSONValue, issues: inout [ValidationIssue], tokenEndpoints: Set<String> = []) -> FCMCredentials? {
        let text: String
        switch f["service_account"] {
        case .string(let s)?: text = s
        case .object?: text = f["service_account"]!.jsonString
        default:
            issues.append(.init(path: "fcm.service_account", rule: "required", message: "service_account is the Google service account JSON (object or text)"))
            return nil
        }
        do {
            let account = try ServiceAccount(json: Data(text.utf8))
            guard ServiceAccount.isGoogleTokenEndpoint(account.tokenURI) || tokenEndpoints.contains(account.tokenURI) else {
                issues.append(.init(
                    path: "fcm.service_account.token_uri", rule: "token-endpoint",
                    message: "token_uri must be Google's token endpoint (https://oauth2.googleapis.com/token)"))
                return nil
            }
            return FCMCredentials(serviceAccountJSON: text, projectID: account.projectID, clientEmail: account.clientEmail)
        } catch {
            issues.append(.init(path: "fcm.service_account", rule: "service-account", message: "not a usable service account: \(error)"))
            return nil
        }
    }
}
