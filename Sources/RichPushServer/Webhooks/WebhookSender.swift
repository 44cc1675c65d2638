import Crypto
import Foundation
import Logging
import NIOConcurrencyHelpers
import RichPushCore
import ServiceLifecycle

/// Sends each endpoint the events it hears, in order, at least once: claims endpoints with something to send (one
/// node at a time holds one), sends a batch, and moves the endpoint's cursor when its receiver acknowledged it
/// (a 2xx). A failed request is retried with the same events and the same `webhook-id` after a backoff; an
/// endpoint failing for ``WebhookLimits/disableAfter`` is disabled, and one that answers 410 at once.
///
/// Deliveries never wait on it: it runs beside the workers, its own connections and tasks, and each endpoint
/// holds at most one request in flight (a hanging receiver holds one of ``Configuration/maxEndpointsInFlight``
/// slots until the request's timeout, and at most ``Configuration/maxPerApp`` of them per app).
final class WebhookSender: Service, Sendable {
    struct Configuration: Sendable {
        /// Names the node's leases.
        var owner: String
        /// The pause between looks for work when there is none (events wait at most about this long).
        var tick: TimeInterval = 1
        var lease: TimeInterval = 60
        var maxEndpointsInFlight = 32
        var maxPerApp = 3
        /// Requests one endpoint sends before it gives its slot back.
        var requestsPerTurn = 20
    }

    let store: any WebhookStore
    let client: WebhookClient
    let configuration: Configuration
    let metrics: ServerMetrics?
    let logger: Logger
    let now: @Sendable () -> Date
    private let stopping = NIOLockedValueBox(false)
    private let wake = WakeSignal()
    private let held = NIOLockedValueBox<[String: Int]>([:])
    /// A claim is under way (one at a time: two at once would each take the room there is).
    private let claiming = NIOLockedValueBox(false)

    init(
        store: any WebhookStore,
        client: WebhookClient,
        configuration: Configuration,
        metrics: ServerMetrics?,
        logger: Logger,
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.store = store
        self.client = client
        self.configuration = configuration
        self.metrics = metrics
        self.logger = logger
        self.now = now
        metrics?.webhookCountersAtZero()
    }

    /// Looks for work at once (an endpoint was created, enabled, tested or asked to replay on this node).
    func nudge() { wake.signal() }

    func run() async {
        await withGracefulShutdownHandler {
            await withDiscardingTaskGroup { group in
                while !self.stopping.withLockedValue({ $0 }) && !Task.isCancelled {
                    self.claimAndStart(&group)
                    await self.wake.wait(upTo: self.configuration.tick)
                }
            }
        } onGracefulShutdown: {
            self.stopping.withLockedValue { $0 = true }
            self.wake.signal()
        }
        client.shutdown()
    }

    private func claimAndStart(_ group: inout DiscardingTaskGroup) {
        let inFlight = held.withLockedValue { $0.values.reduce(0, +) }
        metrics?.webhookEndpointsInFlight(inFlight)
        let room = configuration.maxEndpointsInFlight - inFlight
        let start = claiming.withLockedValue { c -> Bool in
            if c { return false }
            c = true
            return true
        }
        guard start else { return }
        guard room > 0 else {
            claiming.withLockedValue { $0 = false }
            return
        }
        group.addTask {
            let admitted: [WebhookEndpoint]
            let refused: [WebhookEndpoint]
            do {
                let claimed = try await self.store.claim(
                    owner: self.configuration.owner,
                    now: self.now(),
                    lease: self.configuration.lease,
                    limit: room
                )
                (admitted, refused) = self.admit(claimed)
                self.claiming.withLockedValue { $0 = false }
            } catch {
                self.claiming.withLockedValue { $0 = false }
                self.logger.warning("could not claim webhook endpoints", metadata: ["error": .string("\(error)")])
                return
            }
            for e in refused { try? await self.store.release(id: e.id, owner: self.configuration.owner) }
            await withDiscardingTaskGroup { turns in
                for e in admitted {
                    turns.addTask {
                        await self.serve(e)
                        self.held.withLockedValue { h in
                            h[e.appID, default: 1] -= 1
                            if h[e.appID] == 0 { h[e.appID] = nil }
                        }
                        self.wake.signal()
                    }
                }
            }
        }
    }

    /// Splits a claim into the endpoints this node sends to now (counted as held at once, so that the next claim
    /// sees them) and those past their app's share, given back.
    private func admit(_ claimed: [WebhookEndpoint]) -> (admitted: [WebhookEndpoint], refused: [WebhookEndpoint]) {
        held.withLockedValue { h in
            var admitted: [WebhookEndpoint] = []
            var refused: [WebhookEndpoint] = []
            for e in claimed {
                if h[e.appID, default: 0] < configuration.maxPerApp {
                    h[e.appID, default: 0] += 1
                    admitted.append(e)
                } else {
                    refused.append(e)
                }
            }
            return (admitted, refused)
        }
    }

    /// One endpoint's turn: requests until nothing is left, one fails, or the turn's share is used; then its
    /// lease goes.
    func serve(_ start: WebhookEndpoint) async {
        var e = start
        var renewed = false
        for _ in 0..<configuration.requestsPerTurn {
            if stopping.withLockedValue({ $0 }) { break }
            guard await step(&e, renewed: &renewed) == .more else { break }
        }
        try? await store.release(id: e.id, owner: configuration.owner)
    }

    enum Step { case more, done, failed }

    /// Sends the endpoint's next request (its replay's first, while it has one). The database hands over only the
    /// events the endpoint hears, one batch at a time (a retry: exactly those it sent before). `renewed`: `e` was
    /// read with its lease extended by the acknowledgement just before (so not again).
    func step(_ e: inout WebhookEndpoint, renewed: inout Bool) async -> Step {
        let owner = configuration.owner
        do {
            // The endpoint as it stands now: a turn ends when its lease was lost (another node may have it), or the
            // endpoint went or was disabled meanwhile; a new URL, secret or set of events applies from this request.
            if !renewed {
                guard
                    let fresh = try await store.extend(
                        id: e.id,
                        owner: owner,
                        until: now().addingTimeInterval(configuration.lease)
                    )
                else { return .done }
                e = fresh
            }
            renewed = false
            guard e.disabledAt == nil else { return .done }
            if let replay = e.replay {
                let rows = try await store.replayEvents(appID: e.appID, replay: replay, limit: e.batchSize, hearing: e)
                guard !rows.isEmpty else {
                    try await store.acknowledgeReplay(id: e.id, owner: owner, cursor: nil, now: now())
                    e.replay = nil
                    return .more
                }
                let batch = WebhookBatch(rows, for: e, exact: nil)
                // A failed replay request keeps the live retry's end as it was: the replay reads its rows again.
                if await send(batch, to: e, retryEnd: e.batchEnd) == false { return .failed }
                try await store.acknowledgeReplay(id: e.id, owner: owner, cursor: batch.end, now: now())
                e.replay?.cursor = batch.end
                return .more
            }
            let limit = e.batchSize
            let rows = try await store.events(
                appID: e.appID,
                after: e.cursor,
                through: e.batchEnd,
                limit: limit,
                hearing: e
            )
            guard !rows.isEmpty else {
                // A retried request whose events are gone (past their retention): nothing of it is left to send.
                if let end = e.batchEnd {
                    try await store.acknowledge(id: e.id, owner: owner, cursor: end, now: now())
                    (e.cursor, e.batchEnd) = (end, nil)
                    return .more
                }
                // Nothing it hears: its cursor moves past what it does not (or the next claim would find those
                // again), to the newest event seen, once nothing it hears is found up to there (one may have come
                // since the read above).
                guard let head = try await store.head(appID: e.appID), head > e.cursor else { return .done }
                let since = try await store.events(
                    appID: e.appID,
                    after: e.cursor,
                    through: head,
                    limit: 1,
                    hearing: e
                )
                guard since.isEmpty else { return .more }
                try await store.acknowledge(id: e.id, owner: owner, cursor: head, now: now())
                e.cursor = head
                return .done
            }
            let batch = WebhookBatch(rows, for: e, exact: e.batchEnd)
            if await send(batch, to: e, retryEnd: batch.end) == false { return .failed }
            guard rows.count >= limit || batch.cut else {
                try await store.acknowledge(id: e.id, owner: owner, cursor: batch.end, now: now())
                return .done
            }
            // More to send: the acknowledgement extends the lease and reads the endpoint for the next request.
            let t = now()
            guard
                let fresh = try await store.acknowledgeAndExtend(
                    id: e.id,
                    owner: owner,
                    cursor: batch.end,
                    now: t,
                    until: t.addingTimeInterval(configuration.lease)
                )
            else { return .done }
            (e, renewed) = (fresh, true)
            return .more
        } catch {
            if !Task.isCancelled {
                logger.warning(
                    "a webhook turn could not read or record",
                    metadata: ["endpoint": .string(e.id), "error": .string("\(error)")]
                )
            }
            return .failed
        }
    }

    /// A request's headers: its JSON, who sends it, and the Standard Webhooks id, time and signatures (each secret
    /// that signs at `date`).
    static func headers(_ batch: WebhookBatch, for e: WebhookEndpoint, at date: Date) -> [(String, String)] {
        let timestamp = Int64(date.timeIntervalSince1970)
        let signature = WebhookSigner.signature(
            id: batch.id,
            timestamp: timestamp,
            body: batch.body,
            secrets: e.signingSecrets(at: date)
        )
        return [
            ("content-type", "application/json"), ("user-agent", "RichPush/\(RichPushVersion.current)"),
            ("webhook-id", batch.id), ("webhook-timestamp", String(timestamp)), ("webhook-signature", signature),
        ]
    }

    /// Sends one batch; true when the receiver acknowledged it. A failure is recorded (the same events are tried
    /// again after the backoff; too long failing, the endpoint is disabled).
    func send(_ batch: WebhookBatch, to e: WebhookEndpoint, retryEnd: WebhookCursor?) async -> Bool {
        let started = now()
        let headers = Self.headers(batch, for: e, at: started)
        let answer = await client.post(endpoint: e.id, url: e.url, headers: headers, body: batch.body)
        let seconds = now().timeIntervalSince(started)
        var error: String
        var retryAfter: TimeInterval?
        switch answer {
        case .status(let s, _) where (200...299).contains(s):
            metrics?.webhookRequest(result: "delivered", events: batch.events.count, seconds: seconds)
            return true
        case .status(410, _):
            metrics?.webhookRequest(result: "gone", events: batch.events.count, seconds: seconds)
            await record(
                e,
                batchEnd: retryEnd,
                error: "HTTP 410: the receiver is gone",
                disable: "the receiver answered 410 Gone"
            )
            return false
        case .status(let s, let after):
            error = (300...399).contains(s) ? "HTTP \(s): redirects are not followed (give the final URL)" : "HTTP \(s)"
            retryAfter = after
        case .failed(let why):
            error = why
        }
        metrics?.webhookRequest(result: "failed", events: batch.events.count, seconds: seconds)
        let failingSince = e.failingSince ?? started
        let disable =
            now().timeIntervalSince(failingSince) >= WebhookLimits.disableAfter
            ? "failing since \(ISO8601DateFormatter().string(from: failingSince)): \(error)" : nil
        await record(e, batchEnd: retryEnd, error: error, disable: disable, retryAfter: retryAfter)
        return false
    }

    /// The tests under way: each endpoint's id with its app's (a test waits for its receiver's answer).
    private let testing = NIOLockedValueBox<[String: String]>([:])

    /// How many tests are under way.
    var testsUnderWay: Int { testing.withLockedValue { $0.count } }

    /// At most this many tests at once on a node, and of one app's endpoints.
    static let testsPerNode = 8
    static let testsPerApp = 2

    /// What a test request met.
    struct TestResult: Sendable {
        var id: String
        var status: Int?
        var error: String?
        var milliseconds: Int
    }

    /// Why a test was not begun: the bound that was full.
    enum TestRefused: Error, Equatable {
        case endpointBusy, appBusy, nodeBusy
    }

    /// Sends one `webhook.test` event to the endpoint now, signed as every request is, and waits for its answer.
    /// Recorded nowhere: the endpoint's cursor and failures stay as they are. One test of an endpoint at a time, at
    /// most ``testsPerApp`` of one app's and ``testsPerNode`` on the node: a test waits for its receiver, and a
    /// hanging one would otherwise hold as many of the node's tasks as its callers send.
    func test(_ e: WebhookEndpoint) async -> Result<TestResult, TestRefused> {
        let refused = testing.withLockedValue { t -> TestRefused? in
            if t[e.id] != nil { return .endpointBusy }
            if t.values.filter({ $0 == e.appID }).count >= Self.testsPerApp { return .appBusy }
            if t.count >= Self.testsPerNode { return .nodeBusy }
            t[e.id] = e.appID
            return nil
        }
        if let refused { return .failure(refused) }
        defer { _ = testing.withLockedValue { $0.removeValue(forKey: e.id) } }
        let started = now()
        let event = WebhookEvent(
            seq: 0,
            xid: 0,
            appID: e.appID,
            endpointID: e.id,
            type: WebhookEventType.test.rawValue,
            detail: JSONValue.object(["message": .string("a test from RichPush: this endpoint is reached and signed")])
                .jsonString,
            createdAt: started
        )
        var batch = WebhookBatch([event], for: e, exact: nil)
        batch.id = "msg_test_" + String(Int64(started.timeIntervalSince1970 * 1000))
        let headers = Self.headers(batch, for: e, at: started)
        let answer = await client.post(endpoint: e.id + "/test", url: e.url, headers: headers, body: batch.body)
        client.forget(e.id + "/test")
        let ms = Int(max(0, now().timeIntervalSince(started)) * 1000)
        switch answer {
        case .status(let s, _): return .success(TestResult(id: batch.id, status: s, milliseconds: ms))
        case .failed(let why): return .success(TestResult(id: batch.id, error: why, milliseconds: ms))
        }
    }

    private func record(
        _ e: WebhookEndpoint,
        batchEnd: WebhookCursor?,
        error: String,
        disable: String?,
        retryAfter: TimeInterval? = nil
    ) async {
        let t = now()
        let pause = max(WebhookLimits.backoff(afterFailures: e.failures + 1), min(retryAfter ?? 0, 3600))
        do {
            try await store.fail(
                id: e.id,
                owner: configuration.owner,
                batchEnd: batchEnd,
                error: String(error.prefix(300)),
                next: t.addingTimeInterval(pause),
                disable: disable,
                now: t
            )
        } catch {
            logger.warning("could not record a webhook failure", metadata: ["endpoint": .string(e.id)])
        }
        if let disable {
            metrics?.webhookDisabled()
            logger.warning(
                "webhook endpoint disabled",
                metadata: ["app": .string(e.appID), "endpoint": .string(e.id), "reason": .string(disable)]
            )
        }
    }
}

/// One request's events: those the endpoint hears among the rows read, at most its batch size and
/// ``WebhookLimits/maxBodyBytes`` of body, with the place its cursor moves to when the request is acknowledged.
/// The same rows give the same batch, body and id: a retry sends exactly what was sent before.
struct WebhookBatch {
    var events: [WebhookEvent]
    /// Where the cursor moves once acknowledged: past every row read that the endpoint does not hear, but never
    /// past a heard event left for the next request.
    var end: WebhookCursor
    /// Cut short of what was read (the batch size or the body's bound).
    var cut: Bool
    var body: [UInt8]
    /// `msg_` and a digest of the endpoint and its events' ids.
    var id: String

    /// `exact`: a retry's end, whose events all go again; nil: a new batch from the rows. Each event is serialized
    /// once and the body put together from those bytes (keys in the order `serialized()` writes them).
    init(_ rows: [WebhookEvent], for e: WebhookEndpoint, exact: WebhookCursor?) {
        var taken: [WebhookEvent] = []
        var joined: [UInt8] = []
        joined.reserveCapacity(rows.count * 400)
        var cut = false
        for event in rows where e.hears(event) {
            if exact == nil, taken.count >= e.batchSize {
                cut = true
                break
            }
            let bytes = event.serialized()
            if exact == nil, !taken.isEmpty, joined.count + bytes.count + 128 > WebhookLimits.maxBodyBytes {
                cut = true
                break
            }
            if !taken.isEmpty { joined.append(UInt8(ascii: ",")) }
            joined += bytes
            taken.append(event)
        }
        events = taken
        self.cut = cut
        // A retry's end, unless the rows stopped short of it (never past the last row sent).
        let retryEnd = exact.map { ex in rows.count >= e.batchSize ? min(ex, rows.last?.cursor ?? ex) : ex }
        end = retryEnd ?? (cut ? taken.last?.cursor : nil) ?? rows.last?.cursor ?? e.cursor
        let newest = taken.map(\.createdAt).max() ?? Date(timeIntervalSince1970: 0)
        var body = Array(#"{"data":{"events":["#.utf8)
        body.reserveCapacity(joined.count + 96)
        body += joined
        body += Array(#"]},"timestamp":""#.utf8)
        body += Array(WebhookTime.rfc3339(newest).utf8)
        body += Array(#"","type":"batch"}"#.utf8)
        self.body = body
        let digest = SHA256.hash(data: Data((e.id + ":" + taken.map(\.id).joined(separator: ",")).utf8))
        let hex = Array("0123456789abcdef".utf8)
        var idBytes = Array("msg_".utf8)
        for byte in digest.prefix(16) { idBytes += [hex[Int(byte >> 4)], hex[Int(byte & 0xF)]] }
        id = String(decoding: idBytes, as: UTF8.self)
    }
}
