import Crypto
import Foundation
import _CryptoExtras

/// Compact JSON Web Tokens as APNs (ES256) and Google's token endpoint (RS256) use them.
public enum JWT {
    /// Base64url without padding (RFC 4648 §5), translated byte by byte from standard base64 (string searches
    /// through Foundation cost more than the encoding: a Web Push send encodes and decodes several keys).
    public static func base64URL(_ data: some DataProtocol) -> String {
        var bytes = Array(Data(data).base64EncodedData())
        while bytes.last == UInt8(ascii: "=") { bytes.removeLast() }
        for i in bytes.indices {
            if bytes[i] == UInt8(ascii: "+") {
                bytes[i] = UInt8(ascii: "-")
            } else if bytes[i] == UInt8(ascii: "/") {
                bytes[i] = UInt8(ascii: "_")
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Decodes base64url with or without padding; nil for any byte outside the alphabet (standard base64's `+`
    /// and `/` included, as before).
    public static func decodeBase64URL(_ s: Substring) -> Data? {
        var bytes = Array(s.utf8)
        for i in bytes.indices {
            if bytes[i] == UInt8(ascii: "-") {
                bytes[i] = UInt8(ascii: "+")
            } else if bytes[i] == UInt8(ascii: "_") {
                bytes[i] = UInt8(ascii: "/")
            }
        }
        while bytes.count % 4 != 0 { bytes.append(UInt8(ascii: "=")) }
        return Data(base64Encoded: Data(bytes))
    }

    /// Signs header and claims (already JSON) with ES256; the signature is the raw 64-byte R||S form.
    public static func es256(header: String, claims: String, key: P256.Signing.PrivateKey) throws -> String {
        let input = base64URL(Data(header.utf8)) + "." + base64URL(Data(claims.utf8))
        let signature = try key.signature(for: Data(input.utf8))
        return input + "." + base64URL(signature.rawRepresentation)
    }

    /// Signs with RS256 (RSASSA-PKCS1-v1_5 with SHA-256).
    public static func rs256(header: String, claims: String, key: _RSA.Signing.PrivateKey) throws -> String {
        let input = base64URL(Data(header.utf8)) + "." + base64URL(Data(claims.utf8))
        let signature = try key.signature(for: Data(input.utf8), padding: .insecurePKCS1v1_5)
        return input + "." + base64URL(signature.rawRepresentation)
    }

    /// The three parts of a token, decoded; nil when it is not a well-formed compact JWT.
    public struct Parts: Sendable {
        public var header: [String: Any] {
            (try? JSONSerialization.jsonObject(with: headerData)) as? [String: Any] ?? [:]
        }
        public var claims: [String: Any] {
            (try? JSONSerialization.jsonObject(with: claimsData)) as? [String: Any] ?? [:]
        }
        public let headerData: Data
        public let claimsData: Data
        public let signature: Data
        public let signingInput: Data

        public init?(_ token: String) {
            let pieces = token.split(separator: ".", omittingEmptySubsequences: false)
            guard pieces.count == 3, let h = decodeBase64URL(pieces[0]), let c = decodeBase64URL(pieces[1]),
                let s = decodeBase64URL(pieces[2])
            else {
                return nil
            }
            headerData = h
            claimsData = c
            signature = s
            signingInput = Data((pieces[0] + "." + pieces[1]).utf8)
        }

        /// Verifies an ES256 signature given raw (R||S) or DER, as APNs accepts both.
        public func verifiesES256(with key: P256.Signing.PublicKey) -> Bool {
            if let raw = try? P256.Signing.ECDSASignature(rawRepresentation: signature),
                key.isValidSignature(raw, for: signingInput)
            {
                return true
            }
            if let der = try? P256.Signing.ECDSASignature(derRepresentation: signature),
                key.isValidSignature(der, for: signingInput)
            {
                return true
            }
            return false
        }

        public func verifiesRS256(with key: _RSA.Signing.PublicKey) -> Bool {
            key.isValidSignature(
                _RSA.Signing.RSASignature(rawRepresentation: signature),
                for: signingInput,
                padding: .insecurePKCS1v1_5
            )
        }
    }
}
