import Foundation
import RichPushCore
import Testing

@testable import RichPushServer

/// Every place a number received from outside is converted (to an integer, a date, a header): the extremes a
/// request can carry are refused or held, never trapped on. The same values travel over a real socket in
/// `HostileRequestTests`; these are the sites one by one.
@Suite struct ConversionSiteTests {
    static let extremes: [Double] = [
        1e19, -1e19, 1e308, -1e308, .infinity, -.infinity, .nan, 9.3e18, -9.3e18, 1e-320, 0,
    ]

    @Test func sendTimeRefusesWhatIsOutsideItsWindow() throws {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        for x in Self.extremes where x != 0 && x != 1e-320 {
            if case .success(let t) = SendTime.read(.double(x), now: now) { Issue.record("send_at \(x) read as \(t)") }
        }
        for i in [Int64.max, Int64.min] {
            if case .success = SendTime.read(.int(i), now: now) { Issue.record("send_at \(i) accepted") }
        }
        // A time a little in the past is now; one ahead is itself.
        #expect(try SendTime.read(.double(now.timeIntervalSince1970 - 60), now: now).get() == now)
        #expect(try SendTime.read(.int(1_800_000_100), now: now).get() == now.addingTimeInterval(100))
    }

    @Test func mediaRetentionHoldsAnyDate() throws {
        let store = try MediaStore(
            directory: FileManager.default.temporaryDirectory.appendingPathComponent("keep-\(UUID().uuidString)")
        )
        let item = try store.put(Array(repeating: 1, count: 10) + [0x89], type: .png)
        for x in Self.extremes {
            _ = store.keep(item.name, until: Date(timeIntervalSince1970: x))
        }
        #expect(store.keep(item.name, until: .distantFuture))
        #expect(store.keep(item.name, until: .distantPast))
    }

    @Test func retryAfterAndBadgeAreHeld() {
        for x in Self.extremes {
            let r = RateLimiter.retryAfter(x)
            #expect((1...86_400).contains(r), "\(x) → \(r)")
        }
        var m = PushMessage()
        m.alert.body = "x"
        for (badge, ok) in [
            (Int.max, false), (Int(Int32.max) + 1, false), (Int(Int32.max), true), (-1, false), (0, true),
        ] {
            m.badge = badge
            #expect(MessageValidator().validate(m).errors.contains { $0.path == "badge" } == !ok, "badge \(badge)")
        }
    }

    @Test func providerExpiriesHoldExtremeExpirations() throws {
        var m = PushMessage()
        m.alert.body = "x"
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        for e in [Int64.max, Int64.min, 0, -1, 1_800_000_000] {
            m.expiration = e
            let apns = APNsRenderer(bundleID: "com.example.app", now: { now }).render(
                m,
                deviceToken: String(repeating: "ab", count: 32)
            )
            #expect(apns.headers.first { $0.0 == "apns-expiration" }?.1 == String(e))
            let fcm = FCMRenderer(projectID: "p", now: { now }).render(m, to: .token("t")).body
            let ttl = fcm["message"]?["android"]?["ttl"]?.stringValue ?? ""
            #expect(
                ttl.hasSuffix("s") && Int64(ttl.dropLast()).map { $0 >= 0 } == true,
                "expiration \(e) → android.ttl \(ttl)"
            )
        }
    }
}
