import ArgumentParser
import Crypto
import Foundation
import RichPushServer

/// `richpush identity mint`: signs an identity proof with a backend's key, as the app's backend does
/// (docs/identity.md), for trying the API by hand and for tests.
struct IdentityCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "identity",
        abstract: "Identity proofs: what an app's backend signs so that a device may register as its user.",
        subcommands: [Mint.self]
    )

    struct Mint: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Sign a proof (an ES256 JWT) for a user of an app and print it.",
            discussion: """
                The key is the private key POST /v1/apps/{app}/identity/keys showed (PEM). The device sends the \
                proof in the RichPush-Identity header of its registration.
                """
        )

        @Option(help: "The identity key's private half (a PEM file).")
        var key: String

        @Option(help: "The app id (the proof's aud).")
        var app: String

        @Option(help: "The user id (the proof's sub).")
        var user: String

        @Option(help: "Seconds the proof is valid (at most 86400).")
        var lifetime: Int = 3600

        @Option(name: .customLong("activity"), help: "An activity id the device may register update tokens for.")
        var activities: [String] = []

        @Option(
            name: .customLong("push-to-start"),
            help: "An ActivityAttributes type the device may register push-to-start tokens for."
        )
        var pushToStart: [String] = []

        func validate() throws {
            guard (1...Int(IdentityProof.maxLifetime)).contains(lifetime) else {
                throw ValidationError("--lifetime is 1 to \(Int(IdentityProof.maxLifetime)) seconds")
            }
        }

        func run() throws {
            let text: String
            do { text = try String(contentsOfFile: key, encoding: .utf8) } catch {
                printError("error: cannot read \(key): \(error.localizedDescription)")
                throw ExitCode(2)
            }
            guard let privateKey = try? P256.Signing.PrivateKey(pemRepresentation: text) else {
                printError("error: \(key) is not a P-256 private key in PEM")
                throw ExitCode(2)
            }
            print(
                try IdentityProof.mint(
                    subject: user,
                    appID: app,
                    key: privateKey,
                    lifetime: TimeInterval(lifetime),
                    activities: activities,
                    pushToStart: pushToStart
                )
            )
        }
    }
}
