import Crypto
import Foundation
import RichPushTransport

/// One push to one subscription, ready to send: `POST <endpoint>` with these headers and the encrypted body.
public struct WebPushRequest: Sendable {
    public var endpoint: URL
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]

    /// How soon the push service should deliver (RFC 8030 §5.3).
    public enum Urgency: String, Sendable, CaseIterable {
        case veryLow = "very-low"
        case low
        case normal
        case high
    }

    /// Encrypts `payload` for the subscription and signs a VAPID token for its push service.
    /// - Parameters:
    ///   - ttl: seconds the push service keeps the message while the browser is away (RFC 8030 §5.2, required).
    ///   - topic: a message with the same topic, still undelivered, is replaced by this one (RFC 8030 §5.4): at most
    ///     32 characters of the URL-safe base64 alphabet.
    ///   - vapidLifetime: the token's lifetime, at most a day (RFC 8292 §2).
    public init(
        subscription: WebPushSubscription,
        payload: [UInt8],
        vapidKey: P256.Signing.PrivateKey,
        subject: String,
        ttl: Int,
        urgency: Urgency = .normal,
        topic: String? = nil,
        padding: Int = 0,
        vapidLifetime: TimeInterval = 12 * 3600,
        now: Date = Date()
    ) throws {
        let authorization = try VAPID.authorization(
            endpoint: subscription.endpoint,
            key: vapidKey,
            subject: subject,
            expires: now.addingTimeInterval(min(vapidLifetime, VAPID.maxLifetime)),
            now: now
        )
        try self.init(
            subscription: subscription,
            payload: payload,
            authorization: authorization,
            ttl: ttl,
            urgency: urgency,
            topic: topic,
            padding: padding
        )
    }

    /// The same with a token signed already: what a sender does with ``VAPIDSigner``, one token per push service.
    public init(
        subscription: WebPushSubscription,
        payload: [UInt8],
        signer: VAPIDSigner,
        ttl: Int,
        urgency: Urgency = .normal,
        topic: String? = nil,
        padding: Int = 0,
        now: Date = Date()
    ) throws {
        try self.init(
            subscription: subscription,
            payload: payload,
            authorization: try signer.authorization(for: subscription.endpoint, now: now),
            ttl: ttl,
            urgency: urgency,
            topic: topic,
            padding: padding
        )
    }

    init(
        subscription: WebPushSubscription,
        payload: [UInt8],
        authorization: String,
        ttl: Int,
        urgency: Urgency,
        topic: String?,
        padding: Int
    ) throws {
        guard ttl >= 0, ttl <= 2_419_200 else {
            throw WebPushEncryption.Failure("ttl", "ttl must be 0 to 2419200 seconds (28 days)")
        }
        if let topic {
            guard Self.isValidTopic(topic) else {
                throw WebPushEncryption.Failure(
                    "topic",
                    "topic must be 1 to 32 characters of A-Z, a-z, 0-9, - and _ (RFC 8030 §5.4)"
                )
            }
        }
        endpoint = subscription.endpoint
        body = try subscription.encrypt(payload, padding: padding)
        headers = [
            ("ttl", String(ttl)), ("urgency", urgency.rawValue), ("content-encoding", "aes128gcm"),
            ("content-type", "application/octet-stream"), ("authorization", authorization),
        ]
        if let topic { headers.append(("topic", topic)) }
    }

    /// A topic as RFC 8030 §5.4 allows it: 1 to 32 characters of the URL-safe base64 alphabet.
    public static func isValidTopic(_ topic: String) -> Bool {
        !topic.isEmpty && topic.utf8.count <= 32
            && topic.utf8.allSatisfy {
                ($0 >= 65 && $0 <= 90) || ($0 >= 97 && $0 <= 122) || ($0 >= 48 && $0 <= 57) || $0 == 45 || $0 == 95
            }
    }

    /// What a push service's answer means for the delivery: nil when it took the message, otherwise whether and
    /// when to try again. 404 and 410 say the subscription is gone (prune it, RFC 8030 §7.3); 413 that the message
    /// is too large; 401 and 403 that the VAPID key is missing or not the subscription's (RFC 8292 §4.2); 429 and
    /// 5xx are tried again, after `Retry-After` when given.
    public static func decision(status: Int, retryAfter: String?) -> RetryDecision? {
        let after = retryAfter.flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }.flatMap {
            (0...86_400).contains($0) ? TimeInterval($0) : nil
        }
        switch status {
        case 200...299: return nil
        case 404, 410: return .dropToken
        case 401, 403: return .fixCredentials
        case 400, 413, 415: return .fixRequest
        case 429: return .retryAfter(after ?? 60)
        case 500...599: return after.map { .retryAfter($0) } ?? .retry
        default: return .never
        }
    }
}
