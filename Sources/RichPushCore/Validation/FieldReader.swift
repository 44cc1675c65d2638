/// Reads typed fields out of a JSON object and records a located issue for each field that is of the
/// wrong type, so that decoding never throws on the first problem and never crashes on hostile input.
/// The message reader and the server's request bodies share it.
public struct FieldReader {
    public var report = ValidationReport()
    /// Request bodies, whose schema has no nulls and only `true`/`false` booleans: a field given as `null` is
    /// refused, and so are 0 or 1 for a boolean and a string for a list. Otherwise (payloads read on the device, messages read by the
    /// command line) `null` is a missing field, 0/1 are read as booleans and a lone string as a list of one.
    public var strict: Bool

    /// Refuses text holding U+0000: the values become database columns, which cannot keep it (PostgreSQL refuses it),
    /// and no token, tag or name has a use for it. (A message's text is stored as JSON, escaped, and left alone.)
    public var refusesNUL: Bool

    public init(strict: Bool = false, refusesNUL: Bool = false) {
        self.strict = strict
        self.refusesNUL = refusesNUL
    }

    /// A field's value when present. `null` counts as absent, or is reported when ``strict``.
    public mutating func present(_ value: JSONValue?, at path: String) -> JSONValue? {
        guard let value else { return nil }
        if value.isNull {
            if strict { report.add(path, "type", "null is not a value here; leave the field out instead") }
            return nil
        }
        return value
    }

    public static func join(_ path: String, _ key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }

    public mutating func object(_ value: JSONValue?, at path: String) -> [String: JSONValue]? {
        guard let value = present(value, at: path) else { return nil }
        guard case .object(let o) = value else {
            report.add(path, "type", "expected an object, found \(value.typeName)")
            return nil
        }
        return o
    }

    /// Flags keys outside `known`: a misspelt field is otherwise silently ignored. At most
    /// ``maxUnknownNamed`` are named one by one, and the rest in one issue: a body of a hundred thousand made-up
    /// keys gets an answer of a few lines, not one ten times its size.
    public mutating func rejectUnknown(_ object: [String: JSONValue], known: Set<String>, at path: String) {
        let unknown = object.keys.filter { !known.contains($0) }
        guard !unknown.isEmpty else { return }
        let named =
            unknown.count <= Self.maxUnknownNamed
            ? unknown.sorted() : Array(unknown.sorted().prefix(Self.maxUnknownNamed))
        // The key is named at most 100 characters long, in the path too: a body's made-up key of 200,000
        // characters came back whole.
        for key in named {
            let shown = String(key.prefix(100))
            report.add(Self.join(path, shown), "unknown-field", "unknown field '\(shown)'")
        }
        if unknown.count > named.count {
            report.add(
                path,
                "unknown-field",
                "\(unknown.count - named.count) more unknown fields\(path.isEmpty ? "" : " in \(path)") are not listed"
            )
        }
    }

    /// How many unknown fields of one object are named one by one.
    public static let maxUnknownNamed = 20

    public mutating func string(
        _ object: [String: JSONValue],
        _ key: String,
        at path: String,
        allowEmpty: Bool = false
    ) -> String? {
        guard let value = present(object[key], at: Self.join(path, key)) else { return nil }
        guard case .string(let s) = value else {
            report.add(Self.join(path, key), "type", "expected a string, found \(value.typeName)")
            return nil
        }
        if s.isEmpty && !allowEmpty {
            report.add(Self.join(path, key), "empty", "must not be empty")
            return nil
        }
        guard admits(s, at: Self.join(path, key)) else { return nil }
        return s
    }

    /// Whether `s` may be read (see ``refusesNUL``); reports it when not.
    mutating func admits(_ s: String, at field: String) -> Bool {
        guard refusesNUL, s.unicodeScalars.contains("\u{0}") else { return true }
        report.add(field, "nul", "text may not hold the NUL character (U+0000)")
        return false
    }

    public mutating func bool(_ object: [String: JSONValue], _ key: String, at path: String) -> Bool? {
        guard let value = present(object[key], at: Self.join(path, key)) else { return nil }
        switch value {
        case .bool(let b): return b
        case .int(0) where !strict: return false
        case .int(1) where !strict: return true
        default:
            report.add(Self.join(path, key), "type", "expected a boolean, found \(value.typeName)")
            return nil
        }
    }

    public mutating func double(_ object: [String: JSONValue], _ key: String, at path: String) -> Double? {
        guard let value = present(object[key], at: Self.join(path, key)) else { return nil }
        guard let d = value.doubleValue else {
            report.add(Self.join(path, key), "type", "expected a number, found \(value.typeName)")
            return nil
        }
        return d
    }

    public mutating func int(_ object: [String: JSONValue], _ key: String, at path: String) -> Int64? {
        guard let value = present(object[key], at: Self.join(path, key)) else { return nil }
        guard let i = value.intValue else {
            // A whole number past ±9e15 (JSON's exact integers): out of every field's range, not a fraction.
            if case .double(let d) = value, d.isFinite, d.rounded() == d {
                report.add(Self.join(path, key), "range", "a whole number far outside this field's range")
                return nil
            }
            report.add(
                Self.join(path, key),
                "type",
                "expected a whole number, found \(value.typeName == "a number" ? "a fraction" : value.typeName)"
            )
            return nil
        }
        return i
    }

    public mutating func strings(_ object: [String: JSONValue], _ key: String, at path: String) -> [String]? {
        guard let value = present(object[key], at: Self.join(path, key)) else { return nil }
        // A lone string where a list is expected is taken as a list of one.
        if case .string(let s) = value, !strict { return [s] }
        guard case .array(let a) = value else {
            report.add(Self.join(path, key), "type", "expected an array of strings, found \(value.typeName)")
            return nil
        }
        var out: [String] = []
        for (i, element) in a.enumerated() {
            if case .string(let s) = element {
                if admits(s, at: "\(Self.join(path, key))[\(i)]") { out.append(s) }
            } else {
                report.add("\(Self.join(path, key))[\(i)]", "type", "expected a string, found \(element.typeName)")
            }
        }
        return out
    }

    /// A string of `lengths` characters (Unicode scalars, as a JSON schema's maxLength counts them) matching `rule` when given; a
    /// missing value is reported when `required`.
    public mutating func text(
        _ object: [String: JSONValue],
        _ key: String,
        at path: String,
        required: Bool = false,
        lengths: ClosedRange<Int> = 1...200,
        shape: (rule: String, message: String, test: (String) -> Bool)? = nil
    ) -> String? {
        let field = Self.join(path, key)
        guard let value = present(object[key], at: field) else {
            if required && (object[key] == nil || !strict) { report.add(field, "required", "\(key) is required") }
            return nil
        }
        guard case .string(let s) = value else {
            report.add(field, "type", "expected a string, found \(value.typeName)")
            return nil
        }
        guard lengths.contains(s.unicodeScalars.count) else {
            report.add(
                field,
                s.isEmpty ? "empty" : "length",
                "\(key) is \(lengths.lowerBound) to \(lengths.upperBound) characters"
            )
            return nil
        }
        guard admits(s, at: field) else { return nil }
        if let shape, !shape.test(s) {
            report.add(field, shape.rule, shape.message)
            return nil
        }
        return s
    }

    /// The shape of a label people read (an app's name, a webhook's description): no control characters
    /// (U+0000–U+001F, U+007F–U+009F), which would break the console's lines and the log lines that quote it; no line
    /// or paragraph separator (U+2028, U+2029), which break lines too; and no directional embedding, override or
    /// isolate (U+202A–U+202E, U+2066–U+2069), which make a label read as other text than it holds (Unicode
    /// Standard Annex #9, 2.1–2.5). The right-to-left and left-to-right marks stay: names in Arabic and Hebrew use
    /// them.
    public static var label: (rule: String, message: String, test: (String) -> Bool) {
        (
            "control-character",
            "may not hold control characters (U+0000 to U+001F, U+007F to U+009F: a line break, a tab or an escape), "
                + "line or paragraph separators (U+2028, U+2029) or direction overrides (U+202A to U+202E, "
                + "U+2066 to U+2069)",
            { s in !s.unicodeScalars.contains { isRefusedInLabels($0.value) } }
        )
    }

    static func isRefusedInLabels(_ v: UInt32) -> Bool {
        v < 0x20 || (0x7F...0x9F).contains(v) || v == 0x2028 || v == 0x2029 || (0x202A...0x202E).contains(v)
            || (0x2066...0x2069).contains(v)
    }

    /// A list of at most `maxCount` strings, each of `lengths` characters; every bad element is named.
    public mutating func texts(
        _ object: [String: JSONValue],
        _ key: String,
        at path: String,
        maxCount: Int,
        lengths: ClosedRange<Int> = 1...200,
        shape: (rule: String, message: String, test: (String) -> Bool)? = nil
    ) -> [String]? {
        let field = Self.join(path, key)
        guard let value = present(object[key], at: Self.join(path, key)) else { return nil }
        guard case .array(let a) = value else {
            report.add(field, "type", "expected an array of strings, found \(value.typeName)")
            return nil
        }
        guard a.count <= maxCount else {
            report.add(field, "max-items", "at most \(maxCount) items")
            return nil
        }
        var out: [String] = []
        for (i, element) in a.enumerated() {
            guard case .string(let s) = element else {
                report.add("\(field)[\(i)]", "type", "expected a string, found \(element.typeName)")
                continue
            }
            guard lengths.contains(s.unicodeScalars.count) else {
                report.add(
                    "\(field)[\(i)]",
                    s.isEmpty ? "empty" : "length",
                    "each is \(lengths.lowerBound) to \(lengths.upperBound) characters"
                )
                continue
            }
            guard admits(s, at: "\(field)[\(i)]") else { continue }
            if let shape, !shape.test(s) {
                report.add("\(field)[\(i)]", shape.rule, shape.message)
                continue
            }
            out.append(s)
        }
        return out
    }

    /// One of the raw values of `E`.
    public mutating func choice<E: RawRepresentable & CaseIterable>(
        _ object: [String: JSONValue],
        _ key: String,
        at path: String,
        required: Bool = false,
        _ type: E.Type
    ) -> E? where E.RawValue == String {
        choice(object, key, at: path, required: required, among: E.allCases.map(\.rawValue)).flatMap(E.init(rawValue:))
    }

    /// One of the strings `allowed`.
    public mutating func choice(
        _ object: [String: JSONValue],
        _ key: String,
        at path: String,
        required: Bool = false,
        among allowed: [String]
    ) -> String? {
        let field = Self.join(path, key)
        guard let value = present(object[key], at: field) else {
            if required && (object[key] == nil || !strict) { report.add(field, "required", "\(key) is required") }
            return nil
        }
        guard let s = value.stringValue, allowed.contains(s) else {
            report.add(field, "enum", "\(key) is one of \(allowed.joined(separator: ", "))")
            return nil
        }
        return s
    }
}
