import Foundation

/// The database behind the server: its stores, the intake that writes across them, and the fast paths only it can
/// take (a fan-out inside the database, group commit). The server holds one backend and never asks which it is.
///
/// `SQLiteBackend` is the embedded default; `MemoryBackend` is its twin for fast tests and behaves like it (a
/// registry audience is accepted with its fan-out pending, then completed; the conformance suite runs on both).
public protocol StorageBackend: Sendable {
    var store: any ServerStore { get }
    var registry: any DeviceRegistry { get }
    var queue: any DeliveryQueue { get }
    var intake: any NotificationIntake { get }

    /// Queues a delivery for every device of the audience, outside a notification's intake (tools and benchmarks);
    /// returns how many. Spread as the intake spreads (``Spread``).
    func fanOut(notificationID: String, appID: String, audience: Audience, notBefore: Date, expiresAt: Date?, spread: TimeInterval) async throws -> Int

    /// The deliveries each provider would get for the audience, without creating any (a dry run).
    func countByProvider(appID: String, audience: Audience) async throws -> [DeliveryProvider: Int]
}

/// A send spread over a window: of `count` deliveries from a start, the i-th is due `step × i` after it, the last
/// at the window's end, so that the media downloads they cause spread too.
public enum Spread {
    public static func step(_ window: TimeInterval, count: Int) -> TimeInterval {
        window > 0 && count > 1 ? window / Double(count - 1) : 0
    }
}
