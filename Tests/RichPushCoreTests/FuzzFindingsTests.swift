import Foundation
import Testing

@testable import RichPushCore

/// What the libFuzzer harnesses (Scripts/fuzz-device) found, each kept as a test.
@Suite struct FuzzFindingsTests {
    /// The media URL harness (`urls`): inputs that broke an invariant of the normalization, with the rule each is
    /// now refused by. Each input must be refused or give a form that normalizes to itself.
    @Test(arguments: [
        // Bytes that are not UTF-8 (U+FFFD) and a `+` in an international label made an `xn--` label with a `+`,
        // which the next reading refused: the fetched form was not a fixed point.
        ("https://Bk\u{FFFD}CHER+invalidhttps:///photo.?X-Amz-Signature/pho=to./p$pgg", "url-host"),
        ("https://b\u{FC}cher+x.example/a.jpg", "url-host"),
        // An international label written behind xn-- (UTS #46 refuses it).
        ("https://xn--b\u{FC}cher.example/a.jpg", "url-host"),
    ])
    func mediaURLFindings(_ input: String, _ rule: String) {
        #expect(throws: MediaURL.Problem.self) { try MediaURL(input) }
        do { _ = try MediaURL(input) } catch { #expect(error.code == rule, "\(error)") }
    }
}
