import Foundation
import RichPushAPNs
import RichPushCore
import RichPushFCM

/// An app's create (`POST /v1/apps`) or change (`PATCH /v1/apps/{app}`) request, decoded at the edge: every field
/// typed and shaped, the APNs key parsed and the service account read before anything is stored, every problem
/// answered at once.
struct AppBody {
    /// A field of a change: left as it is, removed (`null`), or set.
    enum Change<Value> {
        case keep
        case remove
        case set(Value)
    }

    var name: String?
    var bundleID: String?
    var fcmProjectID: Change<String> = .keep
    var apns: Change<APNsCredentials> = .keep
    var fcm: Change<FCMCredentials> = .keep

    static let fields: Set<String> = ["name", "bundle_id", "fcm_project_id", "apns", "fcm"]
    static let nameLengths = 1...200

    /// An iOS bundle id, which is also the `apns-topic`: letters, digits, `-` and `.`, at most 155 characters.
    static func isBundleID(_ s: String) -> Bool {
        s.utf8.count <= 155 && s.utf8.first != UInt8(ascii: ".")
            && s.utf8.allSatisfy { $0.isASCIIAlphanumeric || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: ".") }
    }

    /// A Google Cloud project id: 6 to 30 of lowercase letters, digits and `-`, starting with a letter and not
    /// ending with `-`, optionally after a domain and `:` (`example.com:project`). It becomes part of FCM's URL
    /// path, so nothing else may pass.
    static func isProjectID(_ s: String) -> Bool {
        var id = Substring(s)
        if let colon = s.lastIndex(of: ":") {
            let domain = s[..<colon]
            guard !domain.isEmpty, domain.utf8.count <= 63,
                domain.utf8.allSatisfy({
                    ($0.isASCIIAlphanumeric && !$0.isASCIIUppercase) || $0 == UInt8(ascii: "-")
                        || $0 == UInt8(ascii: ".")
                })
            else { return false }
            id = s[s.index(after: colon)...]
        }
        let u = Array(id.utf8)
        guard (6...30).contains(u.count), let first = u.first, let last = u.last else { return false }
        return first.isASCIILowercaseLetter && last != UInt8(ascii: "-")
            && u.allSatisfy { $0.isASCIILowercaseLetter || $0.isASCIIDigit || $0 == UInt8(ascii: "-") }
    }

    static func decode(
        _ body: JSONValue,
        creating: Bool,
        tokenEndpoints: Set<String>
    ) throws(APIError) -> AppBody {
        var r = FieldReader(strict: true, refusesNUL: true)
        guard case .object(let o) = body else {
            throw APIError(
                .invalid,
                "the body must be an object",
                issues: [.init(path: "", rule: "type", message: "expected an object, found \(body.typeName)")]
            )
        }
        r.rejectUnknown(o, known: fields, at: "")
        var a = AppBody()
        a.name = r.text(o, "name", at: "", required: creating, lengths: nameLengths, shape: FieldReader.label)
        a.bundleID = r.text(
            o,
            "bundle_id",
            at: "",
            required: creating,
            lengths: 1...155,
            shape: (
                "bundle-id", "bundle_id is the app's bundle id (the apns-topic): letters, digits, - and .", isBundleID
            )
        )
        if o["fcm_project_id"] == .null && !creating {
            a.fcmProjectID = .remove
        } else if let p = r.text(
            o,
            "fcm_project_id",
            at: "",
            lengths: 6...100,
            shape: (
                "project-id",
                "fcm_project_id is a Google Cloud project id: 6 to 30 of a-z, 0-9 and -, starting with a letter",
                isProjectID
            )
        ) {
            a.fcmProjectID = .set(p)
        }
        if let v = o["apns"] {
            if v.isNull { a.apns = .remove } else if let c = Credentials.apns(v, into: &r) { a.apns = .set(c) }
        }
        if let v = o["fcm"] {
            if v.isNull {
                a.fcm = .remove
            } else if let c = Credentials.fcm(v, into: &r, tokenEndpoints: tokenEndpoints) {
                a.fcm = .set(c)
            }
        }
        guard r.report.isValid else {
            throw APIError(
                .invalid,
                creating ? "the app is not valid" : "the change is not valid",
                issues: r.report.errors
            )
        }
        return a
    }

    /// The app with this request's fields applied (the service account's project becomes the FCM project).
    func apply(to app: inout ServerApp) {
        if let name { app.name = name }
        if let bundleID { app.bundleID = bundleID }
        switch fcmProjectID {
        case .keep: break
        case .remove: app.fcmProjectID = nil
        case .set(let p): app.fcmProjectID = p
        }
        switch apns {
        case .keep: break
        case .remove: app.apns = nil
        case .set(let c): app.apns = c
        }
        switch fcm {
        case .keep: break
        case .remove: app.fcm = nil
        case .set(let c):
            app.fcm = c
            app.fcmProjectID = c.projectID
        }
    }
}

/// Reads the `apns` and `fcm` credential objects of an app's request, checking that the key and the service
/// account can actually be used before they are stored.
enum Credentials {
    static let apnsFields: Set<String> = ["key", "key_id", "team_id", "environment"]
    static let fcmFields: Set<String> = ["service_account"]

    /// A Key ID or Team ID: 10 letters and digits.
    static func isAppleID(_ s: String) -> Bool { s.utf8.count == 10 && s.utf8.allSatisfy(\.isASCIIAlphanumeric) }

    /// `"apns": {"key": PEM, "key_id", "team_id", "environment": production|development}`.
    static func apns(_ a: JSONValue, into r: inout FieldReader) -> APNsCredentials? {
        guard case .object(let o) = a else {
            r.report.add(
                "apns",
                "type",
                "apns must be an object with key, key_id, team_id and environment (or null to remove them)"
            )
            return nil
        }
        let before = r.report.errors.count
        r.rejectUnknown(o, known: apnsFields, at: "apns")
        let keyID = r.text(
            o,
            "key_id",
            at: "apns",
            required: true,
            lengths: 1...100,
            shape: ("apns-key-id", "key_id is the 10-character Key ID of the .p8 key", isAppleID)
        )
        let teamID = r.text(
            o,
            "team_id",
            at: "apns",
            required: true,
            lengths: 1...100,
            shape: ("apns-team-id", "team_id is the 10-character Apple Developer Team ID", isAppleID)
        )
        let environment = r.choice(o, "environment", at: "apns", APNsCredentials.Environment.self)
        let key = r.text(
            o,
            "key",
            at: "apns",
            required: true,
            lengths: 1...8192,
            shape: (
                "apns-p8", "key is not a PEM P-256 private key (.p8)",
                { key in
                    // Only whether the key parses matters here; the refusal names the rule.
                    (try? APNsSigningKey(p8: key, keyID: "KEYID00000", teamID: "TEAMID0000")) != nil
                }
            )
        )
        guard r.report.errors.count == before, let key, let keyID, let teamID else { return nil }
        return APNsCredentials(keyPEM: key, keyID: keyID, teamID: teamID, environment: environment ?? .production)
    }

    /// `"fcm": {"service_account": object or JSON text}`. `tokenEndpoints` are the OAuth endpoints a service
    /// account may name besides Google's (the sandbox's emulator in sandbox mode).
    static func fcm(_ f: JSONValue, into r: inout FieldReader, tokenEndpoints: Set<String> = []) -> FCMCredentials? {
        guard case .object(let o) = f else {
            r.report.add("fcm", "type", "fcm must be an object with service_account (or null to remove it)")
            return nil
        }
        r.rejectUnknown(o, known: fcmFields, at: "fcm")
        let text: String
        switch o["service_account"] {
        case .string(let s)? where s.utf8.count <= 16_384: text = s
        case .object? where o["service_account"]!.jsonString.utf8.count <= 16_384:
            text = o["service_account"]!.jsonString
        case .string?, .object?:
            r.report.add("fcm.service_account", "length", "a service account is at most 16 KB")
            return nil
        default:
            r.report.add(
                "fcm.service_account",
                "required",
                "service_account is the Google service account JSON (object or text)"
            )
            return nil
        }
        do {
            let account = try ServiceAccount(json: Data(text.utf8))
            guard ServiceAccount.isGoogleTokenEndpoint(account.tokenURI) || tokenEndpoints.contains(account.tokenURI)
            else {
                r.report.add(
                    "fcm.service_account.token_uri",
                    "token-endpoint",
                    "token_uri must be Google's token endpoint (https://oauth2.googleapis.com/token)"
                )
                return nil
            }
            guard AppBody.isProjectID(account.projectID) else {
                r.report.add(
                    "fcm.service_account.project_id",
                    "project-id",
                    "project_id is a Google Cloud project id: 6 to 30 of a-z, 0-9 and -, starting with a letter"
                )
                return nil
            }
            return FCMCredentials(
                serviceAccountJSON: text,
                projectID: account.projectID,
                clientEmail: account.clientEmail
            )
        } catch {
            r.report.add("fcm.service_account", "service-account", "not a usable service account: \(error)")
            return nil
        }
    }
}

extension UInt8 {
    var isASCIIDigit: Bool { self >= 48 && self <= 57 }
    var isASCIIUppercase: Bool { self >= 65 && self <= 90 }
    var isASCIILowercaseLetter: Bool { self >= 97 && self <= 122 }
    var isASCIIAlphanumeric: Bool { isASCIIDigit || isASCIIUppercase || isASCIILowercaseLetter }
}
