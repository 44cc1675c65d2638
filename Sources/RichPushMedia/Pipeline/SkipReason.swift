import RichPushCore

/// Why a piece of media was not attached. `code` is stable (safe as a metric label); the description is for
/// people.
public enum SkipReason: Error, Sendable, Hashable, CustomStringConvertible {
    case badURL
    case insecureURL
    case unsupportedScheme(String)
    case httpStatus(Int)
    case tooManyRedirects(Int)
    case redirectLoop
    case insecureRedirect
    case tooLarge(kind: MediaKind?, bytes: Int, limit: Int)
    case unsupportedType(MediaType)
    case unknownType
    case emptyBody
    case timedOut
    case deadline
    case network(String)
    case stagingFailed(String)
    case limitReached(Int)
    /// The system refused the staged file (`UNNotificationAttachment`'s initializer threw).
    case refusedBySystem(String)

    public var code: String {
        switch self {
        case .badURL: return "bad-url"
        case .insecureURL: return "insecure-url"
        case .unsupportedScheme: return "unsupported-scheme"
        case .httpStatus: return "http-status"
        case .tooManyRedirects: return "too-many-redirects"
        case .redirectLoop: return "redirect-loop"
        case .insecureRedirect: return "insecure-redirect"
        case .tooLarge: return "too-large"
        case .unsupportedType: return "unsupported-type"
        case .unknownType: return "unknown-type"
        case .emptyBody: return "empty-body"
        case .timedOut: return "timed-out"
        case .deadline: return "deadline"
        case .network: return "network"
        case .stagingFailed: return "staging-failed"
        case .limitReached: return "attachment-limit"
        case .refusedBySystem: return "system-refused"
        }
    }

    public var description: String {
        switch self {
        case .badURL: return "not an absolute URL"
        case .insecureURL: return "plain http is not allowed (App Transport Security); use https or allow http"
        case .unsupportedScheme(let s): return "scheme '\(s)' cannot be downloaded"
        case .httpStatus(let s): return "the server answered HTTP \(s)"
        case .tooManyRedirects(let n): return "more than \(n) redirects"
        case .redirectLoop: return "the redirects lead in a circle"
        case .insecureRedirect: return "a redirect leads to plain http"
        case let .tooLarge(kind, bytes, limit):
            return "\(kind?.rawValue ?? "file") is over the \(limit)-byte limit (\(bytes)+ bytes)"
        case .unsupportedType(let t): return "\(t.displayName) is not a type Apple attaches"
        case .unknownType: return "the bytes are not a recognisable image, audio or video file"
        case .emptyBody: return "the response had no body"
        case .timedOut: return "the server stopped sending"
        case .deadline: return "not finished before the extension's deadline"
        case .network(let m): return "network error: \(m)"
        case .stagingFailed(let m): return "could not store the file: \(m)"
        case .limitReached(let n): return "only the first \(n) media are attached"
        case .refusedBySystem(let m): return "the system refused the attachment: \(m)"
        }
    }
}
