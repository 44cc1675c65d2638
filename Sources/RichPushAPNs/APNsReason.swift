import RichPushTransport

/// The `reason` strings APNs answers with. A reason this code does not know yet stays readable as
/// ``unknown(_:)`` instead of breaking decoding.
public enum APNsReason: Sendable, Hashable, CustomStringConvertible {
    case badCollapseId, badDeviceToken, badExpirationDate, badMessageId, badPriority, badTopic, deviceTokenNotForTopic
    case duplicateHeaders, idleTimeout, invalidPushType, missingDeviceToken, missingTopic, payloadEmpty, topicDisallowed
    case badCertificate, badCertificateEnvironment, expiredProviderToken, forbidden, invalidProviderToken, missingProviderToken
    case unrelatedKeyIdInToken, badEnvironmentKeyIdInToken, badPath, methodNotAllowed, expiredToken, unregistered
    case payloadTooLarge, tooManyProviderTokenUpdates, tooManyRequests, internalServerError, serviceUnavailable, shutdown
    case unknown(String)

    static let table: [(APNsReason, String)] = [
        (.badCollapseId, "BadCollapseId"), (.badDeviceToken, "BadDeviceToken"), (.badExpirationDate, "BadExpirationDate"),
        (.badMessageId, "BadMessageId"), (.badPriority, "BadPriority"), (.badTopic, "BadTopic"),
        (.deviceTokenNotForTopic, "DeviceTokenNotForTopic"), (.duplicateHeaders, "DuplicateHeaders"), (.idleTimeout, "IdleTimeout"),
        (.invalidPushType, "InvalidPushType"), (.missingDeviceToken, "MissingDeviceToken"), (.missingTopic, "MissingTopic"),
        (.payloadEmpty, "PayloadEmpty"), (.topicDisallowed, "TopicDisallowed"), (.badCertificate, "BadCertificate"),
        (.badCertificateEnvironment, "BadCertificateEnvironment"), (.expiredProviderToken, "ExpiredProviderToken"),
        (.forbidden, "Forbidden"), (.invalidProviderToken, "InvalidProviderToken"), (.missingProviderToken, "MissingProviderToken"),
        (.unrelatedKeyIdInToken, "UnrelatedKeyIdInToken"), (.badEnvironmentKeyIdInToken, "BadEnvironmentKeyIdInToken"),
        (.badPath, "BadPath"), (.methodNotAllowed, "MethodNotAllowed"), (.expiredToken, "ExpiredToken"), (.unregistered, "Unregistered"),
        (.payloadTooLarge, "PayloadTooLarge"), (.tooManyProviderTokenUpdates, "TooManyProviderTokenUpdates"),
        (.tooManyRequests, "TooManyRequests"), (.internalServerError, "InternalServerError"),
        (.serviceUnavailable, "ServiceUnavailable"), (.shutdown, "Shutdown"),
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
        case .badDeviceToken, .deviceTokenNotForTopic: return .never  // may only be the other environment: do not prune blindly
        case .badCollapseId, .badExpirationDate, .badMessageId, .badPriority, .badTopic, .duplicateHeaders, .invalidPushType,
            .missingDeviceToken, .missingTopic, .payloadEmpty, .topicDisallowed, .badPath, .methodNotAllowed, .payloadTooLarge:
            return .fixRequest
        case .badCertificate, .badCertificateEnvironment, .forbidden, .invalidProviderToken, .missingProviderToken,
            .unrelatedKeyIdInToken, .badEnvironmentKeyIdInToken, .expiredProviderToken:
            return .fixCredentials
        case .tooManyRequests: return retryAfter.map { .retryAfter($0) } ?? .retry
        case .idleTimeout, .tooManyProviderTokenUpdates, .internalServerError, .serviceUnavailable, .shutdown: return retryAfter.map { .retryAfter($0) } ?? .retry
        case .unknown:
            if status >= 500 || status == 429 { return retryAfter.map { .retryAfter($0) } ?? .retry }
            if status == 410 { return .dropToken }
            return .never
        }
    }
}
