import Crypto
import Foundation
import NIOPosix
import RichPushCore
import RichPushSandbox
import RichPushServer
import RichPushTransport
import RichPushWebPush

/// Sends to browsers' subscriptions through the server's Web Push provider: the same rendering, encryption, VAPID
/// token and outbound address policy as a delivery.
struct WebPushTargetSender: TargetSender {
    let provider = "webpush"
    let sender: WebPushProvider
    let app: ServerApp
    let message: PushMessage

    func send(_ target: SendTarget) async -> Attempt {
        guard case .token(let token) = target else {
            return .failed(.never, reason: "not-a-subscription", detail: "Web Push sends to subscriptions only")
        }
        switch await sender.send(token: token, message: message, app: app, receiptURL: nil) {
        case .delivered(let id): return .delivered(providerID: id)
        case .failed(let decision, let reason): return .failed(decision, reason: reason, detail: Self.advice(reason))
        }
    }

    static func advice(_ reason: String) -> String? {
        switch reason {
        case "webpush_404", "webpush_410": return "the subscription is gone (the user unsubscribed): delete it"
        case "webpush_401", "webpush_403":
            return "the push service refused the VAPID token: the subscription was made with another key"
        case "webpush_413", "webpush_payload_too_large": return "the message is over Web Push's 4,096 bytes"
        case "webpush_429": return "the push service asks to slow down"
        case _ where reason.hasPrefix("webpush_address_refused"):
            return "the endpoint's address is internal: not connected to"
        default: return DeliveryReasons.meaning(reason)
        }
    }
}

extension WebPushOptions {
    /// The key file and the subject, checked before anything is fetched or sent.
    @discardableResult
    func checked() throws -> (keyFile: String, subject: String) {
        guard let key, let subject else {
            throw SendFailure.usage("--webpush-subscription needs --vapid-key and --vapid-subject")
        }
        do { try VAPID.checkSubject(subject) } catch {
            throw SendFailure.usage("--vapid-subject is a mailto: or https: URL push services can reach you at")
        }
        return (key, subject)
    }
}

extension DirectSend {
    /// Reads the subscriptions and the VAPID key and sets up the sender (its own event loop).
    mutating func setUpWebPush(trust: TLSTrust, sandbox: Bool) throws {
        let o = command.webPush
        let (keyFile, subject) = try o.checked()
        let key = try Self.vapidKey(try readText(keyFile, option: "--vapid-key"), file: keyFile)
        for file in o.subscriptions {
            for (i, json) in try Self.subscriptions(try readText(file, option: "--webpush-subscription")).enumerated() {
                do {
                    subscriptions.append(try WebPushSubscription(json: json).token)
                } catch {
                    throw SendFailure.usage("--webpush-subscription \(file), subscription \(i + 1): \(error)")
                }
            }
        }
        guard !subscriptions.isEmpty else { throw SendFailure.usage("--webpush-subscription: no subscriptions") }
        var sandboxTrust = trust
        if sandbox, let dir = command.sandbox {
            do {
                let creds = try SandboxCredentials.read(from: URL(fileURLWithPath: dir, isDirectory: true))
                sandboxTrust = .certificateAuthority(pem: creds.caCertificatePEM)
            } catch { throw SendFailure.usage("--sandbox \(dir): \(error)") }
        }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let sender = WebPushProvider(
            .init(
                // The sandbox's push service is on loopback; anywhere else, internal addresses are refused.
                policy: AddressPolicy(allowAll: sandbox),
                trust: sandboxTrust,
                connectionsPerOrigin: min(command.output.connections, 8),
                // --timeout bounds each connection as it does each answer (it is checked to be 1 to 300 s).
                connectTimeout: .nanoseconds(Int64(command.output.timeout * 1e9)),
                requestTimeout: .nanoseconds(Int64(command.output.timeout * 1e9))
            ),
            eventLoopGroup: group
        )
        let app = ServerApp(
            id: "cli",
            name: "cli",
            bundleID: "",
            webPush: WebPushCredentials(privateKey: Array(key.rawRepresentation), subject: subject)
        )
        webPush = WebPushTargetSender(sender: sender, app: app, message: message)
        clients.append { await sender.shutdown() }
        clients.append { try? await group.shutdownGracefully() }
    }

    /// A PEM P-256 private key (SEC 1 or PKCS #8), or the 32 raw bytes in base64url.
    static func vapidKey(_ text: String, file: String) throws -> P256.Signing.PrivateKey {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        if trimmed.hasPrefix("-----BEGIN") {
            if let k = try? P256.Signing.PrivateKey(pemRepresentation: trimmed) { return k }
        } else if let raw = JWT.decodeBase64URL(Substring(trimmed)), raw.count == 32,
            let k = try? P256.Signing.PrivateKey(rawRepresentation: raw)
        {
            return k
        }
        // The file's contents are never printed.
        throw SendFailure.usage(
            "--vapid-key \(file) is not a P-256 private key (PEM, or 32 bytes in base64url)"
        )
    }

    /// One subscription object, a JSON array of them, or one per line.
    static func subscriptions(_ text: String) throws -> [JSONValue] {
        if let whole = try? JSONValue.parse(Array(text.utf8)) {
            if case .array(let all) = whole { return all }
            return [whole]
        }
        return try text.split(whereSeparator: \.isNewline).filter { !$0.allSatisfy(\.isWhitespace) }.map {
            do { return try JSONValue.parse(Array($0.utf8)) } catch {
                throw SendFailure.usage("--webpush-subscription: a line is not JSON")
            }
        }
    }
}
