import Foundation
import RichPushApp
import RichPushCore
import RichPushTestSupport
import Testing

@testable import RichPushMedia

#if canImport(UserNotifications)
import UserNotifications
#else
import UserNotificationsStandIn
#endif

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The console in real headless Chromium (Debian's chromium and chromium-driver, driven by Selenium from the
/// project's Python environment) against a real `richpush serve` in sandbox mode: `Tests/Browser/console_test.py`
/// signs in, composes with an uploaded picture and a chart, sees a validation error come and go and a refused
/// URL's verdict, test-sends and reads the simulated iPhone's attachments, sends to a tag and watches it reach
/// delivered; it checks the chart preview's bytes against `richpush chart` and the "What is sent" tab against
/// `richpush payload`, and writes screenshots to `.build/console-screenshots/`.
@Suite struct ConsoleBrowserTests {
    /// Runs a script of `Tests/Browser/` with the project's Python, the arguments given and the screenshot folder
    /// (`.build/console-screenshots/`) last; its status and everything it printed.
    static func runBrowserScript(_ name: String, _ arguments: [String]) async throws -> (Int32, String) {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let run = try await ChildProcess.run(
            URL(fileURLWithPath: "/usr/bin/env"),
            ["python3", root.appendingPathComponent("Tests/Browser/\(name)").path] + arguments
                + [root.appendingPathComponent(".build/console-screenshots").path],
            mergeErrors: true
        )
        return (run.status, run.output)
    }

    @Test func theConsoleComposesPreviewsTestsAndSends() async throws {
        let (dir, sandbox, db) = try ServeTests.scratch("console-browser")
        defer { try? FileManager.default.removeItem(at: dir) }
        let server = try await ServeTests.Server(db: db, sandboxDir: sandbox)
        defer { server.process.terminate() }
        let (status, text) = try await Self.runBrowserScript(
            "console_test.py",
            [server.base, "test-admin-key-0001", CLITests.binary.path]
        )
        #expect(status == 0, "\(text.suffix(3000))")
        #expect(text.contains("console browser test: every step passed"), "\(text.suffix(3000))")
    }

    /// The Webhooks view: `webhooks_test.py` adds an endpoint at the sandbox's webhook receiver (named in the
    /// sandbox's `sandbox.json`), sees its secret once, tests it, disables and enables it, sees it failing with its
    /// last error while the receiver fails every request, replays, rotates its secret and deletes it.
    @Test func theConsoleManagesWebhooks() async throws {
        let (dir, sandbox, db) = try ServeTests.scratch("console-webhooks")
        defer { try? FileManager.default.removeItem(at: dir) }
        let server = try await ServeTests.Server(db: db, sandboxDir: sandbox)
        defer { server.process.terminate() }
        let (status, text) = try await Self.runBrowserScript(
            "webhooks_test.py",
            [server.base, "test-admin-key-0001", sandbox]
        )
        #expect(status == 0, "\(text.suffix(3000))")
        #expect(text.contains("webhooks browser test: every step passed"), "\(text.suffix(3000))")
    }

    /// The funnel in the console, live: a send to 1,000 devices through the sandbox; while `funnel_test.py` watches
    /// the notification in Chromium, 900 extension reports (the device library's poster, to each payload's address)
    /// and 300 opens and 20 dismissals (the app library, RichPushApp) arrive. The chart must reach exactly those
    /// numbers without a reload, and agree with the funnel route.
    @Test func theConsoleDrawsTheFunnelLive() async throws {
        let (dir, sandbox, db) = try ServeTests.scratch("console-funnel")
        defer { try? FileManager.default.removeItem(at: dir) }
        let admin = "test-admin-key-0001"
        let server = try await ServeTests.Server(
            db: db,
            sandboxDir: sandbox,
            extra: ["--rate-limit", "1000000", "--public-rate-per-client", "1000000"]
        )
        defer { server.process.terminate() }
        let (_, created) = try await server.call(
            "POST",
            "/v1/apps",
            key: admin,
            body: ["name": "News", "bundle_id": "com.example.news"]
        )
        let app = try #require(created["app"]?["id"]?.stringValue)
        let (_, keyAnswer) = try await server.call(
            "POST",
            "/v1/apps/\(app)/keys",
            key: admin,
            body: ["scopes": ["register"]]
        )
        let registerKey = try #require(keyAnswer["api_key"]?.stringValue)
        let tokens = (0..<1000).map { String(format: "%064x", 0xA000 + $0) }
        for t in tokens {
            let (s, _) = try await server.call(
                "POST",
                "/v1/apps/\(app)/devices",
                key: admin,
                body: ["token": .string(t), "platform": "ios"]
            )
            try #require(s == 200)
        }
        let (status, sent) = try await server.call(
            "POST",
            "/v1/apps/\(app)/notifications",
            key: admin,
            body: [
                "alert": ["title": "Turnout", "body": "By hour"], "chart": ["type": "bar", "values": [3, 5, 4]],
                "deep_link": "news://turnout", "audience": ["all": true],
            ]
        )
        try #require(status == 202)
        let id = try #require(sent["id"]?.stringValue)
        for _ in 0..<600 {
            let (_, n) = try await server.call("GET", "/v1/apps/\(app)/notifications/\(id)?limit=1", key: admin)
            if n["counts"]?["delivered"] == 1000 { break }
            try await Task.sleep(nanoseconds: 100_000_000)
        }
        // Each device's payload as the APNs emulator received it: its receipt address.
        var addresses: [String: String] = [:]
        var payloads: [String: JSONValue] = [:]
        let (_, recorded) = try await Self.get(server.sandboxAdmin + "/apns/notifications?limit=1000")
        for r in recorded["notifications"]?.arrayValue ?? [] {
            guard let token = r["device_token"]?.stringValue ?? r["token"]?.stringValue else { continue }
            payloads[token] = r["payload"]
            addresses[token] = r["payload"]?["rp"]?["r"]?.stringValue
        }
        try #require(addresses.count == 1000, "\(recorded["notifications"]?.arrayValue?.first ?? .null)")

        let expected: JSONValue = [
            "accepted": 1000, "sent": 1000, "provider_accepted": 1000, "received": 900, "media_shown": 900,
            "opened": 300,
        ]
        // Beside the funnel, what the app's view shows: the hour's counts, the devices by permission as the 320
        // apps reported it (one in ten refused), and the deep link the opens followed.
        var forBrowser = expected
        if case .object(var o) = forBrowser {
            o["app"] = [
                "permissions": ["allowed": 288, "turned off": 32, "not reported": 680],
                "link": "news://turnout 300",
            ]
            forBrowser = .object(o)
        }
        let arguments = [server.base, admin, app, id, forBrowser.jsonString]
        let browser = Task.detached { try await Self.runBrowserScript("funnel_test.py", arguments) }
        // The view is open once the server reads the notification's numbers for it.
        for _ in 0..<600 {
            let (_, text) = try await Self.getText(server.base + "/metrics")
            if text.contains("richpush_insight_turns_total ") && !text.contains("richpush_insight_turns_total 0") {
                break
            }
            try await Task.sleep(nanoseconds: 100_000_000)
        }
        try await Task.sleep(nanoseconds: 1_000_000_000)
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
        for (i, t) in tokens.prefix(900).enumerated() {
            let address = try #require(addresses[t])
            let outcome = await ReceiptPoster.post(
                report,
                to: address,
                policy: ReceiptPolicy(),
                allowInsecureHTTP: true,
                timeout: 10
            )
            #expect(outcome == .posted(status: 201))
            // In waves, so that the chart is seen moving.
            if i % 300 == 299 { try await Task.sleep(nanoseconds: 1_500_000_000) }
        }
        for (i, t) in tokens.suffix(320).enumerated() {
            let center = UNUserNotificationCenter()
            center.standInAnswer = i % 10 != 0
            let push = RichPushApp(
                configuration: .init(
                    server: URL(string: server.base)!,
                    appID: app,
                    key: registerKey,
                    directory: dir.appendingPathComponent("app-\(i)"),
                    allowInsecureHTTP: true
                ),
                center: center
            )
            let payload = try #require(payloads[t])
            let userInfo = try #require(
                JSONSerialization.jsonObject(with: Data(payload.serialized())) as? [String: Any]
            )
            let content = UNMutableNotificationContent()
            content.userInfo = userInfo
            let response = UNNotificationResponse(
                notification: UNNotification(
                    request: UNNotificationRequest(identifier: "n", content: content, trigger: nil),
                    date: Date()
                ),
                actionIdentifier: i < 300
                    ? UNNotificationDefaultActionIdentifier : UNNotificationDismissActionIdentifier
            )
            await push.register(token: t)
            _ = await push.requestPermission()
            await push.handle(response)
            #expect(await push.flush().sent == 2)
        }
        let (code, text) = try await browser.value
        #expect(code == 0, "\(text.suffix(3000))")
        #expect(text.contains("funnel browser test: every step passed"), "\(text.suffix(3000))")
        let (_, funnel) = try await server.call("GET", "/v1/apps/\(app)/notifications/\(id)/funnel", key: admin)
        var counts: [String: JSONValue] = [:]
        for s in funnel["stages"]?.arrayValue ?? [] { counts[s["stage"]?.stringValue ?? ""] = s["count"] }
        #expect(JSONValue.object(counts) == expected)
    }

    static func get(_ url: String) async throws -> (Int, JSONValue) {
        let (status, text) = try await getText(url)
        return (status, (try? JSONValue.parse(Array(text.utf8))) ?? .null)
    }

    static func getText(_ url: String) async throws -> (Int, String) {
        let (data, response) = try await URLSession.shared.data(from: URL(string: url)!)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: data, as: UTF8.self))
    }
}
