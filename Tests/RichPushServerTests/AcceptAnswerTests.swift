import Foundation
import RichPushCore
import Testing

@testable import RichPushServer

/// PostgreSQL's one-statement send to registered tokens stores an answer made before the devices are counted, with a
/// stand-in the database replaces by the count. The stand-in is used only where the answer shows the count and
/// nothing else in it looks like the stand-in: a caller's own text never has the count written into it (a send-only
/// key is not to learn how many devices an app has).
@Suite struct AcceptAnswerTests {
    static let (a, b) = (String(PostgresIntake.countMarks.0), String(PostgresIntake.countMarks.1))

    @Test func theCountIsPutWhereTheAnswerShowsIt() throws {
        let respond: (Int?) -> JSONValue = { n in ["id": "n1", "deliveries": n.map { .int(Int64($0)) } ?? .null] }
        let (answer, mark) = try #require(PostgresIntake.countTemplate(respond))
        #expect(mark == Self.a)
        #expect(PostgresIntake.placing("42", in: answer, for: Self.a) == respond(42).jsonString)
    }

    @Test func aCallersTextThatLooksLikeTheStandInIsNeverReplaced() throws {
        // The count not shown (a send-only key's answer) and the stand-in's digits in a warning the caller caused.
        let hidden: (Int?) -> JSONValue = { _ in
            ["deliveries": .null, "warnings": [["message": .string("media type \(Self.a) is not known")]]]
        }
        let (answer, mark) = try #require(PostgresIntake.countTemplate(hidden))
        #expect(mark == nil && answer == hidden(3).jsonString)
        // Shown, and the caller's text holds the digits too: not made this way at all.
        let both: (Int?) -> JSONValue = { n in
            ["deliveries": .int(Int64(n ?? 0)), "warnings": [["message": .string(Self.a)]]]
        }
        #expect(PostgresIntake.countTemplate(both) == nil)
        // The digits followed by a combining mark: one character to Swift's strings, the digits' bytes to the database.
        let combining: (Int?) -> JSONValue = { n in
            ["deliveries": .int(Int64(n ?? 0)), "warnings": [["message": .string(Self.a + "\u{301}")]]]
        }
        #expect(PostgresIntake.countTemplate(combining) == nil)
        // The other stand-in's digits in the caller's text: the swap check sees it is not the count's place alone.
        let other: (Int?) -> JSONValue = { n in
            ["deliveries": .int(Int64(n ?? 0)), "warnings": [["message": .string(Self.b)]]]
        }
        let found = PostgresIntake.countTemplate(other)
        #expect(found?.mark == Self.a)
        #expect(found.flatMap { PostgresIntake.placing("7", in: $0.answer, for: Self.a) } == other(7).jsonString)
    }

    @Test func anAnswerThatShowsTheCountOtherwiseIsNotMadeThisWay() {
        #expect(PostgresIntake.countTemplate { n in ["a": .int(Int64(n ?? 0)), "b": .int(Int64(n ?? 0))] } == nil)
        #expect(PostgresIntake.countTemplate { n in ["half": .int(Int64((n ?? 0) / 2))] } == nil)
        #expect(PostgresIntake.countTemplate { n in ["text": .string("\(n ?? 0) devices")] }?.mark == Self.a)
    }
}
