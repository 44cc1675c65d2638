import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import RichPushCore
import RichPushMedia
import Testing

@testable import RichPushServer

/// Receipts from devices: the server signs a receipt address into each rich payload, the device library posts its
/// report there with no API key, and the server admits reports for that notification only.
@Suite struct DeviceReceiptsTests {
    static func token(_ client: APITests.Client) async throws -> (String, String) {
        try await APITests.createApp(client)
    }

    @Test func tokensAdmitTheirDeliveryOnlyUntilItsEnd() {
        let receipts = DeviceReceipts(secret: Array(repeating: 7, count: 32), base: "https://push.example.com/")
        let id = "1d259275-c295-4862-a90c-8c107bbd80e1"
        let end = Date(timeIntervalSince1970: 1_800_000_000)
        let token = receipts.token(for: id, delivery: 123_456_789, until: end)
        #expect(token.hasPrefix(id + ".") && token.count == id.count + 1 + 6 + 1 + 13 + 1 + 22)
        #expect(receipts.check(token: token, now: end) == .valid(notificationID: id, delivery: 123_456_789))
        #expect(receipts.check(token: token, now: end.addingTimeInterval(1)) == .expired(notificationID: id))
        // The payload's template, and the part the provider writes over its placeholder, make the same token.
        let template = try! #require(receipts.template(for: id, until: end))
        #expect(template.hasPrefix("https://push.example.com/v1/receipts/\(id)."))
        #expect(template.hasSuffix("." + DeviceReceipts.placeholder))
        let stamp = try! #require(receipts.stamp(address: template, notificationID: id, delivery: 123_456_789))
        #expect(stamp.address(template) == "https://push.example.com/v1/receipts/" + token)
        // Not a template of this notification's, or not a template at all: nothing to write.
        #expect(receipts.stamp(address: template, notificationID: "other", delivery: 123_456_789) == nil)
        #expect(receipts.stamp(address: "https://example.com/mine", notificationID: id, delivery: 123_456_789) == nil)
        #expect(receipts.stamp(address: nil, notificationID: id, delivery: 123_456_789) == nil)
        let parts = token.split(separator: ".").map(String.init)
        let (stampPart, delivery, signature) = (parts[1], parts[2], parts[3])
        // A signature admits its own notification and delivery only; a later expiry or another delivery cannot be
        // written in, and a changed signature admits nothing.
        #expect(
            receipts.check(
                token: "2d259275-c295-4862-a90c-8c107bbd80e1.\(stampPart).\(delivery).\(signature)",
                now: end
            )
                == .forged
        )
        #expect(receipts.check(token: "\(id).zzzzzz.\(delivery).\(signature)", now: end) == .forged)
        let other = DeviceReceipts.deliveryDigits(123_456_790)
        #expect(receipts.check(token: "\(id).\(stampPart).\(other).\(signature)", now: end) == .forged)
        var flipped = Array(signature)
        flipped[3] = flipped[3] == "A" ? "B" : "A"
        #expect(receipts.check(token: "\(id).\(stampPart).\(delivery).\(String(flipped))", now: end) == .forged)
        let short = String(signature.dropLast(2))
        let bads: [String] = [
            "", ".", "..", "...", id, id + ".", "." + signature, id + "." + signature, token + "A",
            id + ".\(stampPart).\(delivery).!!!!!!!!!!!!!!!!!!!!!!",
            id + ".\(stampPart).\(delivery)." + short, id + ".-1.\(delivery)." + signature,
            id + ".ZZZ.\(delivery)." + signature, id + ".123456789.\(delivery)." + signature,
            id + ".\(stampPart).42.\(signature)", id + ".\(stampPart).-000000000042.\(signature)",
            id + ".\(stampPart).zzzzzzzzzzzzz.\(signature)", id + ".\(stampPart).\(delivery.uppercased()).\(signature)",
            id + ".\(stampPart)." + DeviceReceipts.placeholder,
        ]
        for bad in bads {
            #expect(receipts.check(token: bad, now: end) == .forged, "\(bad)")
        }
        // Another server's secret makes other signatures.
        #expect(DeviceReceipts(secret: Array(repeating: 8, count: 32)).check(token: token, now: end) == .forged)
        // Extreme expiries and delivery ids are held to a range, never a trap.
        for extreme in [
            Date.distantFuture, Date.distantPast, Date(timeIntervalSince1970: .infinity),
            Date(timeIntervalSince1970: -.infinity),
        ] {
            for d in [Int64.min, -1, 0, Int64.max] {
                _ = receipts.check(token: receipts.token(for: id, delivery: d, until: extreme))
            }
        }
        #expect(DeviceReceipts.deliveryDigits(.max).count == 13)
    }

    /// The per-delivery encodings by table give what Foundation's base64 and radix formatting give.
    @Test func addressPartsByTableMatchTheLongWay() {
        var random = SystemRandomNumberGenerator()
        for n in 0..<40 {
            let bytes = (0..<n).map { _ in UInt8.random(in: 0...255, using: &random) }
            let long = Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
            #expect(String(decoding: DeviceReceipts.base64URLBytes(bytes), as: UTF8.self) == long)
        }
        for id: Int64 in [0, 1, 35, 36, 1_295, 123_456_789, .max, -5] {
            let long = String(max(0, id), radix: 36)
            #expect(DeviceReceipts.deliveryDigits(id) == String(repeating: "0", count: 13 - long.count) + long)
        }
    }

    @Test func theSecretOutlivesARestart() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("secret-\(UUID().uuidString).sqlite")
            .path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let first = try await SQLiteServerStore(pool: SQLiteDeliveryQueue.openPool(path: path)).secret(
            named: "receipts"
        )
        let second = try await SQLiteServerStore(pool: SQLiteDeliveryQueue.openPool(path: path)).secret(
            named: "receipts"
        )
        #expect(first.count == 32 && first == second)
        #expect(
            try await SQLiteServerStore(pool: SQLiteDeliveryQueue.openPool(path: path)).secret(named: "other") != first
        )
        let token = DeviceReceipts(secret: first).token(for: "n1", delivery: 7, until: Date().addingTimeInterval(60))
        #expect(DeviceReceipts(secret: second).check(token: token) == .valid(notificationID: "n1", delivery: 7))
    }

    /// The whole loop over a real socket: accepted message → payload with `rp.r` → the device pipeline posts its
    /// report → the server counts it.
    @Test func theDeviceLibraryPostsItsReportToTheAddressInThePayload() async throws {
        let f = try APITests.fixture()
        let receipts = DeviceReceipts(secret: try await f.store.secret(named: "receipts"))
        var api = f.api
        api.receipts = receipts
        let metrics = api.metrics
        // Both sides' timelines, printed with any failure of a post: when each request reached the router and
        // was answered (the server's side), and when each post began and ended (the device's side).
        let timeline = Timeline()
        let responder = TimedResponder(inner: api.router().buildResponder(), timeline: timeline)
        try await Application(responder: responder).test(.live) { client in
            receipts.base = "http://127.0.0.1:\(try #require(client.port))"
            let (app, key) = try await Self.token(client)
            let tokens = [String(repeating: "ab", count: 32), String(repeating: "cd", count: 32)]
            let chart: JSONValue = ["type": "bar", "values": [3, 5, 4, 6], "title": "Signups"]
            let (status, accepted) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/notifications",
                key: key,
                body: [
                    "title": "Week", "chart": chart, "audience": ["apns_tokens": .array(tokens.map { .string($0) })],
                ]
            )
            #expect(status == 202)
            let id = try #require(accepted["id"]?.stringValue)
            let stored = try await f.store.message(id: id)
            var message = try #require(stored)
            let template = try #require(message.receiptURL)
            #expect(template.hasPrefix("\(try #require(receipts.base))/v1/receipts/\(id)."))
            #expect(template.hasSuffix(DeviceReceipts.placeholder))
            // What the provider writes into each delivery's payload as it sends (the worker's part, done by hand
            // here): the delivery's own address.
            let deliveries = try await f.queue.deliveries(notificationID: id).sorted { $0.id < $1.id }
            #expect(deliveries.count == 2)
            func payload(for delivery: DeliveryRecord) throws -> JSONValue {
                let stamp = try #require(receipts.stamp(address: template, notificationID: id, delivery: delivery.id))
                message.receiptURL = stamp.address(template)
                return APNsRenderer.payload(for: message)
            }
            let first = try payload(for: deliveries[0])
            let address = try #require(first["rp"]?["r"]?.stringValue)
            let addressToken = String(address.split(separator: "/").last!)
            // Without a ttl, the address lasts the 28 days a notification may wait, and an hour more.
            #expect(
                receipts.check(token: addressToken, now: Date().addingTimeInterval(28 * 86_400 + 1800))
                    == .valid(notificationID: id, delivery: deliveries[0].id)
            )
            #expect(
                receipts.check(token: addressToken, now: Date().addingTimeInterval(28 * 86_400 + 7200))
                    == .expired(notificationID: id)
            )

            var config = RichNotificationProcessor.Configuration(fetch: FetchPolicy(allowInsecureHTTP: true))
            config.stagingBase = FileManager.default.temporaryDirectory
            // The device's 2 s default is for a phone. Here the server answering runs in this process, whose task pool
            // the rest of the suite keeps busy on two cores (a pool thread is what it waits for: see PipelineClock),
            // and a loaded run saw the repeated post go unanswered for 8 s: 20 s, within a 25 s deadline.
            config.receipts = ReceiptPolicy(timeout: 20, deviceID: "iphone-1")
            func process(_ payload: JSONValue, _ what: String) async -> EnrichedNotification {
                timeline.add("device: \(what) begins")
                let done = await RichNotificationProcessor(configuration: config).process(
                    payload: payload,
                    deadline: Date().addingTimeInterval(25)
                )
                timeline.add("device: \(what) ends: \(done.report.receipt)")
                return done
            }
            let shown = await process(first, "the first report")
            #expect(shown.attachments.count == 1)
            #expect(shown.report.receipt == .posted(status: 201), "\(timeline)")
            var outcome = try await APITests.call(client, .get, "/v1/apps/\(app)/notifications/\(id)", key: key).1
            #expect(outcome["receipts"] == ["count": 1, "with_media": 1, "deadline_hit": 0, "skipped_reasons": [:]])
            // The same delivery again is refused (its first report stands); the other delivery adds one.
            let again = await process(first, "the same delivery again")
            #expect(again.report.receipt == .failed("HTTP 409"), "\(timeline)")
            let second = try payload(for: deliveries[1])
            #expect(
                await process(second, "the other delivery").report.receipt == .posted(status: 201),
                "\(timeline)"
            )
            outcome = try await APITests.call(client, .get, "/v1/apps/\(app)/notifications/\(id)", key: key).1
            #expect(outcome["receipts"]?["count"] == 2)
            // With receipts off on the device nothing is posted.
            config.receipts.enabled = false
            #expect(
                await RichNotificationProcessor(configuration: config).process(
                    payload: first,
                    deadline: Date().addingTimeInterval(25)
                ).report.receipt == .notSent("receipts are off")
            )
            outcome = try await APITests.call(client, .get, "/v1/apps/\(app)/notifications/\(id)", key: key).1
            #expect(outcome["receipts"]?["count"] == 2)
            #expect(metrics.render().contains("richpush_device_receipts_total 2"))
        }
    }

    @Test func receiptsAreRefusedWithTheReason() async throws {
        let f = try APITests.fixture()
        let receipts = DeviceReceipts(
            secret: try await f.store.secret(named: "receipts"),
            base: "https://push.example.com",
            rate: 0.001,
            burst: 2
        )
        var api = f.api
        api.receipts = receipts
        try await Application(router: api.router()).test(.router) { client in
            let (app, key) = try await Self.token(client)
            let (_, accepted) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/notifications",
                key: key,
                body: [
                    "title": "T", "media": "https://cdn.example.com/a.jpg",
                    "audience": ["apns_tokens": [.string(String(repeating: "ab", count: 32))]],
                ]
            )
            let id = try #require(accepted["id"]?.stringValue)
            let delivery = try #require(try await f.queue.deliveries(notificationID: id).first?.id)
            let path =
                "/v1/receipts/" + receipts.token(for: id, delivery: delivery, until: Date().addingTimeInterval(3600))
            let good: JSONValue = [
                "device": "d1",
                "report": [
                    "attachments": [], "skipped": [["url": "https://cdn.example.com/a.jpg", "reason": "too-large"]],
                ],
            ]

            // No API key needed, and none taken instead of the signature.
            #expect(try await APITests.call(client, .post, path, key: nil, body: good).0 == 201)
            let forged = try await APITests.call(
                client,
                .post,
                "/v1/receipts/\(id).AAAAAAAAAAAAAAAAAAAAAA",
                key: key,
                body: good
            )
            #expect(forged.0 == 403 && forged.1["error"]?["code"] == "bad-receipt-token")
            let unknown = try await APITests.call(
                client,
                .post,
                // Signed, but that delivery is another notification's.
                "/v1/receipts/"
                    + receipts.token(
                        for: "no-such-notification",
                        delivery: delivery,
                        until: Date().addingTimeInterval(3600)
                    ),
                key: nil,
                body: good
            )
            #expect(unknown.0 == 404)
            let bad = try await APITests.call(
                client,
                .post,
                path,
                key: nil,
                body: ["device": "", "report": ["attachments": 3]]
            )
            #expect(bad.0 == 422)
            let paths = Set((bad.1["error"]?["issues"]?.arrayValue ?? []).compactMap { $0["path"]?.stringValue })
            #expect(paths == ["report.attachments", "report.skipped", "device"], "\(bad.1)")
            // The third receipt within a second (the refused one counts) is over the rate set here for one notification.
            let limited = try await APITests.call(client, .post, path, key: nil, body: good)
            #expect(limited.0 == 429)
            // The outcome shows the one receipt recorded.
            let outcome = try await APITests.call(client, .get, "/v1/apps/\(app)/notifications/\(id)", key: key).1
            #expect(
                outcome["receipts"] == [
                    "count": 1, "with_media": 0, "deadline_hit": 0, "skipped_reasons": ["too-large": 1],
                ]
            )
        }
        // A report over 16 KB is refused before it is read.
        let big = DeviceReceipts(secret: try await f.store.secret(named: "receipts"), base: "https://push.example.com")
        api.receipts = big
        try await Application(router: api.router()).test(.router) { client in
            let (app, key) = try await Self.token(client)
            let (_, accepted) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/notifications",
                key: key,
                body: [
                    "title": "T", "media": "https://cdn.example.com/a.jpg",
                    "audience": ["apns_tokens": [.string(String(repeating: "ab", count: 32))]],
                ]
            )
            let id = try #require(accepted["id"]?.stringValue)
            let padding = String(repeating: "x", count: 17_000)
            let status = try await APITests.call(
                client,
                .post,
                "/v1/receipts/" + big.token(for: id, delivery: 1, until: Date().addingTimeInterval(3600)),
                key: nil,
                body: ["report": ["attachments": [], "skipped": [], "pad": .string(padding)]]
            ).0
            #expect(status == 413)
        }
    }

    /// An open of a delivery the push service refused is answered 409 `delivery-not-accepted` on both open routes
    /// (the receipt address's and the app's keyed one) and counts nothing: the funnel says opened 0 of 0 accepted.
    @Test func opensOfAFailedDeliveryAreRefusedOnBothRoutes() async throws {
        let f = try APITests.fixture()
        let receipts = DeviceReceipts(
            secret: try await f.store.secret(named: "receipts"),
            base: "https://push.example.com"
        )
        var api = f.api
        api.receipts = receipts
        try await Application(router: api.router()).test(.router) { client in
            let (app, key) = try await Self.token(client)
            let tokens = [String(repeating: "ab", count: 32), String(repeating: "cd", count: 32)]
            let (_, accepted) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/notifications",
                key: key,
                body: ["title": "T", "audience": ["apns_tokens": .array(tokens.map { .string($0) })]]
            )
            let id = try #require(accepted["id"]?.stringValue)
            let claimed = try await f.queue.claim(owner: "w", limit: 2, now: Date(), lease: 60)
            try #require(claimed.count == 2)
            // Before the service answers, an open is not yet counted either (and may come again: Retry-After).
            let early = try await APITests.call(
                client,
                .post,
                "/v1/receipts/"
                    + receipts.token(for: id, delivery: claimed[0].id, until: Date().addingTimeInterval(3600))
                    + "/opens",
                key: nil,
                body: ["event": "opened"]
            )
            #expect(early.0 == 409 && early.1["error"]?["code"] == "delivery-not-accepted", "\(early.1)")
            for d in claimed {
                try await f.queue.finish(id: d.id, owner: "w", outcome: .failed("BadDeviceToken"), now: Date())
            }
            let byAddress = try await APITests.call(
                client,
                .post,
                "/v1/receipts/"
                    + receipts.token(for: id, delivery: claimed[0].id, until: Date().addingTimeInterval(3600))
                    + "/opens",
                key: nil,
                body: ["event": "opened"]
            )
            #expect(byAddress.0 == 409 && byAddress.1["error"]?["code"] == "delivery-not-accepted", "\(byAddress.1)")
            #expect(byAddress.1["error"]?["message"]?.stringValue?.contains("failed") == true)
            let byApp = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/notifications/\(id)/opens",
                key: key,
                body: ["event": "opened", "token": .string(claimed[1].target.stored)]
            )
            #expect(byApp.0 == 409 && byApp.1["error"]?["code"] == "delivery-not-accepted", "\(byApp.1)")
            let funnel = try await APITests.call(client, .get, "/v1/apps/\(app)/notifications/\(id)/funnel", key: key).1
            let counts = Dictionary(
                uniqueKeysWithValues: (funnel["stages"]?.arrayValue ?? []).compactMap { s in
                    s["stage"]?.stringValue.map { ($0, s["count"]?.intValue ?? -1) }
                }
            )
            #expect(counts["provider_accepted"] == 0 && counts["opened"] == 0, "\(counts)")
        }
    }

    @Test func onlyRichNotificationsWithRoomGetAnAddress() async throws {
        let f = try APITests.fixture()
        var api = f.api
        api.receipts = DeviceReceipts(
            secret: try await f.store.secret(named: "receipts"),
            base: "https://push.example.com"
        )
        try await Application(router: api.router()).test(.router) { client in
            let (app, key) = try await Self.token(client)
            let audience: JSONValue = ["apns_tokens": [.string(String(repeating: "ab", count: 32))]]
            func send(_ body: JSONValue) async throws -> (PushMessage, JSONValue) {
                let (status, accepted) = try await APITests.call(
                    client,
                    .post,
                    "/v1/apps/\(app)/notifications",
                    key: key,
                    body: body
                )
                #expect(status == 202, "\(accepted)")
                let id = try #require(accepted["id"]?.stringValue)
                let stored = try await f.store.message(id: id)
                return (try #require(stored), accepted["warnings"] ?? .null)
            }
            #expect(
                try await send(["title": "T", "media": "https://cdn.example.com/a.jpg", "audience": audience]).0
                    .receiptURL != nil
            )
            // Nothing for the extension to do: nothing to report.
            #expect(try await send(["title": "Plain", "audience": audience]).0.receiptURL == nil)
            // Turned off for one send.
            #expect(
                try await send([
                    "title": "T", "media": "https://cdn.example.com/a.jpg", "receipts": false, "audience": audience,
                ]).0.receiptURL == nil
            )
            #expect(
                try await APITests.call(
                    client,
                    .post,
                    "/v1/apps/\(app)/notifications",
                    key: key,
                    body: ["title": "T", "receipts": "yes", "audience": audience]
                ).0 == 422
            )
            // A payload just under APNs' 4 KB has no room for the address: sent without, with a warning.
            var base = PushMessage(
                alert: .init(title: "T"),
                media: [PushMedia(url: "https://cdn.example.com/a.jpg")],
                data: ["x": ""]
            )
            base.id = UUID().uuidString.lowercased()
            let room = 4096 - APNsRenderer.payload(for: base).serializedSize - 30
            let (full, warnings) = try await send([
                "title": "T", "media": "https://cdn.example.com/a.jpg",
                "data": ["x": .string(String(repeating: "y", count: room))], "audience": audience,
            ])
            #expect(full.receiptURL == nil)
            #expect(
                (warnings.arrayValue ?? []).contains { $0["path"] == "receipt_url" && $0["rule"] == "no-room" },
                "\(warnings)"
            )
        }
    }

    /// Sizes are checked on the message as sent and for the providers its audience uses: a message whose FCM
    /// request is over 4 KB is refused for a registry tag (Android devices may be in it), accepted for APNs tokens.
    @Test func sizesAreCheckedForTheProvidersTheAudienceUses() async throws {
        let f = try APITests.fixture()
        func message(_ n: Int) -> PushMessage {
            PushMessage(
                alert: .init(title: "T"),
                media: [PushMedia(url: "https://cdn.example.com/a.jpg")],
                data: ["x": .string(String(repeating: "y", count: n))]
            )
        }
        let n = try #require(
            stride(from: 0, to: 4000, by: 25).first { n in
                MessageValidator.sizeIssues(message(n), apns: true, fcm: nil).isEmpty
                    && !MessageValidator.sizeIssues(message(n), apns: false, fcm: .token("t")).isEmpty
            }
        )
        try await Application(router: f.api.router()).test(.router) { client in
            let (app, key) = try await Self.token(client)
            let body: [String: JSONValue] = [
                "title": "T", "media": "https://cdn.example.com/a.jpg",
                "data": ["x": .string(String(repeating: "y", count: n))],
            ]
            var toTag = body
            toTag["audience"] = ["tag": "vip"]
            let (status, refused) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/notifications",
                key: key,
                body: .object(toTag)
            )
            #expect(status == 422)
            let issue = refused["error"]?["issues"]?.arrayValue?.first
            #expect(issue?["rule"] == "payload-too-large", "\(refused)")
            let said = issue?["message"]?.stringValue ?? ""
            #expect(said.contains("FCM"), "\(said)")
            var toAPNs = body
            toAPNs["audience"] = ["apns_tokens": [.string(String(repeating: "ab", count: 32))]]
            #expect(
                try await APITests.call(client, .post, "/v1/apps/\(app)/notifications", key: key, body: .object(toAPNs))
                    .0 == 202
            )
        }
    }
}

/// Timestamped lines from both sides of a test, in order.
final class Timeline: @unchecked Sendable, CustomStringConvertible {  // `lines` behind `lock`
    private let lock = NSLock()
    private let start = Date()
    private var lines: [String] = []

    func add(_ line: String) {
        let at = Date().timeIntervalSince(start)
        lock.withLock { lines.append(String(format: "+%.3f s ", at) + line) }
    }

    var description: String { lock.withLock { "\n" + lines.joined(separator: "\n") } }
}

/// A responder that writes when each request reached it and when it was answered.
struct TimedResponder<Inner: HTTPResponder>: HTTPResponder {
    typealias Context = Inner.Context
    let inner: Inner
    let timeline: Timeline

    func respond(to request: Request, context: Context) async throws -> Response {
        let what = "\(request.method) \(request.uri.path)"
        timeline.add("server: \(what) reached the router")
        do {
            let response = try await inner.respond(to: request, context: context)
            timeline.add("server: \(what) answered \(response.status.code)")
            return response
        } catch {
            timeline.add("server: \(what) threw \(error)")
            throw error
        }
    }
}
