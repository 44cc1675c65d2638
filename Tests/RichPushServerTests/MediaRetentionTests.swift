import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import RichPushCore
import RichPushServer
import Testing

/// Hosted media is kept while devices may fetch it, then swept.
@Suite struct MediaRetentionTests {
    static func store() throws -> MediaStore {
        try MediaStore(
            directory: FileManager.default.temporaryDirectory.appendingPathComponent("retention-\(UUID().uuidString)")
        )
    }

    static func modified(_ store: MediaStore, _ name: String) throws -> Date {
        let path = store.directory.appendingPathComponent(String(name.prefix(2))).appendingPathComponent(name).path
        return try #require(try FileManager.default.attributesOfItem(atPath: path)[.modificationDate] as? Date)
    }

    static func age(_ store: MediaStore, _ name: String, days: Double) throws {
        let path = store.directory.appendingPathComponent(String(name.prefix(2))).appendingPathComponent(name).path
        try FileManager.default.setAttributes(
            [.modificationDate: Date().addingTimeInterval(-days * 86_400)],
            ofItemAtPath: path
        )
    }

    @Test func filesAreSweptOnlyPastTheirRetention() throws {
        let store = try Self.store()
        defer { try? FileManager.default.removeItem(at: store.directory) }
        let kept = try store.put(Array("kept".utf8) + [0xFF, 0xD8, 0xFF], type: .jpeg)
        let old = try store.put(Array("old".utf8) + [0xFF, 0xD8, 0xFF], type: .jpeg)
        let fresh = try store.put(Array("fresh".utf8) + [0xFF, 0xD8, 0xFF], type: .jpeg)
        try Self.age(store, kept.name, days: 30)
        try Self.age(store, old.name, days: 10)
        // A send that references `kept` moves its last fetch moment to tomorrow.
        #expect(store.keep(kept.name, until: Date().addingTimeInterval(86_400)))
        #expect(try Self.modified(store, kept.name) > Date().addingTimeInterval(86_000))
        // Leftovers of interrupted writes: an old one goes, a fresh one (a write under way) stays.
        let shard = store.directory.appendingPathComponent(String(kept.name.prefix(2)))
        let stalePart = shard.appendingPathComponent(".stale.part")
        let livePart = shard.appendingPathComponent(".live.part")
        try Data([1]).write(to: stalePart)
        try Data([1]).write(to: livePart)
        try FileManager.default.setAttributes(
            [.modificationDate: Date().addingTimeInterval(-7200)],
            ofItemAtPath: stalePart.path
        )

        let swept = store.sweep(retention: 7 * 86_400)
        #expect(swept.files == 2 && swept.bytes == old.size + 1)
        #expect(store.get(old.name) == nil)  // gone from memory too
        #expect(!store.keep(old.name, until: Date()))
        #expect(store.get(kept.name) != nil && store.get(fresh.name) != nil)
        #expect(
            FileManager.default.fileExists(atPath: livePart.path)
                && !FileManager.default.fileExists(atPath: stalePart.path)
        )
    }

    @Test func aSweptChartIsDrawnAgainWhenASendNeedsIt() async throws {
        let store = try Self.store()
        defer { try? FileManager.default.removeItem(at: store.directory) }
        let media = MediaService(
            store: store,
            fetcher: try SafeFetcher(policy: AddressPolicy(allowAll: true)),
            publicBase: "https://push.example.com"
        )
        let spec = try ChartSpec.decode(["type": "bar", "values": [1, 2, 3]])
        let first = try await media.chartImage(spec)
        try Self.age(store, first.name, days: 40)
        #expect(store.sweep(retention: 7 * 86_400).files == 1)
        let again = try await media.chartImage(spec)
        #expect(again.name == first.name && store.get(again.name) != nil)
    }

    /// A send keeps its hosted media until its TTL runs out.
    @Test func aSendKeepsItsHostedMediaForItsTTL() async throws {
        let f = try APITests.fixture()
        let store = try Self.store()
        defer { try? FileManager.default.removeItem(at: store.directory) }
        var api = f.api
        let media = MediaService(
            store: store,
            fetcher: try SafeFetcher(policy: AddressPolicy(allowAll: true)),
            publicBase: "https://push.example.com"
        )
        api.media = media
        try await Application(router: api.router()).test(.router) { client in
            let (app, key) = try await APITests.createApp(client)
            let sendAt = Date().addingTimeInterval(3600)
            let (status, _) = try await APITests.call(
                client,
                .post,
                "/v1/apps/\(app)/notifications",
                key: key,
                body: [
                    "title": "T", "chart": ["type": "bar", "values": [4, 5, 6]], "ttl": 7200,
                    "send_at": .double(sendAt.timeIntervalSince1970),
                    "audience": ["apns_tokens": [.string(String(repeating: "ab", count: 32))]],
                ]
            )
            #expect(status == 202)
            let chart = try await media.chartImage(try ChartSpec.decode(["type": "bar", "values": [4, 5, 6]]))
            let until = try Self.modified(store, chart.name)
            // Rounded up to the hour.
            let end = sendAt.addingTimeInterval(7200).timeIntervalSince1970
            #expect(until.timeIntervalSince1970 >= end && until.timeIntervalSince1970 < end + 3600, "\(until)")
        }
    }
}
