import Foundation
import RichPushCore
import RichPushTransport

/// FCM's error codes (`FcmError.errorCode`), kept open for codes this code does not know.
public enum FCMErrorCode: Sendable, Hashable, CustomStringConvertible {
    case unspecified, invalidArgument, unregistered, senderIDMismatch, quotaExceeded, unavailable, internalError,
        thirdPartyAuthError
    /// No FcmError detail: the canonical status decided (UNAUTHENTICATED, PERMISSION_DENIED, NOT_FOUND…).
    case status(String)
    case unknown(String)

    public init(errorCode: String) {
        switch errorCode {
        case "UNSPECIFIED_ERROR": self = .unspecified
        case "INVALID_ARGUMENT": self = .invalidArgument
        case "UNREGISTERED": self = .unregistered
        case "SENDER_ID_MISMATCH": self = .senderIDMismatch
        case "QUOTA_EXCEEDED": self = .quotaExceeded
        case "UNAVAILABLE": self = .unavailable
        case "INTERNAL": self = .internalError
        case "THIRD_PARTY_AUTH_ERROR", "APNS_AUTH_ERROR": self = .thirdPartyAuthError
        default: self = .unknown(errorCode)
        }
    }

    public var description: String {
        switch self {
        case .unspecified: return "UNSPECIFIED_ERROR"
        case .invalidArgument: return "INVALID_ARGUMENT"
        case .unregistered: return "UNREGISTERED"
        case .senderIDMismatch: return "SENDER_ID_MISMATCH"
        case .quotaExceeded: return "QUOTA_EXCEEDED"
        case .unavailable: return "UNAVAILABLE"
        case .internalError: return "INTERNAL"
        case .thirdPartyAuthError: return "THIRD_PARTY_AUTH_ERROR"
        case .status(let s): return s
        case .unknown(let s): return s
        }
    }

    /// Safe as a metric label.
    public var metricLabel: String {
        if case .unknown = self { return "unknown" }
        return description
    }
}

/// A message FCM did not accept, or that could not be sent.
public struct FCMFailure: Error, Sendable, CustomStringConvertible {
    public var httpStatus: Int?
    public var code: FCMErrorCode?
    public var message: String
    /// `BadRequest` field violations: (field, description).
    public var fieldViolations: [FieldViolation]
    public var retryAfter: TimeInterval?
    public var transport: TransportError?
    public var retry: RetryDecision

    public struct FieldViolation: Sendable, Hashable {
        public var field: String
        public var description: String
    }

    /// FCM's error code, or `transport_<cause>` (the HTTP/2 client's names, as APNs' failures have them).
    public var label: String { code?.metricLabel ?? transport.map { "transport_\($0.label)" } ?? "unknown" }

    public var description: String {
        if let code {
            return "FCM \(httpStatus ?? 0) \(code): \(message)"
                + fieldViolations.map { " [\($0.field): \($0.description)]" }.joined()
        }
        return transport?.description ?? message
    }

    /// Reads Google's error body (`google.rpc.Status` with details).
    static func from(status: Int, body: [UInt8], retryAfter: TimeInterval?) -> FCMFailure {
        let json = (try? JSONValue.parse(body)) ?? .null
        let error = json["error"]
        let message = error?["message"]?.stringValue ?? "HTTP \(status)"
        var code: FCMErrorCode = .status(error?["status"]?.stringValue ?? "HTTP_\(status)")
        var violations: [FieldViolation] = []
        for detail in error?["details"]?.arrayValue ?? [] {
            let type = detail["@type"]?.stringValue ?? ""
            if type.hasSuffix("google.firebase.fcm.v1.FcmError"), let c = detail["errorCode"]?.stringValue {
                code = FCMErrorCode(errorCode: c)
            }
            if type.hasSuffix("google.rpc.BadRequest") {
                for v in detail["fieldViolations"]?.arrayValue ?? [] {
                    violations.append(
                        FieldViolation(
                            field: v["field"]?.stringValue ?? "",
                            description: v["description"]?.stringValue ?? ""
                        )
                    )
                }
            }
        }
        if case .status(let s) = code {
            // No FcmError detail: map the canonical status the way the admin SDKs do.
            switch s {
            case "NOT_FOUND": code = .unregistered
            case "RESOURCE_EXHAUSTED": code = .quotaExceeded
            case "UNAVAILABLE": code = .unavailable
            case "INTERNAL": code = .internalError
            default: break
            }
        }
        return FCMFailure(
            httpStatus: status,
            code: code,
            message: message,
            fieldViolations: violations,
            retryAfter: retryAfter,
            transport: nil,
            retry: decision(code, status: status, retryAfter: retryAfter, message: message)
        )
    }

    static func decision(_ code: FCMErrorCode, status: Int, retryAfter: TimeInterval?, message: String) -> RetryDecision
    {
        switch code {
        case .unregistered: return .dropToken
        case .senderIDMismatch: return .never
        case .invalidArgument: return message.contains("registration token") ? .never : .fixRequest
        // FCM asks for at least a minute before retrying an over-quota project.
        case .quotaExceeded: return .retryAfter(retryAfter ?? 60)
        case .unavailable, .internalError, .unspecified: return retryAfter.map { .retryAfter($0) } ?? .retry
        case .thirdPartyAuthError: return .fixCredentials
        case .status(let s):
            if s == "UNAUTHENTICATED" || s == "PERMISSION_DENIED" { return .fixCredentials }
            return status >= 500 ? .retry : .never
        case .unknown: return status >= 500 || status == 429 ? .retry : .never
        }
    }
}

extension FCMFailure {
    /// What the failure means for the sender, in a sentence. Nil when the code says it all.
    public var advice: String? {
        if let transport { return "could not reach FCM (\(transport)): retried with backoff" }
        return code?.advice(message: message, retryAfter: retryAfter)
    }
}

extension FCMErrorCode {
    /// What the code means for the sender, in a sentence (`message` is FCM's own, for INVALID_ARGUMENT).
    public func advice(message: String = "", retryAfter: TimeInterval? = nil) -> String? {
        switch self {
        case .unregistered:
            return "the app was removed from the device or the token expired: delete this token"
        case .senderIDMismatch:
            return "the token belongs to another Firebase project than this service account's"
        case .thirdPartyAuthError:
            return
                "Firebase could not reach APNs for this iOS device: check the APNs key uploaded to the Firebase project"
        case .quotaExceeded:
            return "over FCM's sending quota: retried after \(Int(retryAfter ?? 60)) s"
        case .unavailable, .internalError:
            return "a problem on Google's side: retried with backoff"
        case .invalidArgument:
            return message.contains("registration token")
                ? "the token is not a valid FCM registration token"
                : message.isEmpty ? nil : "FCM refused the message: \(message)"
        case .status(let s) where s.hasPrefix("OAUTH_"):
            return "the service account was refused by the token endpoint (a deleted or revoked key, or this "
                + "machine's clock far off): download a new key for it"
        case .status("UNAUTHENTICATED"), .status("PERMISSION_DENIED"):
            return "the service account may not send for this project: give it the Firebase Cloud Messaging role"
        case .status("NOT_FOUND"):
            return "no such Firebase project, or the token is gone"
        default:
            return nil
        }
    }
}
