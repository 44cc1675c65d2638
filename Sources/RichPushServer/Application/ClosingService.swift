import ServiceLifecycle

/// A part without a loop of its own that must be closed when the server stops (the database, the provider
/// clients, the sandbox): it waits for the group's shutdown, then closes. Its place in the ``ServiceGroup``'s list
/// sets when: the group shuts services down in reverse order, each after the one behind it has finished, so a
/// closer listed before the workers closes only once they have drained.
struct ClosingService: Service {
    let name: String
    let close: @Sendable () async -> Void

    func run() async throws {
        // Cancellation is a shutdown too (the task running the server was cancelled): close either way.
        try? await gracefulShutdown()
        await close()
    }
}
