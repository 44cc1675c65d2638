import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import RichPushCore

/// A failed API request: a stable code (listed in `openapi.yaml`), the status that goes with it, a message for
/// people, and the validation issues when there are some. Every route throws this, and it answers for itself:
///
/// ```json
/// {"error": {"code": "not-found", "message": "no such device"}}
/// ```
public struct APIError: HTTPResponseError, Sendable {
    /// What went wrong, as clients match it. A code's status is fixed; its message is not.
    public enum Code: String, Sendable, CaseIterable {
        case unauthenticated
        case forbidden
        case notFound = "not-found"
        case methodNotAllowed = "method-not-allowed"
        case invalid
        case mediaRefused = "media-refused"
        case invalidJSON = "invalid-json"
        /// The request could not be read as HTTP/1.1 (the codec refused it; the connection is closed).
        case malformedRequest = "malformed-request"
        case bodyTooLarge = "body-too-large"
        case invalidIdempotencyKey = "invalid-idempotency-key"
        /// An `Idempotency-Key` used before with another body.
        case idempotencyKeyReused = "idempotency-key-reused"
        case rateLimited = "rate-limited"
        case quotaExceeded = "quota-exceeded"
        case badReceiptToken = "bad-receipt-token"
        case receiptExpired = "receipt-expired"
        case alreadyReported = "already-reported"
        /// An open of a delivery the push service did not accept (failed, expired, pruned, superseded, or not yet
        /// sent): not counted.
        case deliveryNotAccepted = "delivery-not-accepted"
        case keyExists = "key-exists"
        /// The notification cannot be updated in place (sent without collapse_id, or a Live Activity).
        case notUpdatable = "not-updatable"
        /// The notification's fan-out is still queueing its devices (an update needs them all).
        case fanOutPending = "fan-out-pending"
        /// The notification has as many versions as one may have (`updates.max_versions`).
        case versionLimit = "version-limit"
        /// Updates to one notification came faster than `updates.per_second` allows.
        case updateRateLimited = "update-rate-limited"
        case databaseUnavailable = "database-unavailable"
        /// The server's disk is below its free-space floor (or full): nothing was stored.
        case insufficientStorage = "insufficient-storage"
        /// A push service refused or failed a request made for the caller (channel management).
        case providerError = "provider-error"
        /// A public-key registration names a user, an activity or a user's push-to-start without an identity proof.
        case identityRequired = "identity-required"
        /// The identity proof is malformed, forged (its signature does not verify), or lives past the bound.
        case identityInvalid = "identity-invalid"
        /// The proof's `kid` names no identity key of this app.
        case identityUnknownKey = "identity-unknown-key"
        case identityExpired = "identity-expired"
        case identityNotYetValid = "identity-not-yet-valid"
        /// The proof's `aud` is another app.
        case identityWrongApp = "identity-wrong-app"
        /// The registration's user_id is not the proof's `sub`.
        case identityWrongUser = "identity-wrong-user"
        /// The proof does not list the activity id (or the push-to-start type) registered.
        case identityNotGranted = "identity-not-granted"
        /// A replay of a disabled webhook endpoint (it would never run).
        case endpointDisabled = "endpoint-disabled"
        case `internal`

        public var status: HTTPResponse.Status {
            switch self {
            case .unauthenticated, .identityRequired, .identityInvalid, .identityUnknownKey, .identityExpired,
                .identityNotYetValid, .identityWrongApp:
                .unauthorized
            case .forbidden, .badReceiptToken, .identityWrongUser, .identityNotGranted: .forbidden
            case .notFound: .notFound
            case .methodNotAllowed: .methodNotAllowed
            case .invalid, .mediaRefused, .idempotencyKeyReused: .unprocessableContent
            case .invalidJSON, .malformedRequest, .invalidIdempotencyKey: .badRequest
            case .bodyTooLarge: .contentTooLarge
            case .rateLimited, .quotaExceeded, .updateRateLimited: .tooManyRequests
            case .receiptExpired: .gone
            case .alreadyReported, .keyExists, .notUpdatable, .fanOutPending, .deliveryNotAccepted, .versionLimit,
                .endpointDisabled:
                .conflict
            case .databaseUnavailable: .serviceUnavailable
            case .insufficientStorage: HTTPResponse.Status(code: 507, reasonPhrase: "Insufficient Storage")
            case .providerError: .badGateway
            case .internal: .internalServerError
            }
        }
    }

    public var code: Code
    public var message: String
    public var issues: [ValidationIssue]
    /// The most issues an answer lists (``issues_omitted`` counts the rest).
    static let maxIssuesShown = 100
    /// Seconds to wait, sent as `Retry-After` (429 and 503).
    public var retryAfter: Int?
    /// The id a 500 answer carries, the same as in the log line that tells what happened.
    public var requestID: String?
    /// Extra headers (`Allow` on 405).
    public var headers: HTTPFields

    public init(
        _ code: Code,
        _ message: String,
        issues: [ValidationIssue] = [],
        retryAfter: Int? = nil,
        requestID: String? = nil,
        headers: HTTPFields = [:]
    ) {
        self.code = code
        self.message = message
        self.issues = issues
        self.retryAfter = retryAfter
        self.requestID = requestID
        self.headers = headers
    }

    public var status: HTTPResponse.Status { code.status }

    /// The error's JSON body.
    public var json: JSONValue {
        var error: [String: JSONValue] = ["code": .string(code.rawValue), "message": .string(message)]
        if !issues.isEmpty {
            // At most `maxIssuesShown`, errors first: the answer stays small whatever the body held.
            let shown =
                issues.count <= Self.maxIssuesShown
                ? issues
                : Array(
                    (issues.filter { $0.severity == .error } + issues.filter { $0.severity != .error }).prefix(
                        Self.maxIssuesShown
                    )
                )
            error["issues"] = .array(shown.map(\.json))
            if shown.count < issues.count { error["issues_omitted"] = .int(Int64(issues.count - shown.count)) }
        }
        if let requestID { error["request_id"] = .string(requestID) }
        return ["error": .object(error)]
    }

    public var response: Response {
        var r = Response.json(Int(status.code), json)
        if let retryAfter { r.headers[.retryAfter] = String(retryAfter) }
        r.headers.append(contentsOf: headers)
        return r
    }

    public func response(from request: Request, context: some RequestContext) throws -> Response { response }

    // The answers more than one place gives.

    /// A key's bucket (or a client's, for failed authentication) is empty.
    static func rateLimited(after seconds: Int, _ message: String = "too many requests for this key") -> APIError {
        APIError(.rateLimited, "\(message); retry after \(seconds) s", retryAfter: seconds)
    }

    /// This node cannot reach its database; nothing of the request was stored.
    static let databaseUnavailable = APIError(
        .databaseUnavailable,
        "the database does not answer; nothing was stored, try again",
        retryAfter: 5
    )

    static func bodyTooLarge(_ limit: Int) -> APIError { APIError(.bodyTooLarge, "the body is over \(limit) bytes") }

    /// The database found its disk full mid-write; the transaction was rolled back.
    static let diskFull = APIError(
        .insufficientStorage,
        "the server's disk is full: nothing was stored; free space on the server, then try again",
        retryAfter: 60
    )
}
