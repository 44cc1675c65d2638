import Foundation
import Testing

@testable import RichPushServer

/// A replay's times: RFC 3339 read strictly (a time that is not a real one is refused, not rolled over into
/// another), and what the events carry read back to the same instant.
@Suite struct WebhookTimeTests {
    @Test func realTimesAreReadAndOthersRefused() {
        let read: [(String, TimeInterval)] = [
            ("1970-01-01T00:00:00Z", 0),
            ("2026-11-27T10:00:00Z", 1_795_773_600),
            ("2026-11-27T11:00:00+01:00", 1_795_773_600),
            ("2026-11-27T05:30:00-04:30", 1_795_773_600),
            ("2026-11-27T10:00:00.5Z", 1_795_773_600.5),
            ("2026-11-27T10:00:00.123456789Z", 1_795_773_600.123456789),
            ("2024-02-29T00:00:00Z", 1_709_164_800),
            ("2000-02-29T23:59:59Z", 951_868_799),
            ("1969-12-31T23:59:59Z", -1),
            // RFC 3339, section 5.6: `T` and `Z` may be lower case.
            ("2026-11-27t10:00:00Z", 1_795_773_600),
            ("2026-11-27T10:00:00z", 1_795_773_600),
            ("2026-11-27t10:00:00.5z", 1_795_773_600.5),
        ]
        for (text, seconds) in read {
            let d = WebhookTime.parse(text)
            #expect(
                d.map { abs($0.timeIntervalSince1970 - seconds) < 1e-6 } == true,
                "\(text) → \(String(describing: d))"
            )
        }
        let refused = [
            "2026-11-27T24:00:00Z", "2026-11-31T00:00:00Z", "2026-02-29T00:00:00Z", "1900-02-29T00:00:00Z",
            "2026-13-01T00:00:00Z", "2026-00-10T00:00:00Z", "2026-11-00T00:00:00Z", "2026-11-27T10:60:00Z",
            "2026-11-27T10:00:60Z", "2026-11-27T00:00:00+99:99", "2026-11-27T00:00:00+24:00",
            "2026-11-27T00:00:00+01:60",
            "2026-11-27 10:00:00Z", "2026-11-27x10:00:00Z", "2026-11-27T10:00:00Y", "2026-11-27T10:00:00",
            "2026-11-27T10:00:00Z ", " 2026-11-27T10:00:00Z", "2026-11-27T10:00:00.Z",
            "2026-11-27T10:00:00.1234567891Z",
            "2026-11-27T10:00:00+0100", "+2026-11-27T10:00:00Z", "2026-1-27T10:00:00Z", "２０２６-11-27T10:00:00Z",
            "2026-11-27T10:00:00Z*", "",
        ]
        for text in refused { #expect(WebhookTime.parse(text) == nil, "\(text)") }
    }

    @Test func whatTheEventsCarryReadsBackToTheSameMillisecond() {
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<2_000 {
            let ms = Int64.random(in: -2_000_000_000_000...8_000_000_000_000, using: &rng)
            let date = Date(timeIntervalSince1970: Double(ms) / 1000)
            let text = WebhookTime.rfc3339(date)
            // The millisecond written (the formatter rounds down, and ms / 1000 is not always exact in binary).
            let written = Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
            let back = WebhookTime.parse(text)
            #expect(back.map { Int64(($0.timeIntervalSince1970 * 1000).rounded()) } == written, "\(text)")
        }
    }
}
