/// One problem found in a message or a request: where, which rule, and what to do about it.
///
/// `rule` is a stable code (`"https-required"`, `"payload-too-large"`…) that programs may match on;
/// `message` is for people and may change wording between releases.
public struct ValidationIssue: Sendable, Hashable, CustomStringConvertible {
    public enum Severity: String, Sendable, Hashable {
        /// The message cannot be sent as it is.
        case error
        /// The message can be sent, but something will probably not work as intended.
        case warning
    }

    /// A field path such as `media[0].url` or `targets.topic`; empty for the message as a whole.
    public var path: String
    public var rule: String
    public var message: String
    public var severity: Severity
    /// For a media URL's issue: the URL as the sender wrote it, and the one fetched when it differs.
    public var url: String?
    public var fetched: String?

    public init(
        path: String,
        rule: String,
        message: String,
        severity: Severity = .error,
        url: String? = nil,
        fetched: String? = nil
    ) {
        self.path = path
        self.rule = rule
        self.message = message
        self.severity = severity
        self.url = url
        self.fetched = fetched
    }

    public var description: String {
        "\(severity.rawValue): \(path.isEmpty ? "(message)" : path): \(message) [\(rule)]"
    }

    public var json: JSONValue {
        var o: [String: JSONValue] = [
            "path": .string(path), "rule": .string(rule), "message": .string(message),
            "severity": .string(severity.rawValue),
        ]
        if let url { o["url"] = .string(url) }
        if let fetched { o["fetched"] = .string(fetched) }
        return .object(o)
    }
}

/// Every problem found at once, so that a user fixes a message in one round.
public struct ValidationReport: Sendable, Hashable, Error, CustomStringConvertible {
    public var issues: [ValidationIssue]

    public init(issues: [ValidationIssue] = []) { self.issues = issues }

    public var errors: [ValidationIssue] { issues.filter { $0.severity == .error } }
    public var warnings: [ValidationIssue] { issues.filter { $0.severity == .warning } }
    /// True when nothing stops the message from being sent (warnings allowed).
    public var isValid: Bool { errors.isEmpty }

    public mutating func add(
        _ path: String,
        _ rule: String,
        _ message: String,
        _ severity: ValidationIssue.Severity = .error
    ) {
        issues.append(ValidationIssue(path: path, rule: rule, message: message, severity: severity))
    }

    public mutating func merge(_ other: ValidationReport) { issues.append(contentsOf: other.issues) }

    public var description: String { issues.map(\.description).joined(separator: "\n") }

    public var json: JSONValue {
        ["valid": .bool(isValid), "issues": .array(issues.map(\.json))]
    }
}
