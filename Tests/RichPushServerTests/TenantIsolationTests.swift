import Crypto
import Foundation
import Hummingbird
import HummingbirdTesting
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RichPushCore
import RichPushSandbox
import RichPushTransport
import RichPushWebPush
import Testing

@testable import RichPushServer

/// No app's sends stall another's: the worker keeps claiming while sends hang, an app and a push service origin
/// hold no more than their bounds, and a push service that stops answering is opened as a circuit, probed, and
/// closed when it answers again. Against the sandbox's emulators over real TLS, with SQLite queues.
@Suite struct TenantIsolationTests {
    /// A sandbox, a second Web Push service of its own (to silence), and an event loop for the providers.
    struct Fixture {
        let dir: URL
        let sandbox: Sandbox
        let push: WebPushEmulator
        let group: MultiThreadedEventLoopGroup
        let queue: SQLiteDeliveryQueue
        let vapid = P256.Signing.PrivateKey()

        static func start(http1Only: Bool = false) async throws -> Fixture {
            let dir = FileManager.default.temporaryDirectory.appendingPathComponent("isolation-\(UUID().uuidString)")
            let sandbox = try await Sandbox.start(directory: dir, threads: 1)
            let push = try WebPushEmulator(
                credentials: sandbox.credentials,
                configuration: .init(http1Only: http1Only)
            )
            try await push.start()
            return Fixture(
                dir: dir,
                sandbox: sandbox,
                push: push,
                group: MultiThreadedEventLoopGroup(numberOfThreads: 1),
                queue: try SQLiteDeliveryQueue(path: dir.appendingPathComponent("queue.sqlite").path)
            )
        }

        func stop() async {
            await push.stop()
            try? await group.shutdownGracefully()
            await sandbox.stop()
            try? FileManager.default.removeItem(at: dir)
        }

        /// The push service's origin, as the admission names it.
        var origin: String { "https://127.0.0.1:\(push.port)" }

        /// APNs and FCM through the sandbox, Web Push to any loopback service with the sandbox's CA.
        func providers(
            connectTimeout: TimeAmount = .seconds(4),
            requestTimeout: TimeAmount? = nil,
            http1Connections: Int = 8
        ) throws -> Providers {
            let trust = TLSTrust.certificateAuthority(pem: sandbox.credentials.caCertificatePEM)
            let webPush = WebPushProvider(
                .init(
                    policy: AddressPolicy(allowAll: true),
                    trust: trust,
                    http1ConnectionsPerOrigin: http1Connections,
                    connectTimeout: connectTimeout,
                    requestTimeout: requestTimeout ?? connectTimeout
                ),
                eventLoopGroup: group
            )
            return Providers(try Providers.sandbox(sandbox).all + [webPush])
        }

        /// `n` subscriptions at the service, as the tokens web devices register.
        func subscriptions(_ n: Int) throws -> [String] {
            try (0..<n).map { _ in
                try WebPushSubscription(json: push.subscribe(applicationServerKey: VAPID.publicKey(vapid.publicKey)))
                    .token
            }
        }

        /// A sender whose apps are `web` (with the VAPID key) and any other (the sandbox's APNs credentials).
        func sender(_ providers: Providers) -> ProviderDeliverySender {
            let key = vapid
            return ProviderDeliverySender(
                providers: providers,
                app: { id in
                    ServerApp(
                        id: id,
                        name: id,
                        bundleID: "com.example.app",
                        webPush: WebPushCredentials(
                            privateKey: Array(key.rawRepresentation),
                            subject: "mailto:ops@example.com"
                        )
                    )
                },
                message: { _ in PushMessage(alert: .init(title: "Hello", body: "from the isolation tests")) }
            )
        }
    }

    /// Samples a value every few milliseconds while a test runs; keeps the largest.
    final class Peak: Sendable {
        private let peak = NIOLockedValueBox(0)
        private let task: NIOLockedValueBox<Task<Void, Never>?> = NIOLockedValueBox(nil)

        init(_ read: @escaping @Sendable () -> Int) {
            let peak = self.peak
            task.withLockedValue {
                $0 = Task {
                    while !Task.isCancelled {
                        let v = read()
                        peak.withLockedValue { $0 = max($0, v) }
                        try? await Task.sleep(nanoseconds: 2_000_000)
                    }
                }
            }
        }

        func stop() -> Int {
            task.withLockedValue { $0?.cancel() }
            return peak.withLockedValue { $0 }
        }
    }

    /// One app's 1,000 web subscriptions at a push service that completes TLS and never answers: another app's
    /// one-device send is delivered in under 2 s all the same (the worker waited for its whole batch before it
    /// claimed again: 103.9 s measured with 1,258). The hanging app holds no more than its share of the node, its
    /// service no more than its bound; cancelled, the worker ends every send it holds and records each outcome.
    @Test func aPushServiceThatNeverAnswersStallsNoOtherApp() async throws {
        let f = try await Fixture.start()
        // The flood's sends hang until their deadline (15 s): the other app's must arrive while they all still
        // hang, which is what the old worker could not do (it waited for them). Judged by that, not by a number of
        // seconds a loaded machine stretches (7.2 s under the whole suite, 0.2 s alone).
        let providers = try f.providers(connectTimeout: .seconds(60))
        f.push.setSilent(true)
        let admission = DeliveryAdmission(limits: .init(perApp: 150, perOrigin: 100))
        var configuration = DeliveryWorker.Configuration(batchSize: 200, concurrency: 200, lease: 60)
        configuration.sendDeadline = 15
        let worker = DeliveryWorker(
            configuration: configuration,
            queue: f.queue,
            sender: f.sender(providers),
            admission: admission
        )
        try await f.queue.enqueue(
            try f.subscriptions(1000).map {
                NewDelivery(notificationID: "flood", appID: "hostile", provider: .webPush, target: .token($0))
            }
        )
        let origin = f.origin
        let inFlight = Peak { admission.inFlight(origin: origin) }
        let held = Peak { admission.held(app: "hostile") }
        let running = Task { await worker.run() }
        // The flood's sends are out and hanging.
        let out = Date()
        while admission.inFlight(origin: origin) < 100, Date().timeIntervalSince(out) < 10 {
            try await Task.sleep(nanoseconds: 10_000_000)
        }
        #expect(admission.inFlight(origin: origin) == 100)

        let token = String(format: "%064x", 0xB0B)
        let sent = Date()
        try await f.queue.enqueue([
            NewDelivery(notificationID: "one", appID: "other-app", provider: .apns, target: .token(token))
        ])
        worker.wake()
        while f.sandbox.apns.recorded(token: token).isEmpty, Date().timeIntervalSince(sent) < 30 {
            try await Task.sleep(nanoseconds: 5_000_000)
        }
        let took = Date().timeIntervalSince(sent)
        let stillHanging = admission.inFlight(origin: origin)
        #expect(!f.sandbox.apns.recorded(token: token).isEmpty)
        #expect(stillHanging == 100, "the other app's send took \(took) s; \(stillHanging) of the flood's still out")
        print(
            "isolation test: the other app's send arrived in \(String(format: "%.2f", took)) s beside 100 hanging sends"
        )

        worker.stop()
        await running.value
        let peakInFlight = inFlight.stop()
        let peakHeld = held.stop()
        #expect(peakInFlight <= 100, "in flight to the silent service at once: \(peakInFlight)")
        #expect(peakHeld <= 150, "deliveries the flooding app held at once: \(peakHeld)")
        let counts = try await f.queue.counts()
        #expect(counts[.leased] == nil, "\(counts)")
        #expect(counts[.delivered] == 1 && counts[.queued] == 1000, "\(counts)")
        let flood = try await f.queue.deliveries(notificationID: "flood")
        // Sent and failed (counted), or given back untried (not counted): never more than one attempt.
        #expect(flood.allSatisfy { $0.attempts <= 1 })
        #expect(flood.contains { $0.reason == "send_deadline" })
        #expect(f.push.acceptedCount == 0)
        await f.stop()
    }

    /// A push service that stops answering: its sends fail at the connect timeout, the circuit opens (its
    /// deliveries wait untried, their attempts not counted), one probe at a time tests it, and when it answers
    /// again the probe closes the circuit and every delivery arrives once.
    @Test func theCircuitOpensProbesAndClosesWhenTheServiceRecovers() async throws {
        let f = try await Fixture.start()
        // A silent service fails each send at the connect timeout, which opens the circuit quickly. The requests
        // after it recovers get a timeout a loaded machine does not reach: with 500 ms for them too, a run beside
        // the whole suite (the test took 36 s there, 4 s alone) counted 52 accepted for 30 deliveries. A request
        // the service accepted after its client had given up, and sent again, is the one way to that count found in
        // the code (at least once, as designed, but not what this test counts); runs alone and beside a part of the
        // suite under load did not repeat it.
        let providers = try f.providers(connectTimeout: .milliseconds(500), requestTimeout: .seconds(15))
        f.push.setSilent(true)
        let metrics = ServerMetrics()
        let admission = DeliveryAdmission(
            limits: .init(perApp: 100, perOrigin: 100, failuresToOpen: 5, firstBackoff: 0.5, maxBackoff: 1),
            metrics: metrics
        )
        let worker = DeliveryWorker(
            configuration: .init(
                batchSize: 50,
                concurrency: 50,
                lease: 60,
                idleWait: 0.05,
                retry: RetryPolicy(baseDelay: 0.05, maxDelay: 0.2, maxAttempts: 20)
            ),
            queue: f.queue,
            sender: f.sender(providers),
            admission: admission,
            metrics: metrics
        )
        try await f.queue.enqueue(
            try f.subscriptions(30).map {
                NewDelivery(notificationID: "n", appID: "web", provider: .webPush, target: .token($0))
            }
        )
        let origin = f.origin
        // While open or probing, at most the probe is in flight.
        let probes = Peak {
            admission.circuitState(origin: origin) == "probing" ? admission.inFlight(origin: origin) : 0
        }
        let running = Task { await worker.run() }
        var seen: [String] = []
        func watch(until state: String, seconds: Double) async throws {
            let start = Date()
            while Date().timeIntervalSince(start) < seconds {
                let s = admission.circuitState(origin: origin)
                if seen.last != s { seen.append(s) }
                if s == state { return }
                try await Task.sleep(nanoseconds: 5_000_000)
            }
        }
        try await watch(until: "open", seconds: 20)
        #expect(seen.contains("open"), "\(seen)")
        // The metrics say so (told just after the state changed).
        let shown = Date()
        func metricsShowOpen() -> Bool {
            // Open (2) or already probing (1), and counted as opened.
            let lines = metrics.render().split(separator: "\n")
            let state = lines.first { $0.hasPrefix("richpush_push_service_state{origin=\"\(origin)\"} ") }
            let opened = lines.first { $0.hasPrefix("richpush_push_service_circuit_opened_total ") }
            return (state?.hasSuffix(" 2.0") == true || state?.hasSuffix(" 1.0") == true) && opened != nil
        }
        while !metricsShowOpen(), Date().timeIntervalSince(shown) < 5 { try await Task.sleep(nanoseconds: 5_000_000) }
        #expect(metricsShowOpen(), "\(metrics.render())")
        // It stays shut while the service is silent: probes go and fail, one at a time.
        try await watch(until: "probing", seconds: 10)
        try await Task.sleep(nanoseconds: 1_500_000_000)
        #expect(admission.circuitState(origin: origin) != "closed")
        let deferred = try await f.queue.deliveries(notificationID: "n").filter { $0.reason == "circuit_open" }
        #expect(!deferred.isEmpty)

        f.push.setSilent(false)
        let recovered = Date()
        while try await f.queue.counts()[.delivered, default: 0] < 30, Date().timeIntervalSince(recovered) < 30 {
            try await Task.sleep(nanoseconds: 20_000_000)
        }
        #expect(admission.circuitState(origin: origin) == "closed")
        let counts = try await f.queue.counts()
        let left = try await f.queue.deliveries(notificationID: "n").filter { $0.state != .delivered }
        #expect(
            counts == [.delivered: 30],
            "\(counts); not delivered: \(left.map { "\($0.state) attempts \($0.attempts) \($0.reason ?? "")" })"
        )
        #expect(f.push.acceptedCount == 30)
        #expect(probes.stop() <= 1)
        worker.stop()
        await running.value
        await f.stop()
    }

    /// A Web Push service whose ALPN offers HTTP/1.1 alone: the subscriptions there are delivered over HTTP/1.1, on
    /// at most the pool's connections; a service offering both is spoken to in HTTP/2.
    @Test func aServiceThatSpeaksOnlyHTTP1IsDeliveredTo() async throws {
        let f = try await Fixture.start(http1Only: true)
        let providers = try f.providers(http1Connections: 3)
        let worker = DeliveryWorker(
            configuration: .init(batchSize: 40, concurrency: 40, lease: 60),
            queue: f.queue,
            sender: f.sender(providers),
            admission: DeliveryAdmission(limits: .init(perApp: 40, perOrigin: 40))
        )
        let tokens = try f.subscriptions(25)
        try await f.queue.enqueue(
            tokens.map { NewDelivery(notificationID: "n", appID: "web", provider: .webPush, target: .token($0)) }
        )
        let started = Date()
        while try await f.queue.counts()[.delivered, default: 0] < 25, Date().timeIntervalSince(started) < 30 {
            if try await worker.runOnce() == 0 { try await Task.sleep(nanoseconds: 20_000_000) }
        }
        #expect(try await f.queue.counts() == [.delivered: 25])
        #expect(f.push.acceptedCount == 25)
        let recorded = f.push.recorded()
        #expect(recorded.allSatisfy { $0.json?["notification"]?["title"] == "Hello" })
        let webPush = try #require(providers[.webPush] as? WebPushProvider)
        #expect(webPush.origins.protocolName(of: f.origin) == "http/1.1")
        // The sandbox's own service offers both: HTTP/2 is chosen.
        let both = try WebPushSubscription(
            json: f.sandbox.webPush.subscribe(applicationServerKey: VAPID.publicKey(f.vapid.publicKey))
        )
        let app = ServerApp(
            id: "web",
            name: "web",
            bundleID: "com.example.app",
            webPush: WebPushCredentials(privateKey: Array(f.vapid.rawRepresentation), subject: "mailto:a@example.com")
        )
        let result = await webPush.send(
            token: both.token,
            message: PushMessage(alert: .init(title: "2")),
            app: app,
            receiptURL: nil
        )
        guard case .delivered = result else {
            Issue.record("\(result)")
            return
        }
        #expect(webPush.origins.protocolName(of: "https://127.0.0.1:\(f.sandbox.webPush.port)") == "h2")
        await providers.shutdown()
        await f.stop()
    }
}

/// The bounds, measured on a sender whose sends take a while: an app never holds more than its bound, an origin
/// never has more than its bound in flight, and what goes back for a bound is not counted as an attempt.
@Suite struct SendBoundsTests {
    /// Each send takes 15 ms; the target's prefix (`o1/…`) names its origin. Counts what is in flight.
    struct SlowSender: DeliverySender {
        let inFlight = NIOLockedValueBox<[String: Int]>([:])
        let peaks = NIOLockedValueBox<[String: Int]>([:])

        func origin(of d: DeliveryRecord) async -> String? {
            d.target.stored.split(separator: "/").first.map(String.init)
        }

        func send(_ d: DeliveryRecord) async -> SendResult {
            let keys = [
                "app:" + d.appID, "origin:" + (d.target.stored.split(separator: "/").first.map(String.init) ?? ""),
            ]
            inFlight.withLockedValue { now in
                for k in keys {
                    now[k, default: 0] += 1
                    let v = now[k]!
                    peaks.withLockedValue { $0[k] = max($0[k] ?? 0, v) }
                }
            }
            try? await Task.sleep(nanoseconds: 15_000_000)
            inFlight.withLockedValue { now in for k in keys { now[k, default: 0] -= 1 } }
            return .delivered(providerID: nil)
        }
    }

    @Test func appsAndOriginsHoldNoMoreThanTheirBounds() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("bounds-\(UUID().uuidString).sqlite")
            .path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let queue = try SQLiteDeliveryQueue(path: path)
        var new: [NewDelivery] = []
        for i in 0..<200 {
            new.append(
                NewDelivery(notificationID: "a", appID: "a", provider: .apns, target: .token("o\(i % 2 + 1)/\(i)"))
            )
        }
        for i in 0..<60 {
            new.append(NewDelivery(notificationID: "b", appID: "b", provider: .apns, target: .token("o1/b\(i)")))
        }
        try await queue.enqueue(new)
        let sender = SlowSender()
        let admission = DeliveryAdmission(limits: .init(perApp: 20, perOrigin: 12, originWait: 0.2, busyDelay: 0.05))
        let worker = DeliveryWorker(
            configuration: .init(batchSize: 50, concurrency: 50, lease: 60, idleWait: 0.02),
            queue: queue,
            sender: sender,
            admission: admission
        )
        let running = Task { await worker.run() }
        let started = Date()
        while try await queue.counts()[.delivered, default: 0] < 260, Date().timeIntervalSince(started) < 60 {
            try await Task.sleep(nanoseconds: 20_000_000)
        }
        worker.stop()
        await running.value
        let counts = try await queue.counts()
        #expect(counts == [.delivered: 260], "\(counts) after \(Date().timeIntervalSince(started)) s")
        let peaks = sender.peaks.withLockedValue { $0 }
        #expect((peaks["app:a"] ?? 0) <= 20 && (peaks["app:b"] ?? 0) <= 20, "\(peaks)")
        #expect((peaks["origin:o1"] ?? 0) <= 12 && (peaks["origin:o2"] ?? 0) <= 12, "\(peaks)")
        // The bounds were reached (the test measures something).
        #expect((peaks["origin:o1"] ?? 0) == 12, "\(peaks)")
        // Every delivery was sent once; those given back on the way did not count an attempt.
        for n in ["a", "b"] {
            #expect(try await queue.deliveries(notificationID: n).allSatisfy { $0.attempts == 1 })
        }
    }

    /// The settings: a JSON file sets both bounds; out of range is refused naming the key.
    @Test func theBoundsAreSettingsWithDefaults() throws {
        var c = ServerConfiguration()
        // An app's bound covers the sends in flight (200) and the two workers' reserves (50 each); an origin's, the
        // sends alone.
        #expect(c.admissionLimits.perApp == 270 && c.admissionLimits.perOrigin == 180)
        var oneLane = ServerConfiguration()
        try oneLane.apply(json: #"{"workers": {"lanes": 1, "batch_size": 40}}"#)
        #expect(oneLane.admissionLimits.perApp == 198 && oneLane.admissionLimits.perOrigin == 180)
        try c.apply(json: #"{"workers": {"concurrency": 100, "in_flight_per_app": 40, "in_flight_per_origin": 30}}"#)
        #expect(c.admissionLimits.perApp == 40 && c.admissionLimits.perOrigin == 30)
        for bad in [
            #"{"workers": {"in_flight_per_app": 0}}"#, #"{"workers": {"in_flight_per_origin": 10001}}"#,
            #"{"workers": {"in_flight_per_app": "many"}}"#,
        ] {
            var d = ServerConfiguration()
            #expect(throws: ServerConfiguration.Problem.self) { try d.apply(json: bad) }
        }
        var e = ServerConfiguration()
        e.inFlightPerOrigin = 0
        #expect(throws: ServerConfiguration.Problem.self) { try e.check() }
    }
}

/// `GET /v1/apps/{app}/push-services`: the origins an app sent to on this node, with their circuits.
@Suite struct PushServicesRouteTests {
    @Test func anAppReadsItsPushServicesAndNoOneElsesAndRefusalsAreNamed() async throws {
        let backend = MemoryBackend()
        let admission = DeliveryAdmission(limits: .init(perApp: 30, perOrigin: 20, failuresToOpen: 2, firstBackoff: 60))
        let api = RichPushAPI(backend: backend, adminKey: "admin-secret", nodeID: "node-1", admission: admission)
        let app = Application(router: api.router())
        try await app.test(.router) { client in
            let (appID, key) = try await APITests.createApp(client)
            let (otherID, otherKey) = try await APITests.createApp(client)
            let (_, readKey) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(appID)/keys",
                key: key,
                body: ["scopes": ["read"]]
            )
            let read = try #require(readKey["api_key"]?.stringValue)
            let (_, sendKey) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(appID)/keys",
                key: key,
                body: ["scopes": ["send"]]
            )
            let send = try #require(sendKey["api_key"]?.stringValue)
            // Two origins: one answering, one failing twice (open).
            let now = Date()
            let good = "https://fcm.googleapis.com:443"
            let dead = "https://push.example.net:443"
            #expect(admission.admit(app: appID, origin: good, now: now) == .send(probe: false))
            admission.finished(app: appID, origin: good, probe: false, signal: .answered, reason: nil, now: now)
            for _ in 0..<2 {
                #expect(admission.admit(app: appID, origin: dead, now: now) == .send(probe: false))
                admission.finished(
                    app: appID,
                    origin: dead,
                    probe: false,
                    signal: .failed,
                    reason: "webpush_transport",
                    now: now
                )
            }
            _ = admission.admit(app: otherID, origin: "https://other.example.org:443", now: now)

            let (status, body) = try await APITests.call(client, .get, "/v1/apps/\(appID)/push-services", key: read)
            #expect(status == 200, "\(body)")
            #expect(body["node"] == "node-1" && body["app_in_flight"] == 0 && body["app_in_flight_limit"] == 30)
            let list = body["push_services"]?.arrayValue ?? []
            #expect(list.compactMap { $0["origin"]?.stringValue } == [dead, good])
            let open = try #require(list.first)
            #expect(open["state"] == "open" && open["last_failure"] == "webpush_transport")
            #expect(open["in_flight"] == 0 && open["in_flight_limit"] == 20 && open["failures_in_a_row"] == 0)
            #expect(open["retry_at"]?.stringValue != nil && open["opened_at"]?.stringValue != nil)
            #expect(list.last?["state"] == "closed" && list.last?["retry_at"] == nil)

            // Another app's key, a key without read, no key, no such app: each refused by name.
            let (foreign, _) = try await APITests.call(client, .get, "/v1/apps/\(appID)/push-services", key: otherKey)
            #expect(foreign == 403)
            let (unscoped, why) = try await APITests.call(client, .get, "/v1/apps/\(appID)/push-services", key: send)
            #expect(unscoped == 403 && why["error"]?["message"]?.stringValue?.contains("read") == true, "\(why)")
            let (anonymous, _) = try await APITests.call(client, .get, "/v1/apps/\(appID)/push-services", key: nil)
            #expect(anonymous == 401)
            let (missing, _) = try await APITests.call(client, .get, "/v1/apps/nope/push-services", key: "admin-secret")
            #expect(missing == 404)
            // The other app sees only its own origin.
            let (_, theirs) = try await APITests.call(client, .get, "/v1/apps/\(otherID)/push-services", key: otherKey)
            #expect(
                theirs["push_services"]?.arrayValue?.compactMap { $0["origin"]?.stringValue } == [
                    "https://other.example.org:443"
                ]
            )
        }
    }
}
