import Foundation
import Hummingbird
import NIOCore
import RichPushAPNs
import RichPushCore

/// Writes what a route returns as JSON, as ``JSONValue/serialized()`` writes the replies built from JSON values:
/// keys sorted, slashes not escaped, `Content-Type: application/json`. The context of every route uses it, so a
/// handler returns a typed reply (a `ResponseEncodable`) and never builds its JSON by hand.
public struct APIResponseEncoder: ResponseEncoder {
    public init() {}

    public func encode(_ value: some Encodable, from request: Request, context: some RequestContext) throws -> Response
    {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let data = try encoder.encode(value)
        return Response(
            status: .ok,
            headers: [.contentType: "application/json"],
            body: .init(byteBuffer: ByteBuffer(bytes: data))
        )
    }
}

extension ResponseEncodable {
    /// The reply with `201 Created`.
    var created: EditedResponse<Self> { EditedResponse(status: .created, response: self) }
}

// The replies of more than one route.

/// `{"removed": id}`: what a delete removed (a device's token, a channel, an identity key, a live token).
struct Removed: ResponseEncodable {
    let removed: String
}

/// `{"recorded": true}`: a receipt or an open was kept.
struct Recorded: ResponseEncodable {
    let recorded = true
}

/// An app as `GET /v1/apps/{app}` shows it (credentials described, never given).
struct AppReply: ResponseEncodable {
    let app: JSONValue
}

/// A key made for an app, shown this once.
struct NewKey: ResponseEncodable {
    let id: String
    let apiKey: String
    let scopes: [String]
    let note = NewKey.shownOnce

    static let shownOnce = "the key is shown once; RichPush keeps only its hash"

    init(id: String, key: String, scopes: Set<APIScope>) {
        self.id = id
        apiKey = key
        self.scopes = APIScope.allCases.filter(scopes.contains).map(\.rawValue)
    }

    enum CodingKeys: String, CodingKey {
        case id
        case apiKey = "api_key"
        case scopes, note
    }
}

/// An app just made, with its first key, shown this once.
struct NewApp: ResponseEncodable {
    let app: JSONValue
    let apiKey: String
    let note = NewKey.shownOnce

    enum CodingKeys: String, CodingKey {
        case app
        case apiKey = "api_key"
        case note
    }
}

/// `GET /v1/me`: who the key is. The admin key has no key id, scopes or app.
struct Me: ResponseEncodable {
    let admin: Bool
    let keyID: String?
    let scopes: [String]?
    let app: JSONValue?
    let sandbox: Bool
    /// In sandbox mode, where the sandbox's webhook receiver takes requests (`…/hooks/<name>`).
    var sandboxWebhooks: String? = nil

    static func admin(sandbox: Bool, webhooks: String?) -> Me {
        Me(admin: true, keyID: nil, scopes: nil, app: nil, sandbox: sandbox, sandboxWebhooks: webhooks)
    }

    enum CodingKeys: String, CodingKey {
        case admin
        case keyID = "key_id"
        case scopes, app, sandbox
        case sandboxWebhooks = "sandbox_webhooks"
    }
}

/// The app's Web Push key, public half and settings.
struct WebPushKeyReply: ResponseEncodable {
    let webpush: JSONValue
}

/// `{"revoked": key id}`.
struct Revoked: ResponseEncodable {
    let revoked: String
}

/// A device registered: its token and provider.
struct RegisteredDevice: ResponseEncodable {
    let token: String
    let provider: String
}

/// A live token removed: by a server-side key, `{"removed": token}` (404 when there was none); by the public key,
/// `{"token": token}` whatever was there, so that the answer tells nothing about a token it did not know.
struct LiveTokenRemoval: ResponseEncodable {
    let removed: String?
    let token: String?
}

/// An app's identity keys (public halves and ids).
struct IdentityKeyList: ResponseEncodable {
    let keys: [JSONValue]
}

/// The channel ids APNs keeps for the app.
struct ChannelList: ResponseEncodable {
    let channels: [String]
    let count: Int
}

/// A broadcast channel: its id and what APNs keeps of its last message (`none` or `most_recent`).
struct ChannelReply: ResponseEncodable {
    let id: String
    let storagePolicy: String

    init(id: String, policy: APNsChannel.StoragePolicy) {
        self.id = id
        storagePolicy = policy == .noMessageStored ? "none" : "most_recent"
    }

    enum CodingKeys: String, CodingKey {
        case id
        case storagePolicy = "storage_policy"
    }
}

/// `POST /v1/media/check`: one verdict per URL, and whether every one passed.
struct MediaCheckReply: ResponseEncodable {
    let ok: Bool
    let results: [JSONValue]
}

/// The app's insight by hour: counts of each kind, the commonest failures, the devices by permission.
struct HourlyInsight: ResponseEncodable {
    struct Failure: Encodable {
        let reason: String
        let count: Int
    }
    let app: String
    let since: Int64
    let hours: [[String: Int64]]
    let topFailures: [Failure]
    let devicesByPermission: [String: Int]

    enum CodingKeys: String, CodingKey {
        case app, since, hours
        case topFailures = "top_failures"
        case devicesByPermission = "devices_by_permission"
    }
}

/// A page of an app's keys (ids, scopes and dates, never a key); `next_after` when another page may follow.
/// A page of apps (admin), with where the next one starts.
struct AppPage: ResponseEncodable {
    let apps: [JSONValue]
    let nextAfter: String?

    enum CodingKeys: String, CodingKey {
        case apps
        case nextAfter = "next_after"
    }
}

struct KeyPage: ResponseEncodable {
    let keys: [JSONValue]
    let nextAfter: String?

    enum CodingKeys: String, CodingKey {
        case keys
        case nextAfter = "next_after"
    }
}

/// A live token registered, as it is kept.
struct RegisteredLiveToken: ResponseEncodable {
    let token: String
    let kind: String
    let activityType: String
    let activityID: String?
    let userID: String?

    init(_ t: LiveToken) {
        token = t.token
        kind = t.kind.rawValue
        activityType = t.activityType
        activityID = t.activityID
        userID = t.userID
    }

    enum CodingKeys: String, CodingKey {
        case token, kind
        case activityType = "activity_type"
        case activityID = "activity_id"
        case userID = "user_id"
    }
}

/// A page of the app's devices that match a search, with the app's count of devices.
struct DevicePage: ResponseEncodable {
    let devices: [JSONValue]
    let total: Int
    let nextAfter: Int64?

    enum CodingKeys: String, CodingKey {
        case devices, total
        case nextAfter = "next_after"
    }
}

/// The push service origins an app's deliveries went to lately, as this node sees them, and the app's bound.
struct PushServicesReply: ResponseEncodable {
    struct Origin: Encodable {
        let origin: String
        let state: String
        let inFlight: Int
        let inFlightLimit: Int
        let failuresInARow: Int
        let lastUsedAt: String
        let openedAt: String?
        let retryAt: String?
        let lastFailure: String?

        init(_ o: DeliveryAdmission.OriginStatus, stamp: ISO8601DateFormatter) {
            origin = o.origin
            state = o.state
            inFlight = o.inFlight
            inFlightLimit = o.limit
            failuresInARow = o.failuresInARow
            lastUsedAt = stamp.string(from: o.lastUsed)
            openedAt = o.openedAt.map(stamp.string(from:))
            retryAt = o.retryAt.map(stamp.string(from:))
            lastFailure = o.lastFailure
        }

        enum CodingKeys: String, CodingKey {
            case origin, state
            case inFlight = "in_flight"
            case inFlightLimit = "in_flight_limit"
            case failuresInARow = "failures_in_a_row"
            case lastUsedAt = "last_used_at"
            case openedAt = "opened_at"
            case retryAt = "retry_at"
            case lastFailure = "last_failure"
        }
    }
    let appInFlight: Int
    let appInFlightLimit: Int
    let pushServices: [Origin]
    let node: String?

    enum CodingKeys: String, CodingKey {
        case appInFlight = "app_in_flight"
        case appInFlightLimit = "app_in_flight_limit"
        case pushServices = "push_services"
        case node
    }
}

/// A notification's outcomes: counts by state, a page of its deliveries, what devices reported in sum, and for
/// an update in place its family's versions.
struct OutcomesReply: ResponseEncodable {
    struct Delivery: Encodable {
        let target: String
        let provider: String
        let state: String
        let attempts: Int
        let reason: String?
        /// What the reason means for the sender (``DeliveryReasons``).
        let meaning: String?
        let providerID: String?
        /// When its state last changed (seconds since 1970).
        let updatedAt: Double
        /// When it is next tried (seconds since 1970), while it waits in the queue.
        let nextAttemptAt: Double?

        enum CodingKeys: String, CodingKey {
            case target, provider, state, attempts, reason, meaning
            case providerID = "provider_id"
            case updatedAt = "updated_at"
            case nextAttemptAt = "next_attempt_at"
        }
    }
    let id: String
    /// The notification's title (its alert's, or its Live Activity's), when it has one.
    let title: String?
    /// When it was accepted (seconds since 1970).
    let createdAt: Double
    let total: Int
    let counts: [String: Int]
    /// Its registry fan-out is still adding deliveries (as the counts were read): the total will grow, and a
    /// notification with none queued or leased is not over yet.
    let fanningOut: Bool
    let deliveries: [Delivery]
    let receipts: JSONValue
    var nextAfter: Int64?
    var rootID: String?
    var version: Int?
    var latestVersion: Int?

    enum CodingKeys: String, CodingKey {
        case id, title, total, counts, deliveries, receipts
        case fanningOut = "fanning_out"
        case createdAt = "created_at"
        case nextAfter = "next_after"
        case rootID = "root_id"
        case version
        case latestVersion = "latest_version"
    }
}
