import Foundation
import NIOConcurrencyHelpers
import RichPushSandbox

/// Credentials are generated once per test run (RSA keys take a moment).
enum SandboxFixture {
    static let credentials: SandboxCredentials = try! SandboxCredentials.generate()
}

/// A clock tests move by hand.
final class TestClock: Sendable {
    private let offset = NIOLockedValueBox<TimeInterval>(0)
    func advance(_ seconds: TimeInterval) { offset.withLockedValue { $0 += seconds } }
    var now: @Sendable () -> Date { { [offset] in Date().addingTimeInterval(offset.withLockedValue { $0 }) } }
}
