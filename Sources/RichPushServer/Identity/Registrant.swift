import Foundation
import HTTPTypes
import Hummingbird
import RichPushCore

/// Who a registration (`POST …/devices`, `…/live/tokens`, and a Live Activity token's removal) speaks for, decided
/// once per request from the key and the identity proof (``IdentityProof``, header `RichPush-Identity`).
///
/// A server-side key (the admin key, or an app key with the `send` or `manage` scope) speaks for the app: user and
/// activity ids are taken as given, and a proof is not read. The public key (`register` without either) speaks
/// for one device: without a proof it registers an anonymous device only, and with one it speaks for the proof's
/// user, within what the proof lists.
enum Registrant: Sendable {
    case server
    case anonymous
    case proven(IdentityClaims)

    /// Reads the caller and, for the public key, the proof (verified against the app's keys).
    static func of(
        _ request: Request,
        _ context: AppRequestContext,
        store: any ServerStore
    ) async throws -> Registrant {
        let app = context.app
        guard case .app(let grant) = try context.requireCaller(), grant.scopes.isDisjoint(with: [.send, .manage])
        else { return .server }
        let proofs = request.headers[values: Self.header]
        guard let proof = proofs.first else { return .anonymous }
        guard proofs.count == 1 else {
            throw APIError(.identityInvalid, "send one \(IdentityProof.header) header, not \(proofs.count)")
        }
        let keys = try await store.identityKeys(appID: app.id)
        do { return .proven(try IdentityProof.verify(proof, appID: app.id, keys: keys)) } catch {
            throw APIError(error)
        }
    }

    /// A constant name of valid token characters.
    static let header = HTTPField.Name(IdentityProof.header)!

    /// The device as this registrant may register it: its user checked against the proof (or refused without
    /// one), and whether a known token's user is kept.
    func admit(_ device: inout Device) throws -> RegistrationOwner {
        switch self {
        case .server: return .asGiven
        case .anonymous:
            if device.userID != nil { throw Self.required("user_id", "a registration naming a user") }
            return .keepsKnown
        case .proven(let claims):
            if let user = device.userID, user != claims.subject { throw Self.wrongUser(user, claims) }
            device.userID = claims.subject
            return .asGiven
        }
    }

    /// A Live Activity token as this registrant may register it: an activity token's activity and a push-to-start
    /// token's type must be the proof's; without a proof only an anonymous push-to-start token.
    func admit(_ token: inout LiveToken) throws -> RegistrationOwner {
        switch self {
        case .server: return .asGiven
        case .anonymous:
            if token.userID != nil { throw Self.required("user_id", "a token naming a user") }
            if token.kind == .activity { throw Self.required("activity_id", "an activity's update token") }
            return .keepsKnown
        case .proven(let claims):
            if let user = token.userID, user != claims.subject { throw Self.wrongUser(user, claims) }
            switch token.kind {
            case .activity:
                guard let id = token.activityID, claims.activities.contains(id) else {
                    throw Self.notGranted(
                        "activity_id",
                        "the proof's activities do not list '\(token.activityID ?? "")'"
                    )
                }
            case .pushToStart:
                guard claims.pushToStart.contains(token.activityType) else {
                    throw Self.notGranted(
                        "activity_type",
                        "the proof's push_to_start does not list '\(token.activityType)'"
                    )
                }
            }
            token.userID = claims.subject
            return .asGiven
        }
    }

    /// The user a public-key removal may act for: nil without a proof (anonymous tokens only).
    var user: String? {
        if case .proven(let claims) = self { return claims.subject }
        return nil
    }

    static func issue(_ path: String, _ rule: String, _ message: String) -> [ValidationIssue] {
        [ValidationIssue(path: path, rule: rule, message: message)]
    }

    static func required(_ field: String, _ what: String) -> APIError {
        APIError(
            .identityRequired,
            "\(what) needs an identity proof (\(IdentityProof.header)) with this key: see docs/identity.md",
            issues: issue(field, "identity-required", "\(field) is taken from a public key only with a proof")
        )
    }

    static func wrongUser(_ user: String, _ claims: IdentityClaims) -> APIError {
        APIError(
            .identityWrongUser,
            "user_id '\(user)' is not the proof's user '\(claims.subject)'",
            issues: issue("user_id", "identity-wrong-user", "user_id must be the proof's sub (or be left out)")
        )
    }

    static func notGranted(_ field: String, _ message: String) -> APIError {
        APIError(.identityNotGranted, message, issues: issue(field, "identity-not-granted", message))
    }
}

extension APIError {
    /// A refused proof as the API answers it: its reason is the code (401), its message the answer's.
    init(_ problem: IdentityProblem) {
        let code: Code =
            switch problem.reason {
            case .invalid: .identityInvalid
            case .unknownKey: .identityUnknownKey
            case .expired: .identityExpired
            case .notYetValid: .identityNotYetValid
            case .wrongApp: .identityWrongApp
            }
        self.init(code, "the identity proof was refused: \(problem.message)")
    }

    /// A registration past a bound: 429 naming the rule, with a wait (a bound is not a rate: the app's operator
    /// raises it, or tokens go; a device library keeps the registration and tries again later).
    init(_ quota: QuotaReached) {
        self.init(
            .quotaExceeded,
            quota.message,
            issues: [
                ValidationIssue(
                    path: quota.rule == "live-tokens-per-activity" ? "activity_id" : "token",
                    rule: quota.rule,
                    message: quota.message
                )
            ],
            retryAfter: 3600
        )
    }
}
