import Foundation
import GRDB
import RichPushCore

/// A notification to accept: the stored notification, its idempotency key, and whom and when to send it to.
public struct AcceptPlan: Sendable {
    public var notification: StoredNotification
    public var idempotencyKey: String?
    public var audience: Audience
    public var notBefore: Date
    public var expiresAt: Date?
    /// Spread the deliveries evenly over this many seconds from `notBefore` (0: all at once).
    public var spread: TimeInterval

    public init(
        notification: StoredNotification,
        idempotencyKey: String?,
        audience: Audience,
        notBefore: Date,
        expiresAt: Date?,
        spread: TimeInterval = 0
    ) {
        self.notification = notification
        self.idempotencyKey = idempotencyKey
        self.audience = audience
        self.notBefore = notBefore
        self.expiresAt = expiresAt
        self.spread = spread
    }

    /// The fan-out of its deliveries.
    public var fanOut: FanOutRequest {
        FanOutRequest(
            notificationID: notification.id,
            appID: notification.appID,
            audience: audience,
            notBefore: notBefore,
            expiresAt: expiresAt,
            spread: spread
        )
    }
}

/// What accepting did.
public struct Accepted: Sendable {
    /// The notification as stored (for a replayed idempotency key: the first one, with its first answer).
    public var notification: StoredNotification
    public var created: Bool
    /// Deliveries queued with it (every one of them for a token, FCM topic or condition audience).
    public var queued: Int
    /// A registry fan-out (all, user, tag, topic) still to run with ``NotificationIntake/completeFanOut(notificationID:)``.
    public var fanOutPending: Bool
}

/// Takes notifications in: stores each with its deliveries so that none is lost between the answer and the
/// queue. `respond` makes the answer stored with the notification (replayed for its idempotency key) from the
/// number of deliveries when it is known at once.
public protocol NotificationIntake: Sendable {
    func accept(_ plan: AcceptPlan, respond: @escaping @Sendable (_ queued: Int?) -> JSONValue) async throws -> Accepted
    /// Accepts several notifications in one transaction: all are stored or none. `respond` makes the answer of the
    /// plan at `index`. The answers come in the plans' order.
    func acceptAll(
        _ plans: [AcceptPlan],
        respond: @escaping @Sendable (_ index: Int, _ queued: Int?) -> JSONValue
    ) async throws -> [Accepted]
    /// Runs (or resumes) the fan-out of an accepted notification; returns the deliveries it added.
    @discardableResult
    func completeFanOut(notificationID: String) async throws -> Int
    /// Notifications whose fan-out has not finished (after a crash), oldest first.
    func pendingFanOuts() async throws -> [String]
}
