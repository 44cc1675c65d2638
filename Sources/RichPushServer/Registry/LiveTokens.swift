import Foundation
import GRDB
import NIOConcurrencyHelpers
import PostgresNIO

/// A Live Activity token an app registered: a push-to-start token (one per device and attributes type, which
/// starts new activities of that type) or an activity's update token (one per running activity on a device).
public struct LiveToken: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        case pushToStart = "push_to_start"
        case activity
    }

    public var appID: String
    public var token: String
    public var kind: Kind
    /// The app's `ActivityAttributes` type.
    public var activityType: String
    /// The app's name for the activity (an order, a match): updates and ends are sent by it. Activity tokens only.
    public var activityID: String?
    public var userID: String?
    public var updatedAt: Date

    public init(
        appID: String,
        token: String,
        kind: Kind,
        activityType: String,
        activityID: String? = nil,
        userID: String? = nil,
        updatedAt: Date = Date()
    ) {
        self.appID = appID
        self.token = token
        self.kind = kind
        self.activityType = activityType
        self.activityID = activityID
        self.userID = userID
        self.updatedAt = updatedAt
    }
}

/// Bounds on what one app keeps and one send reads.
public enum LiveTokenLimits {
    /// Eight hours of activity, four more on the Lock Screen after its end.
    public static let activityTokenLifetime: TimeInterval = 12 * 3600
    /// A push-to-start token not registered again for 30 days is dropped. Apple publishes no lifetime for these
    /// tokens, only that they may change (the app sends the new one and the server forgets the old); the app
    /// registers its token at every launch, so a month without one is a device gone (FCM calls a token stale after
    /// a month without a connection). Sends count only tokens within their lifetime.
    public static let pushToStartTokenLifetime: TimeInterval = 30 * 86_400
    /// A token registered again unchanged within this long is not written again (an app registers on every
    /// launch): the write, and the database's log of it, are skipped.
    public static let refreshAfter: TimeInterval = 3600

    /// How long a token of this kind lives after its last registration.
    public static func lifetime(_ kind: LiveToken.Kind) -> TimeInterval {
        kind == .activity ? activityTokenLifetime : pushToStartTokenLifetime
    }
}

/// Which registered Live Activity tokens a send goes to.
public enum LiveAudience: Sendable, Hashable {
    /// The update tokens of the activity with this id.
    case activity(String)
    /// The push-to-start tokens for this attributes type, all of them or one user's.
    case pushToStart(type: String, userID: String?)
}

/// Asked once for each `live.token` event a change would write, when it would write it (after the change, in its
/// transaction: a request that changes nothing spends nothing); false, and that event is not written. A token whose
/// registration was not told is never told removed or expired either, so the events public callers cause stay
/// within what this allows (see ``LiveController``).
public typealias LiveTokenEvents = @Sendable () -> Bool

/// The app's Live Activity tokens. One statement text serves SQLite and PostgreSQL (``LiveTokenSQL``).
public protocol LiveTokenStore: Sendable {
    /// Adds or replaces the token within `limits` (a token is the app's once: registering it again moves it, unless
    /// `owner` is ``RegistrationOwner/keepsKnown`` and a user or an activity holds it). A new token past the app's
    /// bound, or an update token past its activity's, is refused with ``QuotaReached``; past the user's bound the
    /// user's least recently registered tokens go (each told `removed`). Its `live.token` events as `events` allows.
    func register(
        _ token: LiveToken,
        owner: RegistrationOwner,
        limits: RegistrationLimits,
        events: @escaping LiveTokenEvents
    ) async throws
    /// Removes a token; false when the app had none such.
    func remove(appID: String, token: String) async throws -> Bool
    /// Removes a token only when no one holds it (no user, no activity) or `user` does (a device's own request
    /// with the public key, and its proof's user when it gave one); whether one went. Its `live.token` event as
    /// `events` allows.
    func remove(
        appID: String,
        token: String,
        heldBy user: String?,
        events: @escaping LiveTokenEvents
    ) async throws
        -> Bool
    /// The audience's live tokens (within their lifetime) in token order, at most `limit`.
    func tokens(appID: String, audience: LiveAudience, limit: Int) async throws -> [String]
    /// The update tokens of several activities, read at once, by activity id, each activity's in token order:
    /// at most `limit + 1` in all (one more than allowed tells that the activities have too many). Activities
    /// without tokens are absent.
    func activityTokens(appID: String, activityIDs: [String], limit: Int) async throws -> [ExactText: [String]]
    /// Removes tokens of a kind not registered again since `cutoff`; returns how many went.
    func sweep(_ kind: LiveToken.Kind, before cutoff: Date, limit: Int) async throws -> Int
}

extension LiveTokenStore {
    /// Adds or replaces a token as a server-side key does, without bounds.
    public func register(_ token: LiveToken) async throws {
        try await register(token, owner: .asGiven, limits: .none, events: { true })
    }

    /// Adds or replaces a token within `limits`, writing its `live.token` event.
    public func register(_ token: LiveToken, owner: RegistrationOwner, limits: RegistrationLimits) async throws {
        try await register(token, owner: owner, limits: limits, events: { true })
    }

    /// Removes activity tokens not registered again since `cutoff` (an activity lasts at most 8 hours, and shows
    /// for up to 4 more after it ends); returns how many went.
    public func sweepActivityTokens(before cutoff: Date, limit: Int) async throws -> Int {
        try await sweep(.activity, before: cutoff, limit: limit)
    }
}

/// Text compared byte for byte (its UTF-8), as the databases compare it: Swift's `String` takes two canonically
/// equivalent spellings as one ("café" composed and decomposed), where an activity id registered in one spelling is
/// not the other's.
public struct ExactText: Hashable, Sendable, CustomStringConvertible {
    public let text: String
    public init(_ text: String) { self.text = text }
    public static func == (a: ExactText, b: ExactText) -> Bool { a.text.utf8.elementsEqual(b.text.utf8) }
    public func hash(into h: inout Hasher) {
        for byte in text.utf8 { h.combine(byte) }
    }
    public var description: String { text }
}
