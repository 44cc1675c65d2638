import RichPushTransport

/// The `reason` strings APNs answers with. A reason this code does not know yet stays readable as
/// ``unknown(_:)`` instead of breaking decoding.
public enum APNsReason: Sendable, Hashable, CustomStringConvertible {
    case badCollapseId, badDeviceToken, badExpirationDate, badMessageId, badPriority, badTopic, deviceTokenNotForTopic
    case duplicateHeaders, idleTimeout, invalidPushType, missingDeviceToken, missingTopic, payloadEmpty, topicDisallowed
    case badCertificate, badCertificateEnvironment, expiredProviderToken, forbidden, invalidProviderToken,
        missingProviderToken
    case unrelatedKeyIdInToken, badEnvironmentKeyIdInToken, badPath, methodNotAllowed, expiredToken, unregistered
    case payloadTooLarge, tooManyProviderTokenUpdates, tooManyRequests, internalServerError, serviceUnavailable,
        shutdown
    /// Broadcast and channel management (Live Activities).
    case missingChannelId, channelNotRegistered, invalidPolicy
    case unknown(String)

    static let table: [(APNsReason, String)] = [
        (.badCollapseId, "BadCollapseId"), (.badDeviceToken, "BadDeviceToken"),
        (.badExpirationDate, "BadExpirationDate"),
        (.badMessageId, "BadMessageId"), (.badPriority, "BadPriority"), (.badTopic, "BadTopic"),
        (.deviceTokenNotForTopic, "DeviceTokenNotForTopic"), (.duplicateHeaders, "DuplicateHeaders"),
        (.idleTimeout, "IdleTimeout"),
        (.invalidPushType, "InvalidPushType"), (.missingDeviceToken, "MissingDeviceToken"),
        (.missingTopic, "MissingTopic"),
        (.payloadEmpty, "PayloadEmpty"), (.topicDisallowed, "TopicDisallowed"), (.badCertificate, "BadCertificate"),
        (.badCertificateEnvironment, "BadCertificateEnvironment"), (.expiredProviderToken, "ExpiredProviderToken"),
        (.forbidden, "Forbidden"), (.invalidProviderToken, "InvalidProviderToken"),
        (.missingProviderToken, "MissingProviderToken"),
        (.unrelatedKeyIdInToken, "UnrelatedKeyIdInToken"), (.badEnvironmentKeyIdInToken, "BadEnvironmentKeyIdInToken"),
        (.badPath, "BadPath"), (.methodNotAllowed, "MethodNotAllowed"), (.expiredToken, "ExpiredToken"),
        (.unregistered, "Unregistered"),
        (.payloadTooLarge, "PayloadTooLarge"), (.tooManyProviderTokenUpdates, "TooManyProviderTokenUpdates"),
        (.tooManyRequests, "TooManyRequests"), (.internalServerError, "InternalServerError"),
        (.serviceUnavailable, "ServiceUnavailable"), (.shutdown, "Shutdown"),
        (.missingChannelId, "MissingChannelId"), (.channelNotRegistered, "ChannelNotRegistered"),
        (.invalidPolicy, "InvalidPolicy"),
    ]
    static let byName: [String: APNsReason] = Dictionary(uniqueKeysWithValues: table.map { ($0.1, $0.0) })

    public init(rawValue: String) { self = Self.byName[rawValue] ?? .unknown(rawValue) }

    public var rawValue: String {
        if case .unknown(let s) = self { return s }
        return Self.table.first { $0.0 == self }!.1
    }

    /// Safe as a metric label: unknown reasons collapse to "unknown".
    public var metricLabel: String {
        if case .unknown = self { return "unknown" }
        return rawValue
    }

    public var description: String { rawValue }

    /// Every reason APNs documents.
    public static var known: [APNsReason] { table.map(\.0) }

    /// What to do about it (the status decides for reasons this code does not know).
    public func retryDecision(status: Int, retryAfter: Double?) -> RetryDecision {
        switch self {
        case .unregistered, .expiredToken: return .dropToken
        // may only be the other environment: do not prune blindly
        case .badDeviceToken, .deviceTokenNotForTopic: return .never
        case .badCollapseId, .badExpirationDate, .badMessageId, .badPriority, .badTopic, .duplicateHeaders,
            .invalidPushType,
            .missingDeviceToken, .missingTopic, .payloadEmpty, .topicDisallowed, .badPath, .methodNotAllowed,
            .payloadTooLarge, .missingChannelId, .invalidPolicy:
            return .fixRequest
        // The channel was deleted (or never made): nothing will change by trying again.
        case .channelNotRegistered: return .never
        case .badCertificate, .badCertificateEnvironment, .forbidden, .invalidProviderToken, .missingProviderToken,
            .unrelatedKeyIdInToken, .badEnvironmentKeyIdInToken, .expiredProviderToken:
            return .fixCredentials
        case .tooManyRequests: return retryAfter.map { .retryAfter($0) } ?? .retry
        case .idleTimeout, .tooManyProviderTokenUpdates, .internalServerError, .serviceUnavailable, .shutdown:
            return retryAfter.map { .retryAfter($0) } ?? .retry
        case .unknown:
            if status >= 500 || status == 429 { return retryAfter.map { .retryAfter($0) } ?? .retry }
            if status == 410 { return .dropToken }
            return .never
        }
    }
}

extension APNsReason {
    /// What the reason means for the sender, in a sentence: what to change, or whether to wait. Nil for reasons
    /// that need no more than their name.
    public var advice: String? {
        switch self {
        case .unregistered, .expiredToken:
            return "the app was removed from the device or the token expired: delete this token"
        case .badDeviceToken:
            return "the token is malformed or belongs to the other APNs environment: a token from a development build "
                + "goes to the sandbox, one from TestFlight or the App Store to production"
        case .deviceTokenNotForTopic:
            return "the token belongs to another app: check the bundle id (apns-topic)"
        case .invalidProviderToken:
            return "the signing key was refused: check that the key id is this .p8 key's and the team id the team "
                + "that owns it (a key of another team is refused this way)"
        case .badEnvironmentKeyIdInToken:
            return "the key is not enabled for this APNs environment (sandbox or production)"
        case .expiredProviderToken:
            return "the signed token was too old or dated in the future: check this machine's clock"
        case .missingProviderToken, .badCertificate, .forbidden:
            return "the credentials were refused: check the key or certificate"
        case .badCertificateEnvironment:
            return "the certificate is for the other APNs environment"
        case .topicDisallowed, .badTopic, .missingTopic:
            return "the bundle id (apns-topic) is not one this key or certificate may push to"
        case .payloadTooLarge:
            return "the payload is over 4 KB: shorten the text or custom data"
        case .channelNotRegistered:
            return
                "APNs knows no such broadcast channel for this app: it was deleted, or made for another app or environment"
        case .tooManyRequests:
            return "too many notifications to this one device: wait before sending to it again"
        case .internalServerError, .serviceUnavailable, .shutdown, .idleTimeout:
            return "a problem on Apple's side: retried with backoff"
        default:
            return nil
        }
    }
}
