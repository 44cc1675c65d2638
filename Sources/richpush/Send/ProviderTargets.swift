import Foundation
import RichPushAPNs
import RichPushCore
import RichPushFCM
import RichPushTransport

/// Sends one rendered APNs request to device tokens: the body is rendered once and shared by every send.
struct APNsTargetSender: TargetSender {
    let client: APNsClient
    let prepared: APNsPreparedRequest
    var provider: String { "apns" }

    init(client: APNsClient, message: PushMessage, bundleID: String) {
        self.client = client
        prepared = APNsPreparedRequest(APNsRenderer(bundleID: bundleID).render(message, deviceToken: ""))
    }

    func send(_ target: FCMTarget) async -> Attempt {
        guard case .token(let token) = target else {
            return .failed(.never, reason: "not-a-token", detail: "APNs sends to device tokens only")
        }
        do {
            let delivery = try await client.send(prepared, to: token)
            return .delivered(providerID: delivery.apnsID)
        } catch {
            let reason = error.reason?.rawValue ?? error.label
            let detail = error.reason?.advice ?? error.transport.map { "could not reach APNs (\($0))" }
            return .failed(error.retry, reason: reason, detail: detail)
        }
    }
}

/// Sends to FCM tokens, topics and conditions (the request names its target, so each is rendered on its own).
struct FCMTargetSender: TargetSender {
    let client: FCMClient
    let renderer: FCMRenderer
    let message: PushMessage
    var provider: String { "fcm" }

    func send(_ target: FCMTarget) async -> Attempt {
        do {
            return .delivered(providerID: try await client.send(renderer.render(message, to: target)))
        } catch {
            return .failed(
                error.retry,
                reason: error.code?.description ?? error.label,
                detail: error.advice ?? error.message
            )
        }
    }
}

/// The options that point a client somewhere else than Apple's and Google's servers, read once.
struct Endpoint: Sendable {
    var host: String
    var port: Int

    /// `https://HOST:PORT` (the port defaults to 443).
    init(url: String, option: String) throws {
        guard let u = URL(string: url), u.scheme == "https", let host = u.host, !host.isEmpty else {
            throw SendFailure.usage("\(option) is an https URL such as https://127.0.0.1:2197")
        }
        let port = u.port ?? 443
        guard (1...65535).contains(port) else { throw SendFailure.usage("\(option): the port is from 1 to 65535") }
        self.host = host
        self.port = port
    }
}

/// A failure that ends the command with a status of its own: 2 for usage and validation.
enum SendFailure: Error, CustomStringConvertible {
    case usage(String)
    case invalid(String)

    var description: String {
        switch self {
        case .usage(let s), .invalid(let s): return s
        }
    }
}

/// Reads a file named by an option, with a message naming the option when it cannot be read.
func readText(_ path: String, option: String) throws -> String {
    guard let data = FileManager.default.contents(atPath: path) else {
        throw SendFailure.usage("\(option): cannot read \(path)")
    }
    return String(decoding: data, as: UTF8.self)
}
