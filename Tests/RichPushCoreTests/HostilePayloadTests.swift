import Foundation
import Testing

@testable import RichPushCore

/// Received payloads with extremes in keys that are not ours, and in ours: ours are still read, nothing traps.
@Suite struct HostilePayloadTests {
    static func nested(_ depth: Int, open: String = "[", close: String = "]") -> String {
        String(repeating: open, count: depth) + "1" + String(repeating: close, count: depth)
    }

    static let ourImage = #""rp":{"v":1,"m":[{"u":"https://cdn.example.com/a.jpg"}]}"#

    @Test(arguments: [65, 200, 2_500])
    func aDeepKeyThatIsNotOursDoesNotSinkOurs(_ depth: Int) throws {
        let objects = String(repeating: #"{"a":"#, count: depth) + "1" + String(repeating: "}", count: depth)
        for deep in [Self.nested(depth), objects] {
            let text = #"{"aps":{"alert":"hi","mutable-content":1},"custom":"# + deep + "," + Self.ourImage + "}"
            // A request body is refused whole; a received payload is read with the deep value as null.
            #expect(throws: JSONSyntaxError.self) { try JSONValue.parse(text) }
            let payload = try JSONValue.parse(Array(text.utf8), deepValues: .readAsNull)
            let content = ReceivedPayloadDecoder.decode(payload)
            #expect(content.media.map(\.url) == ["https://cdn.example.com/a.jpg"])
        }
    }

    @Test(arguments: [
        "[[[1,]]]", "[[[1]]", #"[[{"a" 1}]]"#, #"[[{"a":1,}]]"#, "[[[1 2]]]", "[[[tru]]]", #"[[["\x"]]]"#,
    ])
    func aDeepValueIsStillCheckedForSyntax(_ text: String) {
        #expect(throws: JSONSyntaxError.self) {
            try JSONValue.parse(Array(text.utf8), maxDepth: 1, deepValues: .readAsNull)
        }
    }

    @Test func deepValuesReadAsNullKeepTheirNeighbours() throws {
        let v = try JSONValue.parse(
            Array(#"[[[1, {"x": [2]}], []], 3, {}, [[]]]"#.utf8),
            maxDepth: 2,
            deepValues: .readAsNull
        )
        // The containers at the third level, empty or not, read as null; everything above them is kept.
        #expect(v == [[.null, .null], 3, [:], [.null]])
    }

    @Test func foundationValuesNestedDeeplyOrNotJSONAreLeftOut() {
        var deep: Any = ["leaf": 1]
        for _ in 0..<3_000 { deep = ["k": deep] }
        let info: [AnyHashable: Any] = [
            "aps": ["alert": "hi", "mutable-content": 1], "custom": deep, "when": Date(), "list": [1, Date(), "x"],
            "rp": ["v": 1, "m": [["u": "https://cdn.example.com/a.jpg"]]],
        ]
        let content = ReceivedPayloadDecoder.decode(userInfo: info)
        #expect(content.media.map(\.url) == ["https://cdn.example.com/a.jpg"])
        #expect(JSONValue(foundation: info["list"]!) == [1, "x"])
    }

    /// Extremes in our own key: each is read or reported, never a trap; the valid media beside them is kept.
    @Test(arguments: [
        #"{"v":1e308,"m":[{"u":"https://a.example/x.jpg"}]}"#,
        #"{"v":-9223372036854775808,"m":[{"u":"https://a.example/x.jpg","c":[1e308,-1e308,1e308,1e308],"f":1e308}]}"#,
        #"{"v":1,"m":[{"u":"https://a.example/x.jpg","c":[0.1,0.1],"f":-5,"h":7}]}"#,
        #"{"v":1,"m":[{"u":"https://a.example/x.jpg","t":"\u0000\ud83d\ude00"}],"c":{"values":[1e308,1]}}"#,
        #"{"v":1,"m":[{"u":"https://a.example/x.jpg"}],"c":{"values":[1,2],"size":[9223372036854775807,-9223372036854775808],"scale":-1}}"#,
        #"{"v":1,"m":[{"u":"https://a.example/x.jpg"}],"r":123,"o":{"t":1e308,"b":[]}}"#,
    ])
    func extremesInOurKey(_ rp: String) throws {
        let payload = try JSONValue.parse(#"{"aps":{"alert":"x","mutable-content":1},"rp":"# + rp + "}")
        let content = ReceivedPayloadDecoder.decode(payload)
        #expect(content.media.first?.url == "https://a.example/x.jpg")
        #expect(content.chart == nil || content.chart!.validate().isValid)
    }

    @Test func thousandsOfMediaEntriesAndLongStrings() throws {
        let long = String(repeating: "a", count: 100_000)
        let media = (0..<5_000).map { i in JSONValue.object(["u": .string("https://a.example/\(i).jpg")]) }
        let payload: JSONValue = [
            "aps": ["alert": .string(long)], "rp": ["v": 1, "m": .array(media), "i": .string(long)],
        ]
        let content = ReceivedPayloadDecoder.decode(payload)
        #expect(!content.media.isEmpty)
    }
}
