import Foundation
import RichPushCore

/// Where a delivery stands. Every accepted notification ends in one of the final states.
public enum DeliveryState: String, Sendable, Hashable, CaseIterable {
    /// Waiting for its time (`notBefore`).
    case queued
    /// Claimed by a worker until its lease runs out.
    case leased
    case delivered
    /// The provider refused it for good, or retries ran out.
    case failed
    /// Its time to live passed before it could be delivered.
    case expired
    /// The provider said the token is gone; the token was pruned.
    case pruned
    /// Not sent: a newer version of the notification (an update in place) replaced it first.
    case superseded

    public var isFinal: Bool { self != .queued && self != .leased }
}

/// Whom one delivery goes to: a device's token, or (FCM only) a topic or a condition, which the service fans out
/// itself. Typed from the moment a delivery is made until its provider sends it; the databases keep the stored
/// form (the token itself, `topic:NAME` or `condition:EXPRESSION`), read once where a row is decoded. Tokens never
/// begin with those prefixes: the token rules refuse them (an FCM token registered as `topic:news` would otherwise
/// be read back as a send to the whole topic).
public enum DeliveryTarget: Sendable, Hashable, Comparable, CustomStringConvertible, ExpressibleByStringInterpolation {
    case token(String)
    case topic(String)
    case condition(String)

    /// Reads the stored form back (the form FCM targets are written in everywhere).
    public init(stored s: String) {
        switch FCMTarget(storedForm: s) {
        case .token(let t): self = .token(t)
        case .topic(let t): self = .topic(t)
        case .condition(let c): self = .condition(c)
        }
    }

    /// A token, written as a literal (tests, examples).
    public init(stringLiteral value: String) { self = .token(value) }

    /// As the databases keep it and the API shows it.
    public var stored: String { fcm.storedForm }

    /// The device token, or nil for a topic or a condition (nothing to prune there).
    public var token: String? {
        if case .token(let t) = self { return t }
        return nil
    }

    /// The FCM request's target.
    public var fcm: FCMTarget {
        switch self {
        case .token(let t): return .token(t)
        case .topic(let t): return .topic(t)
        case .condition(let c): return .condition(c)
        }
    }

    public var description: String { stored }

    public static func < (a: DeliveryTarget, b: DeliveryTarget) -> Bool { a.stored < b.stored }
}

/// One delivery to add: a notification to one target through one provider.
public struct NewDelivery: Sendable, Hashable {
    public var notificationID: String
    public var appID: String
    public var provider: DeliveryProvider
    public var target: DeliveryTarget
    /// Not before this time (a scheduled send, or spreading a large send).
    public var notBefore: Date
    /// Give up after this time (the message's TTL).
    public var expiresAt: Date?

    public init(
        notificationID: String,
        appID: String,
        provider: DeliveryProvider,
        target: DeliveryTarget,
        notBefore: Date = Date(),
        expiresAt: Date? = nil
    ) {
        self.notificationID = notificationID
        self.appID = appID
        self.provider = provider
        self.target = target
        self.notBefore = notBefore
        self.expiresAt = expiresAt
    }
}

/// A delivery as stored.
public struct DeliveryRecord: Sendable, Hashable {
    public var id: Int64
    public var notificationID: String
    public var appID: String
    public var provider: DeliveryProvider
    public var target: DeliveryTarget
    public var state: DeliveryState
    /// Attempts started (claims).
    public var attempts: Int
    public var notBefore: Date
    public var expiresAt: Date?
    public var leaseOwner: String?
    public var leaseUntil: Date?
    /// The provider's reason or a transport label, for failed, expired, pruned and rescheduled deliveries.
    public var reason: String?
    /// The provider's id for a delivered notification (`apns-id`, FCM message name).
    public var providerID: String?
    public var updatedAt: Date
}

extension DeliveryRecord {
    /// A new delivery as a queue holds it before its first claim: the memory queue's record, and what a tool or a
    /// benchmark hands a provider without a queue.
    public init(id: Int64, queued d: NewDelivery, at now: Date = Date()) {
        self.init(
            id: id,
            notificationID: d.notificationID,
            appID: d.appID,
            provider: d.provider,
            target: d.target,
            state: .queued,
            attempts: 0,
            notBefore: d.notBefore,
            expiresAt: d.expiresAt,
            leaseOwner: nil,
            leaseUntil: nil,
            reason: nil,
            providerID: nil,
            updatedAt: now
        )
    }
}

/// How a claimed delivery ended.
///
/// What a push service said is bounded here, where it becomes what is stored: its id for the delivery (`apns-id`,
/// FCM's message name, Web Push's `Location`) and the reason are cut to ``maxProviderTextBytes`` of UTF-8 at a
/// character boundary, however they are set, so that a service answering a 15 KB header stores (and the
/// notification's outcome shows) 256 bytes of it.
public struct DeliveryOutcome: Sendable, Hashable {
    public var state: DeliveryState
    public var reason: String? {
        get { boundedReason }
        set { boundedReason = newValue.map { Self.bounded($0) } }
    }
    public var providerID: String? {
        get { boundedProviderID }
        set { boundedProviderID = newValue.map { Self.bounded($0) } }
    }
    private var boundedReason: String?
    private var boundedProviderID: String?

    /// The most bytes of a push service's id or reason kept (an `apns-id` is a 36-character UUID, FCM's name
    /// `projects/…/messages/…` well under 200, a Web Push `Location` a URL of the service's).
    public static let maxProviderTextBytes = 256

    public init(state: DeliveryState, reason: String?, providerID: String?) {
        self.state = state
        boundedReason = reason.map { Self.bounded($0) }
        boundedProviderID = providerID.map { Self.bounded($0) }
    }

    /// `text` cut to at most `limit` bytes of UTF-8, never inside a character (a Swift `String` is always valid
    /// UTF-8; cutting by Unicode scalars keeps it so).
    public static func bounded(_ text: String, limit: Int = maxProviderTextBytes) -> String {
        guard text.utf8.count > limit else { return text }
        var kept = String.UnicodeScalarView()
        var bytes = 0
        for scalar in text.unicodeScalars {
            let size = String(scalar).utf8.count
            guard bytes + size <= limit else { break }
            kept.append(scalar)
            bytes += size
        }
        return String(kept)
    }

    public static func delivered(providerID: String?) -> DeliveryOutcome {
        .init(state: .delivered, reason: nil, providerID: providerID)
    }
    public static func failed(_ reason: String) -> DeliveryOutcome {
        .init(state: .failed, reason: reason, providerID: nil)
    }
    public static func pruned(_ reason: String) -> DeliveryOutcome {
        .init(state: .pruned, reason: reason, providerID: nil)
    }
    public static func expired(_ reason: String = "ttl") -> DeliveryOutcome {
        .init(state: .expired, reason: reason, providerID: nil)
    }
    /// Replaced by version `version` before it was sent.
    public static func superseded(by version: Int) -> DeliveryOutcome {
        .init(state: .superseded, reason: "version \(version)", providerID: nil)
    }
}

/// A durable queue of deliveries: workers claim batches under a lease, and every claim ends in a final outcome or
/// a new time. A worker that dies leaves its leases to run out; the deliveries are then claimed again.
///
/// `SQLiteDeliveryQueue` is the embedded default; `MemoryDeliveryQueue` is its twin for fast tests.
public protocol DeliveryQueue: Sendable {
    /// Adds deliveries; returns how many were added.
    @discardableResult
    func enqueue(_ deliveries: [NewDelivery]) async throws -> Int

    /// Leases up to `limit` deliveries that are due (or whose lease ran out) to `owner` until `now + lease`.
    /// Deliveries whose time to live has passed are marked expired instead of being handed out.
    ///
    /// Fair across apps: each app with due deliveries gets an equal share of the claim (`limit` divided by the
    /// number of such apps, rounded up), its earliest first, and at most its room in `rooms`; an app with fewer
    /// due than its share leaves the rest of the claim empty (the next claim is made as soon as there is room). So
    /// one app's million queued deliveries never stand in front of another app's one: it is in the next claim.
    /// Deliveries whose lease ran out (a worker that stopped) are taken after the due ones, whatever their app.
    func claim(
        owner: String,
        limit: Int,
        now: Date,
        lease: TimeInterval,
        rooms: ClaimRooms
    ) async throws -> [DeliveryRecord]

    /// Records the outcome of a claimed delivery; false when `owner` no longer holds the lease.
    @discardableResult
    func finish(id: Int64, owner: String, outcome: DeliveryOutcome, now: Date) async throws -> Bool

    /// Puts a claimed delivery back, due at `notBefore`, remembering why; false when the lease was lost.
    @discardableResult
    func reschedule(id: Int64, owner: String, notBefore: Date, reason: String, now: Date) async throws -> Bool

    /// Records many outcomes and reschedules at once (one transaction where the store has them); returns the
    /// ids whose lease `owner` still held, which are the ones recorded.
    func settle(_ items: [Settlement], owner: String, now: Date) async throws -> Set<Int64>

    /// Extends to `until` the leases `owner` still holds among `ids` (a worker still busy with its batch keeps it;
    /// only a worker that stopped loses its leases). Returns the ids still held.
    func extend(_ ids: [Int64], owner: String, until: Date) async throws -> Set<Int64>

    /// Deliveries per state.
    func counts() async throws -> [DeliveryState: Int]

    /// The deliveries of one notification.
    func deliveries(notificationID: String) async throws -> [DeliveryRecord]

    /// One notification's deliveries per state, counted where they are kept (none is read out).
    func counts(notificationID: String) async throws -> [DeliveryState: Int]

    /// A page of one notification's deliveries: those with an id above `after`, in id order, at most `limit`.
    func deliveries(notificationID: String, after: Int64, limit: Int) async throws -> [DeliveryRecord]
}

/// How many deliveries of each app one claim may take: the worker's room for each (what the app may hold on the
/// node, less what it holds now).
public struct ClaimRooms: Sendable, Hashable {
    /// The room of an app not in `rooms`.
    public var perApp: Int
    /// Apps with another room (0: none of theirs this time).
    public var rooms: [String: Int]

    public init(perApp: Int, rooms: [String: Int] = [:]) {
        self.perApp = max(0, perApp)
        self.rooms = rooms.mapValues { max(0, $0) }
    }

    /// No bound but the claim's limit.
    public static let unbounded = ClaimRooms(perApp: .max)

    public func room(_ app: String) -> Int { rooms[app] ?? perApp }

    /// The apps listed with no room at all, and those listed with some (as parallel arrays, for the databases).
    var listed: (apps: [String], rooms: [Int]) {
        let sorted = rooms.sorted { $0.key < $1.key }
        return (sorted.map(\.key), sorted.map { min($0.value, Int(Int32.max)) })
    }
}

/// What becomes of a claimed delivery: a final outcome, another try later, or back to the queue untried.
public struct Settlement: Sendable, Hashable {
    public enum Action: Sendable, Hashable {
        case finish(DeliveryOutcome)
        case reschedule(notBefore: Date, reason: String)
        /// Back to the queue, due at `notBefore`, without counting the attempt its claim counted: it was never sent
        /// (its push service's circuit is open, or its app or push service had all the sends they may have).
        case release(notBefore: Date, reason: String)
    }
    public var id: Int64
    public var action: Action

    /// Whether its outcome is an event for webhooks: a finish or a retry; a release was never sent.
    public var tellsWebhooks: Bool {
        if case .release = action { return false }
        return true
    }

    /// A reschedule's or a release's reason is bounded as an outcome's is (``DeliveryOutcome/bounded(_:limit:)``).
    public init(id: Int64, _ action: Action) {
        self.id = id
        switch action {
        case let .reschedule(at, reason):
            self.action = .reschedule(notBefore: at, reason: DeliveryOutcome.bounded(reason))
        case let .release(at, reason):
            self.action = .release(notBefore: at, reason: DeliveryOutcome.bounded(reason))
        case .finish: self.action = action
        }
    }
}

extension DeliveryQueue {
    /// A claim with no bound per app (still fair: each app with due deliveries has its share).
    public func claim(owner: String, limit: Int, now: Date, lease: TimeInterval) async throws -> [DeliveryRecord] {
        try await claim(owner: owner, limit: limit, now: now, lease: lease, rooms: .unbounded)
    }

    /// One at a time, for queues without a batch form (a release is a reschedule there: its attempt counts).
    public func settle(_ items: [Settlement], owner: String, now: Date) async throws -> Set<Int64> {
        var held = Set<Int64>()
        for item in items {
            let ok: Bool
            switch item.action {
            case .finish(let outcome): ok = try await finish(id: item.id, owner: owner, outcome: outcome, now: now)
            case let .reschedule(at, reason), let .release(at, reason):
                ok = try await reschedule(id: item.id, owner: owner, notBefore: at, reason: reason, now: now)
            }
            if ok { held.insert(item.id) }
        }
        return held
    }
}
