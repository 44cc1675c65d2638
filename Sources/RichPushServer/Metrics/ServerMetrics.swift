import Foundation
import NIOConcurrencyHelpers
import Prometheus

/// What `/metrics` shows: notifications accepted, delivery attempts by provider, outcome and reason, the time from
/// due to delivered, and the queue's depth per state; per app, notifications accepted and delivery attempts by
/// provider and outcome. Every label value comes from a bounded set: the first ``maxAppLabels`` apps seen have
/// their own `app` label, later ones share `other`.
public final class ServerMetrics: Sendable {
    public let registry = PrometheusCollectorRegistry()
    let accepted: Counter
    /// Apps with a label of their own (a node serving more sums the rest as `other`).
    public let maxAppLabels: Int
    private let labelledApps = NIOLockedValueBox<Set<String>>([])
    let latencyBuckets: [Double] = [
        0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
        300,
    ]

    /// The counters and histograms every delivery updates, made once per label set: the registry's `make…`
    /// checks the name, the labels and the help text on each call, which cost 1.2% of a delivering node's CPU.
    private struct AttemptKey: Hashable {
        var provider: String
        var state: String
        var reason: String
    }
    private struct AppAttemptKey: Hashable {
        var app: String
        var provider: String
        var state: String
    }
    private let attempts = NIOLockedValueBox<[AttemptKey: Counter]>([:])
    private let appAttempts = NIOLockedValueBox<[AppAttemptKey: Counter]>([:])
    private let latencies = NIOLockedValueBox<[String: ValueHistogram]>([:])

    public init(maxAppLabels: Int = 200) {
        self.maxAppLabels = max(0, maxAppLabels)
        accepted = registry.makeCounter(
            name: "richpush_notifications_accepted_total",
            help: "Notifications accepted by the API"
        )
        registry.makeGauge(
            name: "richpush_build_info",
            labels: [("version", RichPushVersion.current)],
            help: "Always 1: the version this node runs, in its label"
        ).set(Double(1))
        // Counters an alert rule reads are there from the start at 0: a rate over a series that first appears
        // already at 1 misses that first event.
        registry.makeCounter(
            name: "richpush_writes_refused_total",
            labels: [("reason", "disk")],
            help: "Requests that would have stored something, refused to protect the node"
        ).increment(by: Int64(0))
        for reason in ["per-client", "node"] {
            registry.makeCounter(
                name: "richpush_connections_refused_total",
                labels: [("reason", reason)],
                help: "Connections closed as soon as accepted: past the bound per client address or per node"
            ).increment(by: Int64(0))
        }
        for rule in ClosingRule.allCases { closedCounter(rule.rawValue).increment(by: Int64(0)) }
        registry.makeCounter(
            name: "richpush_fanout_failures_total",
            help: "Registry fan-out runs that failed and will be tried again"
        ).increment(by: Int64(0))
        registry.makeCounter(
            name: "richpush_push_service_circuit_opened_total",
            help: "Times a push service origin's circuit opened on this node (or opened again after a failed probe)"
        ).increment(by: Int64(0))
    }

    /// The `app` label for an app id: its own while there is room, else `other`.
    func appLabel(_ app: String) -> String {
        labelledApps.withLockedValue { apps in
            if apps.contains(app) { return app }
            guard apps.count < maxAppLabels else { return "other" }
            apps.insert(app)
            return app
        }
    }

    func notificationAccepted(app: String, deliveries: Int) {
        accepted.increment()
        registry.makeCounter(
            name: "richpush_app_notifications_accepted_total",
            labels: [("app", appLabel(app))],
            help: "Notifications accepted by the API, per app"
        ).increment()
        deliveriesEnqueued(deliveries)
    }

    func deliveriesEnqueued(_ n: Int) {
        registry.makeCounter(name: "richpush_deliveries_enqueued_total", help: "Deliveries created by fan-out")
            .increment(by: Int64(n))
    }

    /// One attempt's result: `state` is delivered, failed, pruned, expired or retry.
    func attempt(app: String, provider: DeliveryProvider, state: String, reason: String?) {
        let key = AttemptKey(provider: provider.rawValue, state: state, reason: reason ?? "none")
        let counter = attempts.withLockedValue { made in
            if let c = made[key] { return c }
            let c = registry.makeCounter(
                name: "richpush_delivery_attempts_total",
                labels: [("provider", key.provider), ("state", key.state), ("reason", key.reason)],
                help: "Delivery attempts by provider, outcome and reason"
            )
            made[key] = c
            return c
        }
        counter.increment()
        // Per app without the reason: apps times reasons would not stay bounded.
        let appKey = AppAttemptKey(app: appLabel(app), provider: provider.rawValue, state: state)
        let perApp = appAttempts.withLockedValue { made in
            if let c = made[appKey] { return c }
            let c = registry.makeCounter(
                name: "richpush_app_delivery_attempts_total",
                labels: [("app", appKey.app), ("provider", appKey.provider), ("state", appKey.state)],
                help: "Delivery attempts per app, by provider and outcome"
            )
            made[appKey] = c
            return c
        }
        perApp.increment()
    }

    func delivered(provider: DeliveryProvider, secondsSinceDue: Double) {
        let histogram = latencies.withLockedValue { made in
            if let h = made[provider.rawValue] { return h }
            let h = registry.makeValueHistogram(
                name: "richpush_delivery_latency_seconds",
                labels: [("provider", provider.rawValue)],
                buckets: latencyBuckets,
                help: "Seconds from a delivery being due to its acceptance by the provider"
            )
            made[provider.rawValue] = h
            return h
        }
        histogram.record(max(0, secondsSinceDue))
    }

    /// One claim of a batch from the queue: how long the database took (whatever it handed out).
    func claimed(seconds: Double) {
        registry.makeValueHistogram(
            name: "richpush_claim_seconds",
            buckets: latencyBuckets,
            help: "Seconds one claim of a batch of deliveries took"
        ).record(max(0, seconds))
    }

    /// A claimed delivery went back to the queue untried, its attempt not counted: `reason` is `circuit_open`,
    /// `origin_busy`, `app_busy`, or `stopping` (claimed, not yet started, when its worker stopped).
    func deferred(reason: String) {
        registry.makeCounter(
            name: "richpush_deliveries_deferred_total",
            labels: [("reason", reason)],
            help:
                "Claimed deliveries given back to the queue untried (their push service's circuit open, or their push service or app at its bound on this node)"
        ).increment()
    }

    /// Claimed deliveries this node held too long to send: `how` is `taken` (a renewal found another worker holding
    /// it), `lost` (not sent: taken, as a renewal said) or `ending` (not sent: under a third of its lease left). A
    /// steady count means the node, or its database, is too slow for `lease_seconds`.
    func leaseLost(_ how: String, count: Int = 1) {
        registry.makeCounter(
            name: "richpush_leases_lost_total",
            labels: [("how", how)],
            help: "Claimed deliveries whose lease this node lost or let run too short to send (another node sends them)"
        ).increment(by: Int64(count))
    }

    /// Whether the node's database answers (1) or not (0).
    public func databaseUp(_ up: Bool) {
        registry.makeGauge(
            name: "richpush_database_up",
            help: "1 while this node's database answers, 0 while it does not"
        ).set(Double(up ? 1 : 0))
    }

    func queueDepth(_ counts: [DeliveryState: Int]) {
        for state in DeliveryState.allCases {
            registry.makeGauge(
                name: "richpush_queue_deliveries",
                labels: [("state", state.rawValue)],
                help: "Deliveries in the queue by state"
            )
            .set(Double(counts[state] ?? 0))
        }
    }

    /// Free bytes on a watched disk (`database`, `media`), read by the disk floor at most once a second.
    func diskFree(_ name: String, bytes: Int64) {
        registry.makeGauge(
            name: "richpush_disk_free_bytes",
            labels: [("disk", name)],
            help: "Bytes free on the disk holding the database or the hosted media"
        ).set(Double(bytes))
    }

    /// A request was refused to protect the node (`disk`: below the free-space floor).
    func writeRefused(reason: String) {
        registry.makeCounter(
            name: "richpush_writes_refused_total",
            labels: [("reason", reason)],
            help: "Requests that would have stored something, refused to protect the node"
        ).increment()
    }

    /// A connection was closed as soon as it was accepted (`per-client`, `node`: past ``ConnectionLimits``).
    func connectionRefused(reason: String) {
        registry.makeCounter(
            name: "richpush_connections_refused_total",
            labels: [("reason", reason)],
            help: "Connections closed as soon as accepted: past the bound per client address or per node"
        ).increment()
    }

    /// A connection the node admitted was closed by one of its rules (``ClosingRule``).
    func connectionClosed(rule: String) { closedCounter(rule).increment() }

    private func closedCounter(_ rule: String) -> Counter {
        registry.makeCounter(
            name: "richpush_connections_closed_total",
            labels: [("rule", rule)],
            help: "Connections closed by the node's rules: idle, stalled (the client read nothing), slow_body"
        )
    }

    /// Connections the node holds and client addresses holding any, read when /metrics is.
    func connectionsOpen(_ total: Int, clients: Int) {
        registry.makeGauge(name: "richpush_connections_open", help: "Connections the node holds").set(Double(total))
        registry.makeGauge(name: "richpush_connection_clients", help: "Client addresses holding a connection")
            .set(Double(clients))
    }

    /// A registry fan-out run failed (it is tried again with growing pauses): an alert rule watches this.
    func fanOutFailed() {
        registry.makeCounter(
            name: "richpush_fanout_failures_total",
            help: "Registry fan-out runs that failed and will be tried again"
        ).increment()
    }

    func fanOutsRunning(_ n: Int) {
        registry.makeGauge(name: "richpush_fanouts_running", help: "Registry fan-outs running after their answer").set(
            Double(n)
        )
    }

    /// A device's receipt was recorded.
    func receiptRecorded() {
        registry.makeCounter(name: "richpush_device_receipts_total", help: "Delivery reports recorded from devices")
            .increment()
    }

    /// One turn of a live view (read and written to every watcher of a notification).
    func insightTurn(seconds: Double) {
        registry.makeCounter(
            name: "richpush_insight_turns_total",
            help: "Turns of the console's live views (one per watched notification, whatever the watchers)"
        ).increment()
        registry.makeCounter(
            name: "richpush_insight_turn_seconds_total",
            help: "Seconds the live views' turns took"
        ).increment(by: seconds)
    }

    /// An open or a dismissal an app reported.
    func openRecorded(_ event: DeliveryOpen.Event) {
        registry.makeCounter(
            name: "richpush_opens_total",
            labels: [("event", event.rawValue)],
            help: "Opens and dismissals apps reported, one per delivery"
        ).increment()
    }

    /// Notifications deleted past their retention, with their deliveries and receipts.
    public func notificationsSwept(_ n: Int) {
        registry.makeCounter(
            name: "richpush_notifications_swept_total",
            help: "Notifications deleted past their retention, with their deliveries and receipts"
        ).increment(by: Int64(n))
    }

    /// Hosted media deleted past its retention.
    public func mediaSwept(files: Int, bytes: Int) {
        registry.makeCounter(
            name: "richpush_media_swept_files_total",
            help: "Hosted media files deleted past their retention"
        ).increment(by: Int64(files))
        registry.makeCounter(
            name: "richpush_media_swept_bytes_total",
            help: "Bytes of hosted media deleted past their retention"
        ).increment(by: Int64(bytes))
    }

    /// Push service origins with a series of their own in `richpush_push_service_state` (at most
    /// ``maxOriginLabels``: an origin is a host anyone registering a web subscription may choose).
    private let labelledOrigins = NIOLockedValueBox<Set<String>>([])
    static let maxOriginLabels = 100

    /// A push service origin's circuit changed state on this node: 0 closed, 1 probing, 2 open. An origin gets its
    /// series the first time its circuit leaves closed, while fewer than ``maxOriginLabels`` have one; the count
    /// per state covers every origin.
    func pushServiceState(origin: String, state: String) {
        let value: Double = state == "open" ? 2 : state == "probing" ? 1 : 0
        let labelled = labelledOrigins.withLockedValue { origins -> Bool in
            if origins.contains(origin) { return true }
            guard value > 0, origins.count < Self.maxOriginLabels else { return false }
            origins.insert(origin)
            return true
        }
        if labelled {
            registry.makeGauge(
                name: "richpush_push_service_state",
                labels: [("origin", origin)],
                help: "A push service origin's circuit on this node: 0 closed, 1 probing, 2 open"
            ).set(value)
        }
    }

    /// A push service origin's circuit opened (or opened again after a failed probe).
    func pushServiceOpened() {
        registry.makeCounter(
            name: "richpush_push_service_circuit_opened_total",
            help: "Times a push service origin's circuit opened on this node (or opened again after a failed probe)"
        ).increment()
    }

    /// How many origins this node holds in each circuit state.
    func pushServiceCircuits(_ counts: [String: Int]) {
        for state in ["closed", "probing", "open"] {
            registry.makeGauge(
                name: "richpush_push_service_circuits",
                labels: [("state", state)],
                help: "Push service origins this node knows, by the state of their circuit"
            ).set(Double(counts[state] ?? 0))
        }
    }

    /// The Prometheus text exposition.
    public func render() -> String { registry.emitToString() }
}
