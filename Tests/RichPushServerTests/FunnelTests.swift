import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import RichPushApp
import RichPushCore
import RichPushSandbox
import RichPushServer
import RichPushTestSupport
import Testing

@testable import RichPushMedia

#if canImport(UserNotifications)
import UserNotifications
#else
import UserNotificationsStandIn
#endif

/// The whole funnel through the sandbox over real sockets: a rich send to 1,000 devices delivered by the worker to
/// the APNs emulator, 900 extension reports posted by the device library to the address each payload carried,
/// 300 opens reported by the app library (RichPushApp), and the funnel route telling exactly those numbers, as
/// JSON and as CSV. Forged, repeated and misdirected reports count nothing.
@Suite struct FunnelTests {
    static let admin = "admin-secret-key-0001"

    @Test func aSendsFunnelCountsWhatDevicesAndPeopleDid() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("funnel-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let sandbox = try await Sandbox.start(directory: dir.appendingPathComponent("sbx"), threads: 1)
        let backend = try SQLiteBackend(path: dir.appendingPathComponent("rp.sqlite").path)
        let providers = try Providers.sandbox(sandbox)
        var api = RichPushAPI(
            backend: backend,
            adminKey: Self.admin,
            validation: .init(requireTargets: false),
            providers: providers
        )
        let receipts = DeviceReceipts(secret: try await backend.store.secret(named: "receipts"))
        api.receipts = receipts
        // A thousand devices register in a moment here, all from one address; neither the key's rate nor the
        // public key's per client is what is tested (the app library waits out a 429 and sends again).
        api.limiter = RateLimiter(rate: 1_000_000, burst: 1_000_000)
        api.publicClientLimiter = RateLimiter(rate: 1_000_000, burst: 1_000_000)
        let store = backend.sqliteStore
        let sender = ProviderDeliverySender(
            providers: providers,
            receipts: receipts,
            app: { id in (try? await store.app(id: id)).flatMap { $0 } },
            message: { id in try? await store.message(id: id) }
        )
        let minutes = api.minutes
        let worker = DeliveryWorker(queue: backend.sqliteQueue, sender: sender, minutes: minutes)
        do {
            try await Application(router: api.router()).test(.live) { client in
                let base = "http://127.0.0.1:\(try #require(client.port))"
                receipts.base = base
                func call(
                    _ method: HTTPRequest.Method,
                    _ uri: String,
                    key: String = Self.admin,
                    _ body: JSONValue? = nil
                )
                    async throws -> (Int, JSONValue, String)
                {
                    try await client.execute(
                        uri: uri,
                        method: method,
                        headers: [.authorization: "Bearer \(key)"],
                        body: body.map { ByteBuffer(bytes: $0.serialized()) }
                    ) { r in
                        let text = String(buffer: r.body)
                        return (Int(r.status.code), (try? JSONValue.parse(Array(text.utf8))) ?? .null, text)
                    }
                }
                let (_, created, _) = try await call(
                    .post,
                    "/v1/apps",
                    ["name": "News", "bundle_id": "com.example.app"]
                )
                let app = try #require(created["app"]?["id"]?.stringValue)
                let (_, keyAnswer, _) = try await call(.post, "/v1/apps/\(app)/keys", ["scopes": ["register"]])
                let registerKey = try #require(keyAnswer["api_key"]?.stringValue)

                let tokens = (0..<1000).map { String(format: "%064x", 0xF000 + $0) }
                for t in tokens {
                    let (s, a, _) = try await call(
                        .post,
                        "/v1/apps/\(app)/devices",
                        ["token": .string(t), "platform": "ios"]
                    )
                    try #require(s == 200 || s == 201, "\(s) \(a)")
                }
                let (status, sent, _) = try await call(
                    .post,
                    "/v1/apps/\(app)/notifications",
                    [
                        "alert": ["title": "Turnout", "body": "By hour"],
                        "chart": ["type": "bar", "values": [3, 5, 4]],
                        "deep_link": "news://turnout", "audience": ["all": true],
                    ]
                )
                #expect(status == 202)
                let id = try #require(sent["id"]?.stringValue)
                // The fan-out runs after the answer; then the worker delivers to the emulator.
                for _ in 0..<600 {
                    if try await backend.queue.counts(notificationID: id).values.reduce(0, +) == 1000 { break }
                    try await Task.sleep(nanoseconds: 10_000_000)
                }
                while try await worker.runOnce() > 0 {}
                #expect(try await backend.queue.counts(notificationID: id) == [.delivered: 1000])

                // Each device's payload, as the emulator received it.
                var payloads: [String: JSONValue] = [:]
                for r in sandbox.apns.recorded() { payloads[r.deviceToken] = r.payloadJSON }
                #expect(payloads.count == 1000)

                // 900 extensions report, with the chart attached, through the device library's poster.
                let attachment = StagedAttachment(
                    identifier: "chart",
                    file: URL(fileURLWithPath: "/tmp/chart.png"),
                    type: .png,
                    bytes: 20_000,
                    sourceURL: "chart:",
                    typeSource: "rendered",
                    thumbnail: nil,
                    stagedAfterMilliseconds: 40
                )
                let report = DeliveryReport(
                    notificationID: id,
                    sources: [],
                    attached: [attachment],
                    skipped: [],
                    payloadProblems: [],
                    elapsedMilliseconds: 120,
                    deadlineHit: false
                )
                var posted = 0
                for t in tokens.prefix(900) {
                    let address = try #require(payloads[t]?["rp"]?["r"]?.stringValue)
                    let outcome = await ReceiptPoster.post(
                        report,
                        to: address,
                        policy: ReceiptPolicy(),
                        allowInsecureHTTP: true,
                        timeout: 10
                    )
                    if outcome == .posted(status: 201) { posted += 1 }
                }
                #expect(posted == 900)
                // A repeat counts once; a forged address counts nothing.
                let again = await ReceiptPoster.post(
                    report,
                    to: try #require(payloads[tokens[0]]?["rp"]?["r"]?.stringValue),
                    policy: ReceiptPolicy(),
                    allowInsecureHTTP: true,
                    timeout: 10
                )
                #expect(again == .failed("HTTP 409"))
                let forged = await ReceiptPoster.post(
                    report,
                    to: "\(base)/v1/receipts/\(id).zzzzzzz.0000000000001.AAAAAAAAAAAAAAAAAAAAAA",
                    policy: ReceiptPolicy(),
                    allowInsecureHTTP: true,
                    timeout: 10
                )
                #expect(forged != .posted(status: 201))

                // 300 people open it, through the app library: 250 the notification itself, 50 a button; 20 more
                // dismiss it. Each app reports twice (a retry after a lost answer): counted once. Each app asked
                // permission first: one in ten was refused, and says so.
                for (i, t) in tokens.suffix(320).enumerated() {
                    let center = UNUserNotificationCenter()
                    center.standInAnswer = i % 10 != 0
                    let push = RichPushApp(
                        configuration: .init(
                            server: URL(string: base)!,
                            appID: app,
                            key: registerKey,
                            directory: dir.appendingPathComponent("app-\(i)"),
                            allowInsecureHTTP: true
                        ),
                        center: center
                    )
                    await push.register(token: t)
                    _ = await push.requestPermission()
                    let payload = try #require(payloads[t])
                    let userInfo = try #require(
                        JSONSerialization.jsonObject(with: Data(payload.serialized())) as? [String: Any]
                    )
                    let content = UNMutableNotificationContent()
                    content.userInfo = userInfo
                    let request = UNNotificationRequest(identifier: "n", content: content, trigger: nil)
                    let action =
                        i < 250
                        ? UNNotificationDefaultActionIdentifier
                        : i < 300 ? "read-later" : UNNotificationDismissActionIdentifier
                    let response = UNNotificationResponse(
                        notification: UNNotification(request: request, date: Date()),
                        actionIdentifier: action
                    )
                    let opened = await push.handle(response)
                    #expect(opened?.notificationID == id && opened?.deepLink == URL(string: "news://turnout"))
                    await push.handle(response)
                    let flushed = await push.flush()
                    #expect(flushed.sent == 3 && flushed.waiting == 0, "\(flushed)")
                }

                let (fs, funnel, _) = try await call(.get, "/v1/apps/\(app)/notifications/\(id)/funnel")
                #expect(fs == 200)
                let counts = Dictionary(
                    uniqueKeysWithValues: (funnel["stages"]?.arrayValue ?? []).compactMap { s in
                        s["stage"]?.stringValue.map { ($0, s["count"]?.intValue ?? -1) }
                    }
                )
                #expect(
                    counts == [
                        "accepted": 1000, "sent": 1000, "provider_accepted": 1000, "received": 900,
                        "media_shown": 900, "opened": 300,
                    ]
                )
                #expect(funnel["dismissed"] == 20)
                #expect(funnel["actions"] == ["default": 250, "read-later": 50])
                // Every open led to the notification's deep link, as the apps reported.
                #expect(funnel["links"] == ["news://turnout": 300])
                let stages = funnel["stages"]?.arrayValue ?? []
                #expect(stages.last?["rate"] == .double(0.3333) && stages.last?["of_accepted"] == .double(0.3))
                #expect(stages[3]["drops"] == ["no report from the device": 100])

                let (cs, _, csv) = try await call(.get, "/v1/apps/\(app)/notifications/\(id)/funnel?format=csv")
                #expect(cs == 200)
                let lines = csv.split(separator: "\r\n").map(String.init)
                #expect(lines.first == "stage,count,rate,of_accepted,reason,dropped")
                #expect(lines.contains("opened,300,0.3333,0.3000,,"))
                #expect(lines.contains("received,900,0.9000,0.9000,no report from the device,100"))

                // The app's time series: its last two hours hold the same numbers, summed (a run that crosses the
                // hour splits them: a fresh clone's sent at 13:59 and its devices reported at 14:00).
                try await minutes.flush()
                let (hs, hours, _) = try await call(.get, "/v1/apps/\(app)/insights?hours=2")
                #expect(hs == 200)
                let rows = try #require(hours["hours"]?.arrayValue)
                let sums = ["accepted", "delivered", "failed", "received", "opened"].map { kind in
                    rows.reduce(Int64(0)) { $0 + ($1[kind]?.intValue ?? 0) }
                }
                #expect(sums == [1000, 1000, 0, 900, 300], "\(rows)")
                let (_, _, hoursCSV) = try await call(.get, "/v1/apps/\(app)/insights?hours=2&format=csv")
                let csvRows = hoursCSV.split(separator: "\r\n").map { $0.split(separator: ",").map(String.init) }
                #expect(csvRows.first == ["hour", "accepted", "delivered", "failed", "received", "opened"])
                let csvSums = (1...5).map { column in
                    csvRows.dropFirst().reduce(Int64(0)) { $0 + (Int64($1[column]) ?? 0) }
                }
                #expect(csvSums == [1000, 1000, 0, 900, 300], "\(hoursCSV)")
                let (bad, _, _) = try await call(.get, "/v1/apps/\(app)/insights?hours=721")
                #expect(bad == 422)
                // The devices by where their permission stands: the 320 apps said, the others never did.
                #expect(hours["devices_by_permission"] == ["authorized": 288, "denied": 32, "unknown": 680])

                // A link that is not an absolute URL, or one with a dismissal, is refused naming the field.
                for (body, rule) in [
                    (["event": "opened", "token": .string(tokens[0]), "link": "/relative/path"], "format"),
                    (["event": "opened", "token": .string(tokens[0]), "link": "news://a b"], "format"),
                    (["event": "dismissed", "token": .string(tokens[0]), "link": "news://x"], "dismissed-link"),
                ] as [(JSONValue, String)] {
                    let (s, refusal, _) = try await call(
                        .post,
                        "/v1/apps/\(app)/notifications/\(id)/opens",
                        key: registerKey,
                        body
                    )
                    let issue = refusal["error"]?["issues"]?.arrayValue?.first
                    #expect(s == 422 && issue?["path"] == "link" && issue?["rule"] == .string(rule), "\(refusal)")
                }
                // The longest open the schema allows, every character written as JSON's longest escape (a
                // surrogate pair, 12 bytes), is read past the size check (the token is no device's: 404); a
                // body larger than any valid one is refused unread (413).
                let emoji = String(repeating: "\\ud83d\\ude00", count: 1022)
                let longest =
                    #"{"event":"opened","action":""# + String(repeating: "\\ud83d\\ude00", count: 64) + #"","link":"a:"#
                    + emoji + #"","token":""# + tokens[0] + String(repeating: "\\ud83d\\ude00", count: 4096 - 64)
                    + #""}"#
                for (body, status) in [(longest, 404), (longest + String(repeating: " ", count: 70_000), 413)] {
                    let answer = try await client.execute(
                        uri: "/v1/apps/\(app)/notifications/\(id)/opens",
                        method: .post,
                        headers: [.authorization: "Bearer \(registerKey)"],
                        body: ByteBuffer(string: body)
                    ) { Int($0.status.code) }
                    #expect(answer == status, "\(body.utf8.count) bytes")
                }
            }
        } catch {
            await providers.shutdown()
            await sandbox.stop()
            throw error
        }
        await providers.shutdown()
        await sandbox.stop()
    }
}
