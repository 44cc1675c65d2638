/// Column lists both databases use, written once: the order of the values each statement binds, and of what a
/// row decoder reads back.
enum Columns {
    /// A notification as inserted: id, app, idempotency key, message, response, created at, then the fan-out's
    /// audience, not before, expires at, spread and state (11 values).
    static let notificationInsert =
        "(id, app_id, idempotency_key, message, response, created_at, audience, not_before, expires_at, spread, fanout_state)"
    /// A notification as read back (the stored message, not the fan-out's bookkeeping).
    static let notification = "id, app_id, message, response, created_at"
    /// A new delivery: notification, app, provider, target, state, not before, expires at, updated at.
    static let deliveryInsert = "(notification_id, app_id, provider, target, state, not_before, expires_at, updated_at)"
    /// A delivery as read back, in the order the decoders read (`DeliveryRecord`'s fields).
    static let delivery =
        "id, notification_id, app_id, provider, target, state, attempts, not_before, expires_at, lease_owner, lease_until, reason, provider_id, updated_at"
}
