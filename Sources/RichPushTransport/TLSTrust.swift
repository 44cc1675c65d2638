import NIOSSL

/// Which servers a client trusts.
public enum TLSTrust: Sendable {
    /// The system's trust store (production).
    case system
    /// Only certificates signed by this CA (the sandbox), PEM.
    case certificateAuthority(pem: String)
    /// No verification at all: for a local emulator only.
    case insecureNoVerification

    func apply(to config: inout TLSConfiguration) throws {
        switch self {
        case .system: break
        case .certificateAuthority(let pem):
            config.trustRoots = .certificates(try NIOSSLCertificate.fromPEMBytes(Array(pem.utf8)))
        case .insecureNoVerification:
            config.certificateVerification = .none
        }
    }
}

/// A client certificate with its key, for APNs certificate authentication.
public struct ClientIdentity: Sendable {
    public var certificateChainPEM: String
    public var privateKeyPEM: String

    public init(certificateChainPEM: String, privateKeyPEM: String) {
        self.certificateChainPEM = certificateChainPEM
        self.privateKeyPEM = privateKeyPEM
    }
}
