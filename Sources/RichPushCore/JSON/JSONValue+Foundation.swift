import Foundation

extension JSONValue {
    /// Converts what Foundation hands over (a notification's `userInfo`, `JSONSerialization` output).
    ///
    /// A value JSON cannot hold (a date, data, an arbitrary object) is `nil` on its own, so that a caller can report
    /// it; inside an object or array it is left out and the rest kept, and so are keys that are not strings.
    /// Containers nested deeper than ``maxFoundationDepth`` read as `null`.
    public init?(foundation value: Any) {
        self.init(foundation: value, depth: 0)
    }

    /// Containers nested deeper than this read as `null`: the system hands over any payload APNs accepted
    /// (up to 5 KB, so up to 2,500 levels), and a deep key that is not ours must not cost a stack overflow.
    public static let maxFoundationDepth = 64

    private init?(foundation value: Any, depth: Int) {
        // Exact Swift types first: NSNumber bridges 0 and 1 to Bool, so a cast alone cannot tell them apart.
        let type = Swift.type(of: value)
        if value is NSNull {
            self = .null
            return
        } else if let s = value as? String {
            self = .string(s)
            return
        } else if type == Bool.self, let b = value as? Bool {
            self = .bool(b)
            return
        } else if type == Int.self, let i = value as? Int {
            self = .int(Int64(i))
            return
        } else if type == Int64.self, let i = value as? Int64 {
            self = .int(i)
            return
        } else if type == Int32.self, let i = value as? Int32 {
            self = .int(Int64(i))
            return
        } else if type == Double.self, let d = value as? Double {
            self = d.isFinite ? .double(d) : .null
            return
        } else if type == Float.self, let f = value as? Float {
            self = f.isFinite ? .double(Double(f)) : .null
            return
        } else if let n = value as? NSNumber {
            let code = String(cString: n.objCType)
            if code == "c" || code == "B" {
                self = .bool(n.boolValue)
            } else if code == "f" || code == "d" {
                self = n.doubleValue.isFinite ? .double(n.doubleValue) : .null
            } else {
                self = .int(n.int64Value)
            }
            return
        }
        if value is [Any] || value is [AnyHashable: Any], depth >= Self.maxFoundationDepth {
            self = .null
            return
        }
        switch value {
        case let a as [Any]:
            var out: [JSONValue] = []
            out.reserveCapacity(a.count)
            // Inside a container, a value JSON cannot hold is left out rather than losing the whole payload.
            for element in a {
                if let v = JSONValue(foundation: element, depth: depth + 1) { out.append(v) }
            }
            self = .array(out)
        case let d as [AnyHashable: Any]:
            var out: [String: JSONValue] = [:]
            for (k, v) in d {
                guard let key = k.base as? String else { continue }
                if let converted = JSONValue(foundation: v, depth: depth + 1) { out[key] = converted }
            }
            self = .object(out)
        default:
            return nil
        }
    }

    /// The Foundation form (`[String: Any]`, `[Any]`, `String`, `NSNumber`...), for APIs such as `userInfo`.
    public var foundationValue: Any {
        switch self {
        case .null: return NSNull()
        case .bool(let b): return b
        case .int(let i): return Int(i)
        case .double(let d): return d
        case .string(let s): return s
        case .array(let a): return a.map(\.foundationValue)
        case .object(let o): return o.mapValues(\.foundationValue)
        }
    }
}
