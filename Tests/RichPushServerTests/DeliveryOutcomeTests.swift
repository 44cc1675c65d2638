import Foundation
import Hummingbird
import HummingbirdTesting
import RichPushCore
import Testing

@testable import RichPushServer

/// What a push service says is bounded before it is stored: its id for a delivery (`apns-id`, FCM's message name, a
/// Web Push `Location`) and a reason are cut to 256 bytes of UTF-8, never inside a character, on every backend and
/// however the outcome is settled.
@Suite struct DeliveryOutcomeTests {
    typealias Kind = DeliveryQueueTests.Kind

    /// 15 KB, as a hostile service's `Location` was: two-byte and four-byte characters, so that 256 falls inside one.
    static let huge = "https://push.example/" + String(repeating: "é😀x", count: 2_000)

    @Test func theCutKeepsWholeCharactersWithinTheBound() {
        let cut = DeliveryOutcome.bounded(Self.huge)
        #expect(cut.utf8.count <= DeliveryOutcome.maxProviderTextBytes)
        #expect(cut.utf8.count > DeliveryOutcome.maxProviderTextBytes - 4)
        #expect(Self.huge.hasPrefix(cut))
        #expect(String(validating: Array(cut.utf8), as: UTF8.self) == cut)
        #expect(
            DeliveryOutcome.bounded("0a1b2c3d-0000-4000-8000-000000000000") == "0a1b2c3d-0000-4000-8000-000000000000"
        )
        // However the value is set: made, assigned, or a reschedule's reason.
        var outcome = DeliveryOutcome.delivered(providerID: Self.huge)
        #expect(outcome.providerID?.utf8.count ?? 0 <= 256)
        outcome.providerID = Self.huge
        outcome.reason = Self.huge
        #expect(outcome.providerID?.utf8.count ?? 0 <= 256 && outcome.reason?.utf8.count ?? 0 <= 256)
        #expect(DeliveryOutcome.failed(Self.huge).reason?.utf8.count ?? 0 <= 256)
        let later = Settlement(id: 1, .reschedule(notBefore: Date(), reason: Self.huge))
        guard case .reschedule(_, let reason) = later.action else { return }
        #expect(reason.utf8.count <= 256 && Self.huge.hasPrefix(reason))
    }

    @Test(arguments: Kind.allCases)
    func aHugeProviderIDIsStoredCut(_ kind: Kind) async throws {
        let q = try await DeliveryQueueTests.make(kind)
        let now = Date()
        try await q.enqueue(
            (0..<3).map {
                NewDelivery(
                    notificationID: "n-huge",
                    appID: "app",
                    provider: .apns,
                    target: "token-\($0)",
                    notBefore: now.addingTimeInterval(-1),
                    expiresAt: nil
                )
            }
        )
        let claimed = try await q.claim(owner: "w", limit: 3, now: now, lease: 60)
        try #require(claimed.count == 3)
        // One by finish, one by a settled batch, one rescheduled with a huge reason.
        try await q.finish(id: claimed[0].id, owner: "w", outcome: .delivered(providerID: Self.huge), now: now)
        let held = try await q.settle(
            [
                Settlement(id: claimed[1].id, .finish(.delivered(providerID: Self.huge))),
                Settlement(id: claimed[2].id, .reschedule(notBefore: now.addingTimeInterval(60), reason: Self.huge)),
            ],
            owner: "w",
            now: now
        )
        #expect(held == [claimed[1].id, claimed[2].id])
        let stored = try await q.deliveries(notificationID: "n-huge")
        #expect(stored.count == 3)
        for d in stored {
            let text = d.providerID ?? d.reason ?? ""
            #expect(!text.isEmpty, "\(d.state)")
            #expect(text.utf8.count <= DeliveryOutcome.maxProviderTextBytes, "\(kind) \(d.state)")
            #expect(Self.huge.hasPrefix(text), "\(kind)")
        }
    }

    /// The notification's outcome lists what was stored: 200 deliveries whose service answered 15 KB each answer
    /// well under 100 KB (it answered 3 MB before the cut).
    @Test func theOutcomeOfAHostileServicesSendStaysSmall() async throws {
        let f = try APITests.fixture()
        try await Application(router: f.api.router()).test(.router) { client in
            let (app, key) = try await DeviceReceiptsTests.token(client)
            let tokens = (0..<200).map { JSONValue.string(String(format: "%064x", $0 + 1)) }
            let (status, accepted) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/notifications",
                key: key,
                body: ["title": "Hi", "audience": ["apns_tokens": .array(tokens)]]
            )
            #expect(status == 202)
            let id = try #require(accepted["id"]?.stringValue)
            let queue = f.api.backend.queue
            let claimed = try await queue.claim(owner: "w", limit: 200, now: Date(), lease: 60)
            #expect(claimed.count == 200)
            _ = try await queue.settle(
                claimed.map { Settlement(id: $0.id, .finish(.delivered(providerID: Self.huge))) },
                owner: "w",
                now: Date()
            )
            try await client.execute(
                uri: "/v1/apps/\(app)/notifications/\(id)",
                method: .get,
                headers: [.authorization: "Bearer \(key)"]
            ) { response in
                #expect(response.status == .ok)
                #expect(response.body.readableBytes < 100_000, "\(response.body.readableBytes) bytes")
                let body = try JSONValue.parse(Array(buffer: response.body))
                let ids = body["deliveries"]?.arrayValue?.compactMap { $0["provider_id"]?.stringValue } ?? []
                #expect(ids.count == 200 && ids.allSatisfy { $0.utf8.count <= 256 })
            }
        }
    }
}
