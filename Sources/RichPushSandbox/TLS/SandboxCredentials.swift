import Crypto
import Foundation
import SwiftASN1
import X509
import _CryptoExtras

/// Everything a client needs to talk to the emulators as if they were Apple and Google: a private CA, a
/// server certificate for 127.0.0.1 and localhost, an APNs `.p8` signing key with its team and key ids, and an
/// FCM service-account file. Generated fresh, or read back from a folder.
public struct SandboxCredentials: Sendable {
    public var caCertificatePEM: String
    public var serverCertificatePEM: String
    public var serverKeyPEM: String
    /// A client certificate for APNs certificate authentication against the emulator.
    public var apnsClientCertificatePEM: String
    public var apnsClientKeyPEM: String
    public var apnsKeyPEM: String
    public var apnsKeyID: String
    public var apnsTeamID: String
    public var fcmProjectID: String
    public var fcmClientEmail: String
    public var fcmPrivateKeyID: String
    public var fcmPrivateKeyPEM: String

    public var apnsPublicKey: P256.Signing.PublicKey {
        (try! P256.Signing.PrivateKey(pemRepresentation: apnsKeyPEM)).publicKey
    }
    public var fcmPublicKey: _RSA.Signing.PublicKey {
        (try! _RSA.Signing.PrivateKey(pemRepresentation: fcmPrivateKeyPEM)).publicKey
    }

    /// Makes new keys and certificates. RSA key generation takes a moment.
    public static func generate(projectID: String = "richpush-sandbox") throws -> SandboxCredentials {
        let caKey = P256.Signing.PrivateKey()
        let caName = try DistinguishedName {
            CommonName("RichPush Sandbox CA")
            OrganizationName("RichPush sandbox")
        }
        let now = Date()
        let ca = try Certificate(
            version: .v3,
            serialNumber: .init(),
            publicKey: .init(caKey.publicKey),
            notValidBefore: now.addingTimeInterval(-3600),
            notValidAfter: now.addingTimeInterval(3650 * 86400),
            issuer: caName,
            subject: caName,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                SubjectKeyIdentifier(hash: .init(caKey.publicKey))
            },
            issuerPrivateKey: .init(caKey)
        )
        let serverKey = P256.Signing.PrivateKey()
        let serverName = try DistinguishedName { CommonName("localhost") }
        let server = try Certificate(
            version: .v3,
            serialNumber: .init(),
            publicKey: .init(serverKey.publicKey),
            notValidBefore: now.addingTimeInterval(-3600),
            notValidAfter: now.addingTimeInterval(825 * 86400),
            issuer: caName,
            subject: serverName,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true, keyEncipherment: true))
                try ExtendedKeyUsage([.serverAuth])
                SubjectAlternativeNames([
                    .dnsName("localhost"), .ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1])),
                    .ipAddress(ASN1OctetString(contentBytes: ArraySlice(Array(repeating: 0, count: 15) + [1]))),
                ])
            },
            issuerPrivateKey: .init(caKey)
        )
        let clientKey = P256.Signing.PrivateKey()
        let client = try Certificate(
            version: .v3,
            serialNumber: .init(),
            publicKey: .init(clientKey.publicKey),
            notValidBefore: now.addingTimeInterval(-3600),
            notValidAfter: now.addingTimeInterval(365 * 86400),
            issuer: caName,
            subject: try DistinguishedName {
                CommonName("Apple Push Services: com.example.app")
                OrganizationName("RichPush sandbox")
            },
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                try ExtendedKeyUsage([.clientAuth])
            },
            issuerPrivateKey: .init(caKey)
        )
        let rsa = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        func pem(_ c: Certificate) throws -> String {
            var s = DER.Serializer()
            try s.serialize(c)
            return PEMDocument(type: "CERTIFICATE", derBytes: s.serializedBytes).pemString
        }
        return SandboxCredentials(
            caCertificatePEM: try pem(ca),
            serverCertificatePEM: try pem(server),
            serverKeyPEM: serverKey.pemRepresentation,
            apnsClientCertificatePEM: try pem(client),
            apnsClientKeyPEM: clientKey.pemRepresentation,
            apnsKeyPEM: P256.Signing.PrivateKey().pemRepresentation,
            apnsKeyID: randomID(10),
            apnsTeamID: randomID(10),
            fcmProjectID: projectID,
            fcmClientEmail: "firebase-adminsdk@\(projectID).iam.gserviceaccount.com",
            fcmPrivateKeyID: randomHex(40),
            fcmPrivateKeyPEM: rsa.pkcs8PEMRepresentation
        )
    }

    static func randomID(_ n: Int) -> String {
        let alphabet = Array("ABCDEFGHJKLMNPQRSTUVWXYZ23456789")
        return String((0..<n).map { _ in alphabet.randomElement()! })
    }

    static func randomHex(_ n: Int) -> String { String((0..<n).map { _ in "0123456789abcdef".randomElement()! }) }

    /// The service-account JSON a Google client reads, with `token_uri` pointing at the emulator.
    public func serviceAccountJSON(tokenURI: String) -> String {
        let o: [String: String] = [
            "type": "service_account", "project_id": fcmProjectID, "private_key_id": fcmPrivateKeyID,
            "private_key": fcmPrivateKeyPEM,
            "client_email": fcmClientEmail, "client_id": "100000000000000000000", "token_uri": tokenURI,
            "auth_uri": "https://127.0.0.1/o/oauth2/auth", "auth_provider_x509_cert_url": "https://127.0.0.1/certs",
        ]
        let data = try! JSONSerialization.data(
            withJSONObject: o,
            options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        )
        return String(decoding: data, as: UTF8.self)
    }

    static let files = [
        "ca.pem", "server.pem", "server-key.pem", "apns-key.p8", "apns.json", "fcm-private-key.pem", "fcm.json",
    ]

    /// Writes the credentials into a folder; returns the path of each file by name.
    @discardableResult
    public func write(to directory: URL, tokenURI: String) throws -> [String: URL] {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        func put(_ name: String, _ text: String) throws -> URL {
            let url = directory.appendingPathComponent(name)
            try Data(text.utf8).write(to: url)
            return url
        }
        let apnsMeta = #"{"key_id":"\#(apnsKeyID)","team_id":"\#(apnsTeamID)"}"#
        return [
            "ca": try put("ca.pem", caCertificatePEM), "server": try put("server.pem", serverCertificatePEM),
            "server-key": try put("server-key.pem", serverKeyPEM), "apns-key": try put("apns-key.p8", apnsKeyPEM),
            "apns-client-certificate": try put("apns-client.pem", apnsClientCertificatePEM),
            "apns-client-key": try put("apns-client-key.pem", apnsClientKeyPEM),
            "apns": try put("apns.json", apnsMeta), "fcm-key": try put("fcm-private-key.pem", fcmPrivateKeyPEM),
            "service-account": try put("service-account.json", serviceAccountJSON(tokenURI: tokenURI)),
        ]
    }

    /// Reads credentials written by ``write(to:tokenURI:)``.
    public static func read(from directory: URL) throws -> SandboxCredentials {
        func get(_ name: String) throws -> String {
            String(decoding: try Data(contentsOf: directory.appendingPathComponent(name)), as: UTF8.self)
        }
        let apns = try JSONSerialization.jsonObject(with: Data(try get("apns.json").utf8)) as? [String: String] ?? [:]
        let sa =
            try JSONSerialization.jsonObject(with: Data(try get("service-account.json").utf8)) as? [String: String]
            ?? [:]
        return SandboxCredentials(
            caCertificatePEM: try get("ca.pem"),
            serverCertificatePEM: try get("server.pem"),
            serverKeyPEM: try get("server-key.pem"),
            apnsClientCertificatePEM: try get("apns-client.pem"),
            apnsClientKeyPEM: try get("apns-client-key.pem"),
            apnsKeyPEM: try get("apns-key.p8"),
            apnsKeyID: apns["key_id"] ?? "",
            apnsTeamID: apns["team_id"] ?? "",
            fcmProjectID: sa["project_id"] ?? "",
            fcmClientEmail: sa["client_email"] ?? "",
            fcmPrivateKeyID: sa["private_key_id"] ?? "",
            fcmPrivateKeyPEM: try get("fcm-private-key.pem")
        )
    }
}
