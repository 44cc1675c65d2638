import Foundation
import RichPushCore
import Testing

/// The web SDK in real headless Chromium against a real `richpush serve` in sandbox mode:
/// `Tests/Browser/webpush_test.py` registers the service worker and a subscription from a page (with a key that may
/// only register), sends a notification with an image, delivers what the sandbox's push service decrypted to the
/// worker through DevTools (`ServiceWorker.deliverPushMessage`, no push service being reachable here), and checks
/// what the worker showed and the report it posted.
@Suite struct WebPushBrowserTests {
    @Test func theServiceWorkerShowsAnImageNotificationAndReportsIt() async throws {
        let (dir, sandbox, db) = try ServeTests.scratch("webpush-browser")
        defer { try? FileManager.default.removeItem(at: dir) }
        let server = try await ServeTests.Server(db: db, sandboxDir: sandbox)
        defer { server.process.terminate() }
        let summary = try JSONValue.parse(
            try Data(contentsOf: URL(fileURLWithPath: sandbox).appendingPathComponent("sandbox.json"))
        )
        let admin = try #require(summary["admin"]?.stringValue)
        let (status, text) = try await ConsoleBrowserTests.runBrowserScript(
            "webpush_test.py",
            [server.base, "test-admin-key-0001", admin]
        )
        #expect(status == 0, "\(text.suffix(3000))")
        #expect(text.contains("web push browser test: every step passed"), "\(text.suffix(3000))")
    }
}
