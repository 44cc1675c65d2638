import Foundation
import RichPushServer
import RichPushTestSupport
import Testing

/// The database URL: what it means, every refusal naming its part, the password never shown, and no string at all
/// that traps.
@Suite struct PostgresSettingsTests {
    @Test func aFullURLIsRead() throws {
        let s = try PostgresSettings(
            url:
                "postgresql://push%40er:p%3Ass@db.internal:6543/richpush?sslmode=verify-full&pool_size=40&connect_timeout=3&application_name=node-a"
        )
        #expect(
            s.user == "push@er" && s.password == "p:ss" && s.host == "db.internal" && s.port == 6543
                && s.database == "richpush"
        )
        #expect(s.tls == .verifyFull && s.poolSize == 40 && s.connectTimeout == 3 && s.applicationName == "node-a")
        #expect(!s.redacted.contains("p:ss") && s.redacted.contains("***"))
    }

    @Test func defaultsFollowLibpq() throws {
        let s = try PostgresSettings(url: "postgres://alice@localhost")
        #expect(s.port == 5432 && s.database == "alice" && s.tls == .prefer && s.password == nil && s.poolSize == 20)
        let v6 = try PostgresSettings(url: "postgres://u@[::1]:5433/db")
        #expect(v6.host == "::1" && v6.port == 5433 && v6.redacted.hasPrefix("postgres://u@[::1]:5433/db"))
    }

    @Test func refusalsNameThePartAndTheRule() {
        for (url, words) in [
            ("mysql://u@h/db", "postgres://USER"), ("postgres://u@/db", "no host"), ("postgres://u@h:0/db", "port"),
            ("postgres://u@h/db?sslmode=maybe", "sslmode is one of"), ("postgres://u@h/db?pool_size=0", "pool_size"),
            ("postgres://u@h/db?pool_size=x", "pool_size"),
            ("postgres://u@h/db?connect_timeout=999", "connect_timeout"),
            ("postgres://u@h/db?colour=red", "unknown URL parameter colour"),
            ("postgres://u@h/a/b", "one database name"),
            ("postgres://:secret@h/db", "no user"),
        ] {
            do {
                _ = try PostgresSettings(url: url)
                Issue.record("\(url) was accepted")
            } catch {
                #expect(error.description.contains(words), "\(url): \(error.description)")
                #expect(!error.description.contains("secret"))
            }
        }
    }

    @Test func theConfigurationChecksIt() throws {
        var c = ServerConfiguration()
        try c.apply(environment: [
            "RICHPUSH_DATABASE": "postgres://u@db/richpush", "RICHPUSH_NODE_ID": "node-1", "RICHPUSH_SANDBOX": "0",
        ])
        #expect(
            c.isPostgres && c.nodeID == "node-1" && c.resolvedCredentialsKeyFile == "richpush-credentials.key"
                && c.resolvedMediaDirectory == "richpush-media"
        )
        #expect(throws: ServerConfiguration.Problem.self) {
            try c.apply(json: #"{"database": "postgres://u@db/r?sslmode=nope"}"#)
        }
        #expect(throws: ServerConfiguration.Problem.self) { try c.apply(json: #"{"node_id": "a b"}"#) }
    }

    /// Random strings, and random edits of a good URL: a setting or a refusal, never a trap.
    @Test func noStringTraps() {
        var r = SeededRandom(seed: 14)
        let good = Array("postgres://user:pw@host:5432/db?sslmode=require&pool_size=10".unicodeScalars)
        let alphabet = Array("postgres:/@?&=%[]:.0123456789abcdefxyz-_~#\u{0}\u{7F}é漢 ".unicodeScalars)
        var accepted = 0
        for _ in 0..<20_000 {
            var scalars = good
            for _ in 0..<(1 + Int(r.next() % 6)) {
                let i = Int(r.next() % UInt64(scalars.count + 1))
                switch r.next() % 3 {
                case 0 where i < scalars.count: scalars.remove(at: i)
                case 1 where i < scalars.count: scalars[i] = alphabet[Int(r.next() % UInt64(alphabet.count))]
                default: scalars.insert(alphabet[Int(r.next() % UInt64(alphabet.count))], at: min(i, scalars.count))
                }
            }
            var text = ""
            text.unicodeScalars.append(contentsOf: scalars)
            if let s = try? PostgresSettings(url: text) {
                accepted += 1
                #expect((1...65535).contains(s.port) && !s.host.isEmpty, "\(text)")
                #expect(
                    s.password.map { $0 == "***" || !s.redacted.contains(":" + $0 + "@") } ?? true,
                    "\(text) → \(s.redacted)"
                )
            }
        }
        #expect(accepted > 0 && accepted < 20_000)
    }
}
