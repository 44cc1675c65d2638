import Foundation
import Testing

@testable import RichPushSandbox

struct RequestIDTests {
    /// The emulators' request ids read as UUIDs, in lower case, version 4 with the RFC 4122 variant, and do not
    /// repeat.
    @Test func requestIDsAreRandomVersionFourUUIDs() {
        var seen = Set<String>()
        for _ in 0..<10_000 {
            let id = RequestID.uuid()
            let parsed = UUID(uuidString: id)
            #expect(parsed != nil && parsed?.uuidString.lowercased() == id, "\(id)")
            let bytes = Array(id.utf8)
            #expect(bytes.count == 36 && bytes[14] == UInt8(ascii: "4"), "\(id)")
            #expect("89ab".utf8.contains(bytes[19]), "\(id)")
            seen.insert(id)
        }
        #expect(seen.count == 10_000)
    }
}
