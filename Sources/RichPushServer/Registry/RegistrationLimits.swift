import Foundation

/// The bounds every registration meets, whoever makes it, each counted in the database (so that the nodes of a
/// PostgreSQL cluster share them) and cheaply: an app's totals from a counter table the database keeps with its
/// own triggers (``AppCountSQL``), a user's and an activity's by a range of an index that the bound itself keeps
/// short.
///
/// Past an app's bound a new token is refused (``QuotaReached``); a token registered again is always taken. Past
/// a user's bound the least recently registered of the user's tokens goes (a user's new phone is never refused
/// because of a phone given away). Past an activity's bound a new token is refused: an activity's tokens stay
/// within what one update may name, so the app's own update never meets `live-audience-too-large`.
public struct RegistrationLimits: Sendable, Hashable {
    /// Devices one app keeps (`registrations.devices_per_app`).
    public var devicesPerApp: Int
    /// Devices one user of an app keeps; past it the least recently registered goes.
    public var devicesPerUser: Int
    /// Live Activity tokens (push-to-start and update) one app keeps.
    public var liveTokensPerApp: Int
    /// Live Activity tokens one user keeps; past it the least recently registered goes.
    public var liveTokensPerUser: Int
    /// Live update tokens of one activity (live ones: registered in the last 12 hours); past it a new one is
    /// refused. At most the tokens one send may name (10,000).
    public var liveTokensPerActivity: Int

    public init(
        devicesPerApp: Int = 5_000_000,
        devicesPerUser: Int = 20,
        liveTokensPerApp: Int = 5_000_000,
        liveTokensPerUser: Int = 20,
        liveTokensPerActivity: Int = 1_000
    ) {
        self.devicesPerApp = devicesPerApp
        self.devicesPerUser = devicesPerUser
        self.liveTokensPerApp = liveTokensPerApp
        self.liveTokensPerUser = liveTokensPerUser
        self.liveTokensPerActivity = liveTokensPerActivity
    }

    /// No bound at all (imports and tests that fill a registry on purpose).
    public static let none = RegistrationLimits(
        devicesPerApp: .max,
        devicesPerUser: .max,
        liveTokensPerApp: .max,
        liveTokensPerUser: .max,
        liveTokensPerActivity: .max
    )
}

/// A registration past one of the ``RegistrationLimits``: the rule (`devices-per-app`, `live-tokens-per-app`,
/// `live-tokens-per-activity`) and a message naming the bound.
public struct QuotaReached: Error, Sendable, Equatable {
    public var rule: String
    public var message: String

    public init(rule: String, message: String) {
        self.rule = rule
        self.message = message
    }

    static func devices(_ limit: Int) -> QuotaReached {
        QuotaReached(
            rule: "devices-per-app",
            message: "this app keeps \(limit) devices, its limit: no new one is taken"
        )
    }
    static func liveTokens(_ limit: Int) -> QuotaReached {
        QuotaReached(
            rule: "live-tokens-per-app",
            message: "this app keeps \(limit) Live Activity tokens, its limit: no new one is taken"
        )
    }
    static func activity(_ limit: Int) -> QuotaReached {
        QuotaReached(
            rule: "live-tokens-per-activity",
            message:
                "this activity has \(limit) live update tokens, its limit (a larger audience belongs on a broadcast channel)"
        )
    }
}

/// Who a registration speaks for.
public enum RegistrationOwner: Sendable, Hashable {
    /// A server-side key, or a device with a proof: the registration's user (and activity) is the token's.
    case asGiven
    /// The public key without a proof: a new token is anonymous, and a token already registered keeps its user
    /// (a device: everything else it says is taken; a Live Activity token held by a user or an activity: nothing).
    case keepsKnown
}
