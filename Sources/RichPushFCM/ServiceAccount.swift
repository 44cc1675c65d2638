import Foundation
import RichPushCore
import _CryptoExtras

/// A Google service account, as the JSON file from the Firebase console holds it.
public struct ServiceAccount: Sendable {
    public var projectID: String
    public var clientEmail: String
    public var privateKeyID: String?
    public var privateKey: _RSA.Signing.PrivateKey
    public var tokenURI: String

    public struct Problem: Error, CustomStringConvertible {
        public var description: String
        public init(description: String) { self.description = description }
    }

    /// Reads the JSON; the private key never appears in errors.
    public init(json data: Data) throws {
        guard case .object(let o)? = try? JSONValue.parse(data) else {
            throw Problem(description: "service account: not a JSON object")
        }
        func field(_ name: String) throws -> String {
            guard let v = o[name]?.stringValue, !v.isEmpty else {
                throw Problem(description: "service account: missing \(name)")
            }
            return v
        }
        projectID = try field("project_id")
        clientEmail = try field("client_email")
        let parts = clientEmail.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else {
            throw Problem(description: "service account: client_email is not an email address")
        }
        privateKeyID = o["private_key_id"]?.stringValue
        switch o["token_uri"] {
        case nil: tokenURI = "https://oauth2.googleapis.com/token"
        case .string(let s)?: tokenURI = s
        default: throw Problem(description: "service account: token_uri is not a string")
        }
        if let type = o["type"], type != .string("service_account") {
            throw Problem(description: "service account: type is not service_account")
        }
        if let id = o["private_key_id"], id.stringValue == nil {
            throw Problem(description: "service account: private_key_id is not a string")
        }
        do { privateKey = try _RSA.Signing.PrivateKey(pemRepresentation: try field("private_key")) } catch is Problem {
            throw Problem(description: "service account: missing private_key")
        } catch {
            throw Problem(description: "service account: private_key is not an RSA key in PEM")
        }
    }

    public init(contentsOf url: URL) throws { try self.init(json: try Data(contentsOf: url)) }

    /// Google's documented OAuth 2.0 token endpoints for service accounts (the second is written in older files).
    public static let googleTokenEndpoints: Set<String> = [
        "https://oauth2.googleapis.com/token", "https://accounts.google.com/o/oauth2/token",
    ]

    /// True when `uri` is one of ``googleTokenEndpoints``. A service account is data a user supplies: a server
    /// that followed any `token_uri` would connect wherever the user chose (loopback, the internal network).
    public static func isGoogleTokenEndpoint(_ uri: String) -> Bool { googleTokenEndpoints.contains(uri) }
}
