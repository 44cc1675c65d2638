#if canImport(UserNotifications) || canImport(UserNotificationsStandIn)
import Foundation
import RichPushCore
@testable import RichPushMedia
import RichPushNotificationService
import RichPushSandbox
import RichPushTestSupport
import Testing
#if canImport(UserNotifications)
import UserNotifications
#else
import UserNotificationsStandIn
#endif

/// The Apple adapter driven as the system drives it: `didReceive` on one thread, the expiry on another, against
/// real media on 127.0.0.1.
@Suite(.serialized) struct ServiceExtensionTests {
    typealias S = MediaSamples
    static let gif = S.file(S.gif89, size: 9_000)
    static let jpeg = S.file(S.jpeg(marker: 0xE1), size: 30_000)
    static let mp4 = S.file(S.ftyp("isom", ["iso2", "avc1", "mp41"]), size: 60_000)

    static func withServer(_ body: (String) async throws -> Void) async throws {
        let server = MediaTestServer(routes: [
            "/a.gif": .bytes(gif, contentType: "image/gif"),
            "/b.jpg": .bytes(jpeg, contentType: "image/jpeg"),
            "/c.mp4": .bytes(mp4, contentType: "video/mp4"),
            "/slow.jpg": .drip(total: 200_000, chunk: 64, interval: 0.2, contentType: "image/jpeg"),
        ])
        let port = try await server.start()
        do { try await body("http://127.0.0.1:\(port)") } catch {
            try? await server.shutdown()
            throw error
        }
        try await server.shutdown()
    }

    static func request(_ media: [JSONValue], userInfo extra: [String: Any] = [:]) -> UNNotificationRequest {
        let content = UNMutableNotificationContent()
        content.title = "Sale"
        content.body = "40% off"
        var info: [AnyHashable: Any] = [
            "aps": ["alert": ["title": "Sale", "body": "40% off"], "mutable-content": 1],
            "rp": JSONValue.object(["v": 1, "m": .array(media)]).foundationValue,
        ]
        for (k, v) in extra { info[k] = v }
        content.userInfo = info
        return UNNotificationRequest(identifier: "n1", content: content, trigger: nil)
    }

    /// What the system saw: every call of the content handler and of `didDeliver`.
    final class Calls: @unchecked Sendable {
        // @unchecked: every field is read and written under `lock`.
        private let lock = NSLock()
        private var contents: [UNNotificationContent] = []
        private var reports: [DeliveryReport] = []
        func handed(_ c: UNNotificationContent) { lock.withLock { contents.append(c) } }
        func delivered(_ r: DeliveryReport) { lock.withLock { reports.append(r) } }
        var handedOver: [UNNotificationContent] { lock.withLock { contents } }
        var deliveredReports: [DeliveryReport] { lock.withLock { reports } }

        // Up to the whole budget: the extension always reports by its deadline, however loaded the machine.
        func waitForReport(seconds: Double = RichNotificationProcessor.systemBudget + 5) async -> DeliveryReport? {
            let end = Date().addingTimeInterval(seconds)
            while Date() < end {
                if let r = deliveredReports.first { return r }
                try? await Task.sleep(nanoseconds: 20_000_000)
            }
            return nil
        }
    }

    final class TestExtension: RichPushServiceExtension, @unchecked Sendable {
        // @unchecked: `calls` is itself thread-safe and never replaced.
        let calls = Calls()
        override var configuration: RichNotificationProcessor.Configuration {
            var c = RichNotificationProcessor.Configuration(fetch: FetchPolicy(allowInsecureHTTP: true, idleTimeout: 5))
            c.receipts.enabled = false
            return c
        }
        override func didDeliver(_ report: DeliveryReport) { calls.delivered(report) }
    }

    /// Calls `didReceive` on a thread of its own, as the system does.
    static func receive(_ ext: TestExtension, _ request: UNNotificationRequest) {
        let calls = ext.calls
        nonisolated(unsafe) let ext = ext
        nonisolated(unsafe) let request = request
        let thread = Thread { ext.didReceive(request) { calls.handed($0) } }
        thread.start()
    }

    @Test func theContentHandlerRunsOnceWithTheAttachmentsTheSystemAccepted() async throws {
        try await Self.withServer { base in
            let ext = TestExtension()
            Self.receive(
                ext,
                Self.request(
                    [["u": .string(base + "/a.gif")], ["u": .string(base + "/b.jpg")]],
                    userInfo: ["deep": "kept"]
                )
            )
            let report = try #require(await ext.calls.waitForReport())
            try await Task.sleep(nanoseconds: 300_000_000)
            #expect(ext.calls.handedOver.count == 1)
            #expect(ext.calls.deliveredReports.count == 1)
            let content = try #require(ext.calls.handedOver.first)
            #expect(content.title == "Sale" && content.body == "40% off")
            // The report says why, if not (a loaded full run once handed over none at the deadline).
            #expect(content.attachments.map(\.identifier) == ["media-0", "media-1"], "\(report)")
            #expect(content.attachments.map(\.type) == ["com.compuserve.gif", "public.jpeg"])
            #expect(content.userInfo["deep"] as? String == "kept")
            #expect(report.attached.map(\.identifier) == ["media-0", "media-1"] && report.skipped.isEmpty)
        }
    }

    @Test func aFileTheSystemRefusesIsReportedAsSkippedWithItsReason() async throws {
        try await Self.withServer { base in
            let ext = TestExtension()
            UNStandInSystem.refuseNextAttachments(1, with: .attachmentCorrupt)
            Self.receive(ext, Self.request([["u": .string(base + "/b.jpg")]]))
            let report = try #require(await ext.calls.waitForReport())
            let content = try #require(ext.calls.handedOver.first)
            #expect(content.attachments.isEmpty)
            #expect(report.attached.isEmpty)
            #expect(report.skipped.map(\.reason.code) == ["system-refused"])
            #expect(report.skipped.first?.reason.description.contains("105") == true)
            // The refused file is not left behind in the staging folder.
            #expect(report.skipped.first?.url == base + "/b.jpg")
        }
    }

    @Test func expiryFromAnotherThreadHandsOverOnceWithWhatIsStaged() async throws {
        try await Self.withServer { base in
            let ext = TestExtension()
            Self.receive(ext, Self.request([["u": .string(base + "/b.jpg")], ["u": .string(base + "/slow.jpg")]]))
            // Wait until the quick file is staged, then expire from a thread of the system's.
            let end = Date().addingTimeInterval(10)
            while Date() < end && ext.calls.handedOver.isEmpty {
                try await Task.sleep(nanoseconds: 300_000_000)
                nonisolated(unsafe) let e = ext
                let expiry = Thread { e.serviceExtensionTimeWillExpire() }
                expiry.start()
                // A second expiry call and the pipeline's own completion must not hand over again.
                try await Task.sleep(nanoseconds: 50_000_000)
                ext.serviceExtensionTimeWillExpire()
            }
            let report = try #require(await ext.calls.waitForReport())
            try await Task.sleep(nanoseconds: 500_000_000)
            #expect(ext.calls.handedOver.count == 1)
            #expect(ext.calls.deliveredReports.count == 1)
            #expect(report.deadlineHit)
            #expect(report.skipped.contains { $0.url.hasSuffix("/slow.jpg") && $0.reason.code == "deadline" })
        }
    }

    @Test func anExpiryBeforeAnyWorkStillHandsOverTheOriginal() async throws {
        let ext = TestExtension()
        ext.serviceExtensionTimeWillExpire()  // before didReceive: nothing to expire, nothing happens
        Self.receive(ext, Self.request([]))
        let report = try #require(await ext.calls.waitForReport())
        #expect(report.attached.isEmpty)
        #expect(ext.calls.handedOver.first?.title == "Sale")
    }

    @Test func thumbnailOptionsAreTheDocumentedTypes() throws {
        func staged(_ type: MediaType, _ thumbnail: PushMedia.Thumbnail) -> StagedAttachment {
            StagedAttachment(
                identifier: "x",
                file: URL(fileURLWithPath: "/tmp/x.\(type.fileExtension)"),
                type: type,
                bytes: 10,
                sourceURL: "https://example.com/x",
                typeSource: "bytes",
                thumbnail: thumbnail,
                stagedAfterMilliseconds: 0
            )
        }
        let crop = UnitRect(x: 0.1, y: 0.2, width: 0.5, height: 0.4)
        let gif = RichPushExtension.options(for: staged(.gif, .init(crop: crop, time: 3, hidden: false)))
        #expect(gif[UNNotificationAttachmentOptionsTypeHintKey] as? String == "com.compuserve.gif")
        let rect = try #require(gif[UNNotificationAttachmentOptionsThumbnailClippingRectKey] as? NSDictionary)
        #expect((rect["X"] as? NSNumber)?.doubleValue == 0.1 && (rect["Y"] as? NSNumber)?.doubleValue == 0.2)
        #expect((rect["Width"] as? NSNumber)?.doubleValue == 0.5 && (rect["Height"] as? NSNumber)?.doubleValue == 0.4)
        // An animated image's thumbnail is a frame number: an integer.
        let frame = try #require(gif[UNNotificationAttachmentOptionsThumbnailTimeKey] as? NSNumber)
        #expect(frame.intValue == 3 && frame.doubleValue == 3)
        #expect((gif[UNNotificationAttachmentOptionsThumbnailHiddenKey] as? NSNumber)?.boolValue == false)

        // A movie's thumbnail time is in seconds, fractions kept.
        let movie = RichPushExtension.options(for: staged(.mp4, .init(time: 2.5)))
        #expect((movie[UNNotificationAttachmentOptionsThumbnailTimeKey] as? NSNumber)?.doubleValue == 2.5)
        // Audio has no thumbnail time; a rectangle past the image's edge is held to it; extremes never trap.
        let audio = RichPushExtension.options(for: staged(.mp3, .init(time: 4)))
        #expect(audio[UNNotificationAttachmentOptionsThumbnailTimeKey] == nil)
        let wide = RichPushExtension.options(
            for: staged(.png, .init(crop: UnitRect(x: 0.8, y: 0, width: 0.9, height: 1), time: 1e300))
        )
        let held = try #require(wide[UNNotificationAttachmentOptionsThumbnailClippingRectKey] as? NSDictionary)
        #expect(abs(((held["Width"] as? NSNumber)?.doubleValue ?? 0) - 0.2) < 1e-9)
        #expect((wide[UNNotificationAttachmentOptionsThumbnailTimeKey] as? NSNumber)?.intValue == 100_000)
    }

    @Test func theStandInRefusesWhatAppleRefuses() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("un-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        func write(_ name: String, _ size: Int) throws -> URL {
            let url = dir.appendingPathComponent(name)
            try Data(count: size).write(to: url)
            return url
        }
        func code(_ body: () throws -> Void) -> UNError.Code? {
            do { try body() } catch let e as UNError { return e.code } catch { return nil }
            return nil
        }
        #expect(
            code { _ = try UNNotificationAttachment(identifier: "a", url: dir.appendingPathComponent("none.jpg")) }
                == .attachmentInvalidURL
        )
        #expect(
            code { _ = try UNNotificationAttachment(identifier: "a", url: URL(string: "https://example.com/a.jpg")!) }
                == .attachmentInvalidURL
        )
        let webp = try write("a.webp", 100)
        #expect(code { _ = try UNNotificationAttachment(identifier: "a", url: webp) } == .attachmentUnrecognizedType)
        let big = try write("big.mp3", 5 * 1024 * 1024 + 1)
        #expect(code { _ = try UNNotificationAttachment(identifier: "a", url: big) } == .attachmentInvalidFileSize)
        // A type hint decides over the extension.
        let noExtension = try write("picture", 100)
        let a = try UNNotificationAttachment(
            identifier: "",
            url: noExtension,
            options: [UNNotificationAttachmentOptionsTypeHintKey: "public.png"]
        )
        #expect(a.type == "public.png" && !a.identifier.isEmpty)
        // copy and mutableCopy give independent contents.
        let content = UNMutableNotificationContent()
        content.title = "one"
        let frozen = content.copy() as! UNNotificationContent
        let edited = content.mutableCopy() as! UNMutableNotificationContent
        edited.title = "two"
        #expect(frozen.title == "one" && content.title == "one" && edited.title == "two")
        #expect(!(frozen is UNMutableNotificationContent))
    }
}
#endif
