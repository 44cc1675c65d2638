import Foundation
import NIOSSL
import PostgresNIO

/// Where a PostgreSQL database is and how to reach it, read from a URL as libpq writes them:
/// `postgres://USER:PASSWORD@HOST:PORT/DATABASE?sslmode=require` (`postgresql://` too).
///
/// `sslmode` takes libpq's values: `disable`; `prefer` (the default: TLS when the server offers it);
/// `require` (TLS or nothing, the certificate not checked); `verify-ca` (checked against `sslrootcert` or the
/// system's roots); `verify-full` (the host name too). Other query keys: `sslrootcert` (a PEM file),
/// `pool_size` (connections this node opens, default 20), `connect_timeout` (seconds, default 10),
/// `application_name`.
public struct PostgresSettings: Sendable, Equatable {
    public enum TLSMode: String, Sendable, CaseIterable {
        case disable, prefer, require
        case verifyCA = "verify-ca"
        case verifyFull = "verify-full"
    }

    public var host: String
    public var port: Int
    public var user: String
    public var password: String?
    public var database: String
    public var tls: TLSMode
    public var rootCertificateFile: String?
    public var poolSize: Int
    public var connectTimeout: Int
    public var applicationName: String

    /// A problem with the URL, naming the part and the rule (never the password).
    public struct Problem: Error, CustomStringConvertible {
        public var description: String
    }

    /// Whether a database setting names PostgreSQL (anything else is an SQLite file path).
    public static func isPostgresURL(_ s: String) -> Bool { s.hasPrefix("postgres://") || s.hasPrefix("postgresql://") }

    public init(url text: String) throws(Problem) {
        guard Self.isPostgresURL(text), let c = URLComponents(string: text) else {
            throw Problem(description: "database: a PostgreSQL URL is postgres://USER:PASSWORD@HOST:PORT/DATABASE")
        }
        guard let host = c.host, !host.isEmpty else { throw Problem(description: "database: the URL names no host") }
        self.host = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        port = c.port ?? 5432
        guard (1...65535).contains(port) else { throw Problem(description: "database: the port must be 1 to 65535") }
        user = c.percentEncodedUser.flatMap { $0.removingPercentEncoding } ?? "postgres"
        guard !user.isEmpty else { throw Problem(description: "database: the URL names no user") }
        password = c.percentEncodedPassword.flatMap { $0.removingPercentEncoding }
        let path = c.percentEncodedPath.removingPercentEncoding ?? ""
        database = path.hasPrefix("/") ? String(path.dropFirst()) : path
        if database.isEmpty { database = user }
        guard !database.contains("/") else { throw Problem(description: "database: the path is one database name") }
        tls = .prefer
        poolSize = 20
        connectTimeout = 10
        applicationName = "richpush"
        let known: Set<String> = ["sslmode", "sslrootcert", "pool_size", "connect_timeout", "application_name"]
        for item in c.queryItems ?? [] {
            guard known.contains(item.name) else {
                throw Problem(
                    description:
                        "database: unknown URL parameter \(item.name) (known: \(known.sorted().joined(separator: ", ")))"
                )
            }
            let value = item.value ?? ""
            switch item.name {
            case "sslmode":
                guard let m = TLSMode(rawValue: value) else {
                    throw Problem(
                        description:
                            "database: sslmode is one of \(TLSMode.allCases.map(\.rawValue).joined(separator: ", "))"
                    )
                }
                tls = m
            case "sslrootcert": rootCertificateFile = value
            case "pool_size":
                guard let n = Int(value), (1...500).contains(n) else {
                    throw Problem(description: "database: pool_size is 1 to 500")
                }
                poolSize = n
            case "connect_timeout":
                guard let n = Int(value), (1...300).contains(n) else {
                    throw Problem(description: "database: connect_timeout is 1 to 300 seconds")
                }
                connectTimeout = n
            default: applicationName = value
            }
        }
    }

    /// The URL with the password hidden, for logs and answers.
    public var redacted: String {
        "postgres://\(user)\(password == nil ? "" : ":***")@\(host.contains(":") ? "[\(host)]" : host):\(port)/\(database)?sslmode=\(tls.rawValue)"
    }

    func tlsConfiguration() throws -> PostgresClient.Configuration.TLS {
        var t = TLSConfiguration.makeClientConfiguration()
        switch tls {
        case .disable: return .disable
        case .prefer, .require: t.certificateVerification = .none
        case .verifyCA: t.certificateVerification = .noHostnameVerification
        case .verifyFull: t.certificateVerification = .fullVerification
        }
        if let file = rootCertificateFile {
            t.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(file))
        }
        return tls == .prefer ? .prefer(t) : .require(t)
    }

    /// The pooled client's configuration.
    public func clientConfiguration() throws -> PostgresClient.Configuration {
        var c = PostgresClient.Configuration(
            host: host,
            port: port,
            username: user,
            password: password,
            database: database,
            tls: try tlsConfiguration()
        )
        c.options.maximumConnections = poolSize
        c.options.connectTimeout = .seconds(connectTimeout)
        c.options.additionalStartupParameters = startupParameters
        return c
    }

    /// Sent when a connection opens. The keepalives make the server notice within about 25 seconds that a node
    /// went away without closing its connections (a network partition): its session ends, and with it the
    /// leader's advisory lock, which another node then takes.
    var startupParameters: [(String, String)] {
        [
            ("application_name", applicationName), ("tcp_keepalives_idle", "10"), ("tcp_keepalives_interval", "5"),
            ("tcp_keepalives_count", "3"),
        ]
    }

    /// A single connection's configuration (the listener's and the leader's, which live outside the pool).
    public func connectionConfiguration() throws -> PostgresConnection.Configuration {
        let tlsMode: PostgresConnection.Configuration.TLS
        switch tls {
        case .disable: tlsMode = .disable
        default:
            var t = TLSConfiguration.makeClientConfiguration()
            t.certificateVerification =
                tls == .verifyFull ? .fullVerification : tls == .verifyCA ? .noHostnameVerification : .none
            if let file = rootCertificateFile { t.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(file)) }
            let context = try NIOSSLContext(configuration: t)
            tlsMode = tls == .prefer ? .prefer(context) : .require(context)
        }
        var c = PostgresConnection.Configuration(
            host: host,
            port: port,
            username: user,
            password: password,
            database: database,
            tls: tlsMode
        )
        c.options.connectTimeout = .seconds(Int64(connectTimeout))
        c.options.additionalStartupParameters = startupParameters
        return c
    }
}
