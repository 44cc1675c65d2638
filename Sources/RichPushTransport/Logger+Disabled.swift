import Logging

extension Logger {
    /// A logger that says nothing: the default of the clients, the transport and the sandbox, so that a library
    /// prints nothing its user did not ask for. Pass a logger to hear them (the server passes its own).
    public static let disabled = Logger(label: "richpush.disabled") { _ in SwiftLogNoOpLogHandler() }
}
