/// An answer that breaks what a client expects from APNs or FCM, for testing that clients classify whatever
/// comes back into a retry decision, never crash, and bound what a response can make them hold.
public enum HostileAnswer: Sendable, Hashable {
    /// This status and these raw body bytes (garbage, JSON of the wrong types, an unknown reason…).
    case body(status: Int, bytes: [UInt8])
    /// A body of `bytes` bytes of JSON-looking filler (past any sane size).
    case huge(status: Int, bytes: Int)
    /// This status with one extra header, its value as given (a Retry-After of `1e400`, a header of 100 KB…).
    case header(status: Int, name: String, value: String)
    /// A `:status` that is not an HTTP status (`"abc"`, `"99"`, `"1000"`): an HTTP/2 protocol violation.
    case status(String)
    /// An informational answer (`103`) and then the end of the stream, with no final status.
    case informationalOnly

    func response(extraHeaders: [(String, String)]) -> EmulatorResponse {
        switch self {
        case let .body(status, bytes):
            return EmulatorResponse(
                status: status,
                headers: extraHeaders + [("content-type", "application/json")],
                body: bytes
            )
        case let .huge(status, count):
            let filler =
                Array(#"{"reason":""#.utf8) + [UInt8](repeating: UInt8(ascii: "x"), count: max(0, count - 14))
                + Array(#""}"#.utf8)
            return EmulatorResponse(
                status: status,
                headers: extraHeaders + [("content-type", "application/json")],
                body: filler
            )
        case let .header(status, name, value):
            return EmulatorResponse(
                status: status,
                headers: extraHeaders + [(name, value)],
                body: Array(#"{"reason":"TooManyRequests"}"#.utf8)
            )
        case .status(let text):
            var r = EmulatorResponse(status: 0, headers: extraHeaders)
            r.rawStatus = text
            return r
        case .informationalOnly:
            var r = EmulatorResponse(status: 103, headers: extraHeaders)
            r.endsAfterInformational = true
            return r
        }
    }
}
