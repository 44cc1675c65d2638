/// Reads typed fields out of a JSON object and records a located issue for each field that is of the
/// wrong type, so that decoding never throws on the first problem and never crashes on hostile input.
struct FieldReader {
    var report = ValidationReport()

    static func join(_ path: String, _ key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }

    mutating func object(_ value: JSONValue?, at path: String) -> [String: JSONValue]? {
        guard let value, !value.isNull else { return nil }
        guard case .object(let o) = value else {
            report.add(path, "type", "expected an object, found \(value.typeName)")
            return nil
        }
        return o
    }

    /// Flags keys outside `known`: a misspelt field is otherwise silently ignored.
    mutating func rejectUnknown(_ object: [String: JSONValue], known: Set<String>, at path: String) {
        for key in object.keys.sorted() where !known.contains(key) {
            report.add(Self.join(path, key), "unknown-field", "unknown field '\(key)'")
        }
    }

    mutating func string(_ object: [String: JSONValue], _ key: String, at path: String, allowEmpty: Bool = false) -> String? {
        guard let value = object[key], !value.isNull else { return nil }
        guard case .string(let s) = value else {
            report.add(Self.join(path, key), "type", "expected a string, found \(value.typeName)")
            return nil
        }
        if s.isEmpty && !allowEmpty {
            report.add(Self.join(path, key), "empty", "must not be empty")
            return nil
        }
        return s
    }

    mutating func bool(_ object: [String: JSONValue], _ key: String, at path: String) -> Bool? {
        guard let value = object[key], !value.isNull else { return nil }
        switch value {
        case .bool(let b): return b
        case .int(0): return false
        case .int(1): return true
        default:
            report.add(Self.join(path, key), "type", "expected a boolean, found \(value.typeName)")
            return nil
        }
    }

    mutating func double(_ object: [String: JSONValue], _ key: String, at path: String) -> Double? {
        guard let value = object[key], !value.isNull else { return nil }
        guard let d = value.doubleValue else {
            report.add(Self.join(path, key), "type", "expected a number, found \(value.typeName)")
            return nil
        }
        return d
    }

    mutating func int(_ object: [String: JSONValue], _ key: String, at path: String) -> Int64? {
        guard let value = object[key], !value.isNull else { return nil }
        guard let i = value.intValue else {
            report.add(Self.join(path, key), "type", "expected a whole number, found \(value.typeName == "a number" ? "a fraction" : value.typeName)")
            return nil
        }
        return i
    }

    mutating func strings(_ object: [String: JSONValue], _ key: String, at path: String) -> [String]? {
        guard let value = object[key], !value.isNull else { return nil }
        // A lone string where a list is expected is taken as a list of one.
        if case .string(let s) = value { return [s] }
        guard case .array(let a) = value else {
            report.add(Self.join(path, key), "type", "expected an array of strings, found \(value.typeName)")
            return nil
        }
        var out: [String] = []
        for (i, element) in a.enumerated() {
            if case .string(let s) = element { out.append(s) } else {
                report.add("\(Self.join(path, key))[\(i)]", "type", "expected a string, found \(element.typeName)")
            }
        }
        return out
    }
}
