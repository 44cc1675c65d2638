import Foundation
import Testing

@testable import RichPushCore

@Suite struct JSONTests {
    @Test func roundTripsEveryKind() throws {
        let text = #"{"a":[1,-2,3.5,1e-7,true,false,null],"b":{"c":"x\"y\\z\n\u0001é😀"},"d":""}"#
        let v = try JSONValue.parse(text)
        #expect(v["a"]?.arrayValue?.count == 7)
        #expect(v["b"]?["c"] == .string("x\"y\\z\n\u{1}é😀"))
        #expect(try JSONValue.parse(v.serialized()) == v)
        #expect(try JSONValue.parse(v.prettyPrinted()) == v)
    }

    @Test func keepsIntegersApartFromDoubles() throws {
        let v = try JSONValue.parse("[1, 1.0, 1.5, 9007199254740993]")
        #expect(v.arrayValue?[0] == .int(1))
        if case .double = v.arrayValue?[1] {} else { Issue.record("1.0 should stay a double") }
        #expect(v.arrayValue?[3] == .int(9_007_199_254_740_993))
        #expect(JSONValue.array([.int(1), .double(2.5), .double(3)]).jsonString == "[1,2.5,3]")
    }

    @Test func serializesDeterministicallyWithSortedKeysAndUnescapedSlashes() {
        let v: JSONValue = ["z": 1, "a": ["url": "https://x/y"], "m": "é"]
        #expect(v.jsonString == #"{"a":{"url":"https://x/y"},"m":"é","z":1}"#)
        #expect(v.serializedSize == v.jsonString.utf8.count)
    }

    @Test func decodesSurrogatePairs() throws {
        #expect(try JSONValue.parse(#""\ud83d\ude00""#) == .string("😀"))
        #expect(throws: JSONSyntaxError.self) { try JSONValue.parse(#""\ud83d""#) }
        #expect(throws: JSONSyntaxError.self) { try JSONValue.parse(#""\ude00""#) }
    }

    @Test(arguments: [
        "", "{", "[1,]", "{\"a\":1,}", "01", "1.", "-", "tru", "\"a", "{\"a\" 1}", "[1 2]", "\"\u{1}\"", "1 2", "{1:2}",
        "\"\\x\"", "nul", "[", "1e", "NaN", "Infinity",
    ])
    func rejectsMalformedInput(_ text: String) {
        #expect(throws: JSONSyntaxError.self) { try JSONValue.parse(text) }
    }

    @Test func rejectsDeepNestingInsteadOfOverflowingTheStack() {
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect(throws: JSONSyntaxError.self) { try JSONValue.parse(deep) }
    }

    @Test func repeatedKeysKeepTheLastValue() throws {
        #expect(try JSONValue.parse(#"{"a":1,"a":2}"#)["a"] == .int(2))
    }

    @Test func invalidUTF8IsAnErrorNotACrash() {
        #expect(throws: JSONSyntaxError.self) { try JSONValue.parse([0x22, 0xFF, 0xFE, 0x22]) }
    }

    @Test func readsFoundationValuesWithoutMistakingNumbersForBooleans() throws {
        let data = Data(#"{"b":true,"n":1,"z":0,"d":2.5,"s":"x","a":[null]}"#.utf8)
        let any = try JSONSerialization.jsonObject(with: data)
        let v = try #require(JSONValue(foundation: any))
        #expect(v["b"] == .bool(true))
        #expect(v["n"] == .int(1))
        #expect(v["z"] == .int(0))
        #expect(v["d"] == .double(2.5))
        #expect(v["a"] == [nil])
        let swiftValues: [AnyHashable: Any] = ["t": true, "i": 1, "f": Float(1.5), "x": Date()]
        #expect(JSONValue(foundation: ["t": true, "i": 1] as [String: Any])?["t"] == .bool(true))
        // A Date has no JSON form: on its own it is nil; inside a container it is left out, the rest kept.
        #expect(JSONValue(foundation: Date()) == nil)
        #expect(JSONValue(foundation: swiftValues) == ["t": true, "i": 1, "f": 1.5])
        #expect(JSONValue(foundation: Double.nan) == .null)
    }
}
