import Foundation

@testable import RichPushCore

enum Fixtures {
    static let token = "5a4e1c0f9d8b7a6e5d4c3b2a19080706f5e4d3c2b1a09f8e7d6c5b4a39281706"
    static let fcmToken = "dQw4w9WgXcQ:APA91bH-example_registration-token"
    static let fixedNow: @Sendable () -> Date = { Date(timeIntervalSince1970: 1_700_000_000) }

    static func message(_ json: String) throws -> PushMessage {
        try PushMessage.decode(JSONValue.parse(json))
    }

    static func rules(_ report: ValidationReport) -> Set<String> { Set(report.issues.map { "\($0.path)|\($0.rule)" }) }
}
