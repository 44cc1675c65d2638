import Foundation
import NIOConcurrencyHelpers
import RichPushApp
import Testing

#if canImport(UserNotifications)
import UserNotifications
#else
import UserNotificationsStandIn
#endif

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The app library's own behaviour, with a transport that plays the network: reports wait while offline and survive
/// a restart, a registration waiting is replaced by the newer one, the server's Retry-After is kept, a refusal is
/// dropped, and an open goes to the delivery's receipt address (no key) or, without one, to the keyed route.
@Suite struct RichPushAppTests {
    final class Network: Sendable {
        struct Sent: Sendable {
            var method: String
            var url: String
            var body: [String: String]
            var authorization: String?
            var identity: String?
        }
        let answers = NIOLockedValueBox<[(Int, String?)]>([])
        let offline = NIOLockedValueBox(false)
        let sent = NIOLockedValueBox<[Sent]>([])

        var transport: RichPushApp.Transport {
            { request in
                if self.offline.withLockedValue({ $0 }) { throw URLError(.notConnectedToInternet) }
                let json =
                    (try? JSONSerialization.jsonObject(with: request.httpBody ?? Data())) as? [String: Any] ?? [:]
                self.sent.withLockedValue {
                    $0.append(
                        Sent(
                            method: request.httpMethod ?? "",
                            url: request.url?.absoluteString ?? "",
                            body: json.mapValues { "\($0)" },
                            authorization: request.value(forHTTPHeaderField: "Authorization"),
                            identity: request.value(forHTTPHeaderField: "RichPush-Identity")
                        )
                    )
                }
                return self.answers.withLockedValue { $0.isEmpty ? (201, nil) : $0.removeFirst() }
            }
        }
    }

    final class Clock: Sendable {
        let t = NIOLockedValueBox(Date(timeIntervalSince1970: 1_900_000_000))
        func advance(_ s: TimeInterval) { t.withLockedValue { $0 += s } }
        var now: @Sendable () -> Date { { self.t.withLockedValue { $0 } } }
    }

    func make(
        _ dir: URL,
        _ net: Network,
        _ clock: Clock,
        center: UNUserNotificationCenter = .current(),
        identity: RichPushApp.IdentityProvider? = { "proof-for-\($0)" }
    ) -> RichPushApp {
        RichPushApp(
            configuration: .init(
                server: URL(string: "https://push.example.com")!,
                appID: "app_1",
                key: "rp_register",
                directory: dir,
                identity: identity
            ),
            center: center,
            transport: net.transport,
            now: clock.now
        )
    }

    func response(_ userInfo: [AnyHashable: Any], _ action: String) -> UNNotificationResponse {
        let content = UNMutableNotificationContent()
        content.userInfo = userInfo
        return UNNotificationResponse(
            notification: UNNotification(
                request: UNNotificationRequest(identifier: "x", content: content, trigger: nil),
                date: Date()
            ),
            actionIdentifier: action
        )
    }

    @Test func reportsWaitOfflineSurviveARestartAndGoOnce() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rpapp-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let (net, clock) = (Network(), Clock())
        net.offline.withLockedValue { $0 = true }
        var push = make(dir, net, clock)
        await push.register(deviceToken: Data([0xAB, 0xCD]))
        await push.setUser("u1")
        await push.setTags(["news", "sport", "news"])
        // Three changes, one registration waiting: the newest.
        #expect(await push.pending == 1)
        let opened = await push.handle(
            response(
                [
                    "rp": [
                        "id": "n1", "r": "https://push.example.com/v1/receipts/n1.abc.0000000000001.sig",
                        "l": "app://a",
                    ]
                ],
                "read-later"
            )
        )
        #expect(
            opened
                == .init(notificationID: "n1", action: "read-later", deepLink: URL(string: "app://a"), dismissed: false)
        )
        var result = await push.flush()
        #expect(result.sent == 0 && result.waiting == 2)

        // The app is closed and opened again, still offline: the reports are still there, not due yet.
        push = make(dir, net, clock)
        #expect(await push.pending == 2)
        net.offline.withLockedValue { $0 = false }
        result = await push.flush()
        #expect(result.sent == 0 && result.waiting == 2)
        clock.advance(2)
        result = await push.flush()
        #expect(result.sent == 2 && result.waiting == 0)
        let sent = net.sent.withLockedValue { $0 }
        #expect(sent.count == 2)
        #expect(sent[0].url == "https://push.example.com/v1/apps/app_1/devices")
        #expect(sent[0].body["token"] == "abcd" && sent[0].body["user_id"] == "u1")
        #expect(sent[0].authorization == "Bearer rp_register" && sent[0].identity == "proof-for-u1")
        // The open goes to the delivery's own address, without the key.
        #expect(sent[1].url == "https://push.example.com/v1/receipts/n1.abc.0000000000001.sig/opens")
        // It names the deep link the open led to: the notification's own.
        #expect(
            sent[1].body == ["event": "opened", "action": "read-later", "link": "app://a"]
                && sent[1].authorization == nil
        )
        #expect(await push.flush() == .init(sent: 0, refused: 0, waiting: 0))
    }

    @Test func theServersWaitIsKeptAndRefusalsAreDropped() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rpapp-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let (net, clock) = (Network(), Clock())
        let push = make(dir, net, clock)
        await push.register(token: "ab")
        // Without a receipt address the open names the notification and the device's token, with the key.
        await push.handle(response(["rp": ["id": "n2"]], UNNotificationDismissActionIdentifier))
        net.answers.withLockedValue { $0 = [(503, "120")] }
        var r = await push.flush()
        #expect(r.sent == 0 && r.waiting == 2)
        clock.advance(60)
        r = await push.flush()
        #expect(r.sent == 0)
        clock.advance(61)
        // A hostile Retry-After is held to the longest backoff, never a trap.
        net.answers.withLockedValue { $0 = [(201, nil), (429, "1e308")] }
        r = await push.flush()
        #expect(r.sent == 1 && r.waiting == 1)
        clock.advance(3601)
        net.answers.withLockedValue { $0 = [(422, nil)] }
        r = await push.flush()
        #expect(r.refused == 1 && r.waiting == 0)
        let last = net.sent.withLockedValue { $0.last }
        #expect(last?.url == "https://push.example.com/v1/apps/app_1/notifications/n2/opens")
        #expect(last?.body == ["event": "dismissed", "token": "ab"] && last?.authorization == "Bearer rp_register")
        // A notification that is not RichPush's is left alone.
        #expect(await push.handle(response(["aps": ["alert": "x"]], UNNotificationDefaultActionIdentifier)) == nil)
        // A receipt address that is not https is not used.
        await push.handle(
            response(["rp": ["id": "n3", "r": "http://evil.example/x"]], UNNotificationDefaultActionIdentifier)
        )
        #expect(await push.pending == 1)
    }

    /// An open that reaches the server before the push service's answer was recorded is answered 409
    /// `delivery-not-accepted` with Retry-After: it waits and goes again (dropped, as every 409 was, it was lost).
    /// A 409 without Retry-After (the open was already recorded, or the delivery failed) is final.
    @Test func anOpenBeforeTheDeliveryIsAcceptedWaitsAndGoesAgain() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rpapp-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let (net, clock) = (Network(), Clock())
        let push = make(dir, net, clock)
        let address = "https://push.example.com/v1/receipts/n4.abc.0000000000001.sig"
        await push.handle(response(["rp": ["id": "n4", "r": address]], UNNotificationDefaultActionIdentifier))
        net.answers.withLockedValue { $0 = [(409, "5")] }
        var r = await push.flush()
        #expect(r.sent == 0 && r.waiting == 1)
        clock.advance(6)
        r = await push.flush()
        #expect(r.sent == 1 && r.waiting == 0)
        #expect(net.sent.withLockedValue { $0.map(\.url) } == [address + "/opens", address + "/opens"])
        await push.handle(response(["rp": ["id": "n5", "r": address]], UNNotificationDefaultActionIdentifier))
        net.answers.withLockedValue { $0 = [(409, nil)] }
        r = await push.flush()
        #expect(r.sent == 1 && r.waiting == 0)
    }

    @Test func permissionIsAskedOnce() async throws {
        let center = UNUserNotificationCenter.current()
        center.standInReset()
        center.standInAnswer = false
        let push = RichPushApp(
            configuration: .init(
                server: URL(string: "https://push.example.com")!,
                appID: "a",
                key: "k",
                directory: FileManager.default.temporaryDirectory.appendingPathComponent("rpapp-\(UUID().uuidString)")
            ),
            center: center,
            transport: Network().transport
        )
        #expect(await push.permission() == .notDetermined)
        #expect(await push.requestPermission() == .denied)
        center.standInAnswer = true
        #expect(await push.requestPermission() == .denied)
        center.standInReset()
    }

    /// Where permission stands goes to the server with the registration, and again when it changes (read when the
    /// app comes to the foreground), not when it did not; it survives a restart. An open names the link the app
    /// says it followed; a dismissal names none.
    @Test func permissionAndLinksReachTheServer() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rpapp-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        // A center of its own: the shared one is another test's.
        let center = UNUserNotificationCenter()
        center.standInAnswer = true
        let (net, clock) = (Network(), Clock())
        var push = make(dir, net, clock, center: center)
        await push.register(token: "ab")
        #expect(await push.requestPermission() == .authorized)
        #expect(await push.flush().sent == 1)
        #expect(net.sent.withLockedValue { $0.last?.body["permission"] } == "authorized")
        // Unchanged: nothing to send.
        await push.permission()
        #expect(await push.pending == 0)
        // Turned off in Settings; the app is opened again and reads it.
        center.standInSet(.denied)
        push = make(dir, net, clock, center: center)
        await push.permission()
        #expect(await push.pending == 1)
        #expect(await push.flush().sent == 1)
        let registration = net.sent.withLockedValue { $0.last }
        #expect(registration?.body["permission"] == "denied" && registration?.body["token"] == "ab")
        push = make(dir, net, clock, center: center)
        await push.permission()
        #expect(await push.pending == 0)

        let userInfo: [AnyHashable: Any] = ["rp": ["id": "n9", "l": "shop://home"]]
        await push.handle(response(userInfo, "track"), following: URL(string: "shop://orders/42"))
        await push.handle(response(userInfo, UNNotificationDismissActionIdentifier))
        #expect(await push.flush().sent == 2)
        let opens = net.sent.withLockedValue { $0.suffix(2).map(\.body) }
        #expect(opens[0] == ["event": "opened", "action": "track", "link": "shop://orders/42", "token": "ab"])
        #expect(opens[1] == ["event": "dismissed", "token": "ab"])
    }

    /// A registration naming the user carries the proof the app's backend gave; one the server refuses (401) is
    /// asked for again and sent once more; without a proof the device is registered without its user.
    @Test func theUsersProofGoesWithItsRegistration() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rpapp-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let (net, clock) = (Network(), Clock())
        let asked = NIOLockedValueBox<[String]>([])
        let proofs = NIOLockedValueBox(["stale", "fresh"])
        let push = make(dir, net, clock) { user in
            asked.withLockedValue { $0.append(user) }
            return proofs.withLockedValue { $0.isEmpty ? nil : $0.removeFirst() }
        }
        await push.register(token: "ab")
        await push.setUser("bob")
        net.answers.withLockedValue { $0 = [(401, nil), (200, nil)] }
        #expect(await push.flush() == .init(sent: 1, refused: 0, waiting: 0))
        #expect(asked.withLockedValue { $0 } == ["bob", "bob"])
        var sent = net.sent.withLockedValue { $0 }
        #expect(sent.map(\.identity) == ["stale", "fresh"] && sent.allSatisfy { $0.body["user_id"] == "bob" })
        // The backend has no proof now: the device is registered all the same, without its user.
        await push.setTags(["news"])
        #expect(await push.flush().sent == 1)
        sent = net.sent.withLockedValue { $0 }
        #expect(sent.last?.identity == nil && sent.last?.body["user_id"] == nil && sent.last?.body["token"] == "ab")
        // An app without a provider sends no user id either (the public key cannot name one).
        let bare = make(
            FileManager.default.temporaryDirectory.appendingPathComponent("rpapp-\(UUID().uuidString)"),
            net,
            clock,
            identity: nil
        )
        await bare.register(token: "cd")
        await bare.setUser("carol")
        #expect(await bare.flush().sent == 1)
        #expect(net.sent.withLockedValue { $0.last?.body["user_id"] } == nil)
    }
}
