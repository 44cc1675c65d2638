/// A parsed FCM condition such as `'stocks' in topics && ('news' in topics || !('tech' in topics))`.
public struct FCMCondition: Sendable, Hashable {
    /// The topics it names, in order of appearance.
    public var topics: [String]

    /// FCM accepts at most five topics in one condition.
    public static let maxTopics = 5

    public enum ParseError: Error, Sendable, Hashable, CustomStringConvertible {
        case syntax(String)
        public var description: String {
            switch self {
            case .syntax(let s): return s
            }
        }
    }

    public static func parse(_ text: String) throws(ParseError) -> FCMCondition {
        var p = Parser(chars: Array(text))
        try p.expression()
        p.skipSpaces()
        guard p.i == p.chars.count else { throw .syntax("unexpected '\(p.chars[p.i])' at position \(p.i)") }
        return FCMCondition(topics: p.topics)
    }

    private struct Parser {
        let chars: [Character]
        var i = 0
        var topics: [String] = []
        var depth = 0

        mutating func skipSpaces() { while i < chars.count, chars[i] == " " { i += 1 } }

        mutating func expression() throws(ParseError) {
            try term()
            while true {
                skipSpaces()
                if i + 1 < chars.count,
                    (chars[i] == "&" && chars[i + 1] == "&") || (chars[i] == "|" && chars[i + 1] == "|")
                {
                    i += 2
                    try term()
                } else {
                    return
                }
            }
        }

        mutating func term() throws(ParseError) {
            skipSpaces()
            guard i < chars.count else { throw .syntax("condition ends where a topic test was expected") }
            switch chars[i] {
            case "!":
                i += 1
                try term()
            case "(":
                depth += 1
                guard depth <= 20 else { throw .syntax("parentheses nested too deeply") }
                i += 1
                try expression()
                skipSpaces()
                guard i < chars.count, chars[i] == ")" else { throw .syntax("missing ')'") }
                i += 1
                depth -= 1
            case "'", "\"":
                let quote = chars[i]
                i += 1
                let start = i
                while i < chars.count, chars[i] != quote { i += 1 }
                guard i < chars.count else { throw .syntax("unterminated topic name") }
                let name = String(chars[start..<i])
                i += 1
                guard MessageValidator.isValidTopicName(name) else {
                    throw .syntax("'\(name)' is not a valid topic name")
                }
                skipSpaces()
                guard match("in") else { throw .syntax("expected 'in topics' after '\(name)'") }
                skipSpaces()
                guard match("topics") else { throw .syntax("expected 'topics' after 'in'") }
                topics.append(name)
            default:
                throw .syntax("unexpected '\(chars[i])' at position \(i)")
            }
        }

        mutating func match(_ word: String) -> Bool {
            let w = Array(word)
            guard i + w.count <= chars.count, Array(chars[i..<i + w.count]) == w else { return false }
            i += w.count
            return true
        }
    }
}
