import RichPushCore
import Testing

/// What a whole-number field says of a number it cannot take: a fraction is the wrong type; a whole number past
/// JSON's exact integers (±9e15), which arrives as a double, is out of range (it once read "found a fraction").
@Suite struct FieldReaderTests {
    @Test func aHugeWholeNumberIsOutOfRangeAndAFractionIsTheWrongType() {
        var r = FieldReader(strict: true)
        let o: [String: JSONValue] = [
            "ok": .int(3), "big": .double(1e29), "negative": .double(-9.3e18), "fraction": .double(1.5),
            "text": .string("3"),
        ]
        #expect(r.int(o, "ok", at: "") == 3)
        for key in ["big", "negative", "fraction", "text"] { #expect(r.int(o, key, at: "") == nil) }
        #expect(
            r.report.issues.map { "\($0.path):\($0.rule)" } == [
                "big:range", "negative:range", "fraction:type", "text:type",
            ]
        )
    }
}
