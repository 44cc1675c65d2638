import Foundation

/// Calls a content handler exactly once, whichever of the pipeline's completion and the system's expiry
/// call comes first, and remembers the attachments staged so far so that expiry can still deliver them.
final class DeliveryGate: @unchecked Sendable {
    // @unchecked: all mutable state is read and written under `lock`. (The standard library's Mutex would
    // need iOS 18; extensions must run on older systems.)
    private let lock = NSLock()
    private var delivered = false
    private var staged: [Int: StagedAttachment] = [:]
    private var skipped: [Int: SkippedMedia] = [:]
    /// Dropped once called, so that what it holds (the extension object, in the adapter) is let go.
    private var handler: (@Sendable (EnrichedNotification) -> Void)?

    init(handler: @escaping @Sendable (EnrichedNotification) -> Void) { self.handler = handler }

    func record(_ attachment: StagedAttachment, at index: Int) { lock.withLock { staged[index] = attachment } }
    func record(_ skip: SkippedMedia, at index: Int) { lock.withLock { skipped[index] = skip } }

    /// What has been staged so far, in payload order.
    var snapshot: (attached: [StagedAttachment], skipped: [Int: SkippedMedia]) {
        lock.withLock { (staged.sorted { $0.key < $1.key }.map(\.value), skipped) }
    }

    var isDelivered: Bool { lock.withLock { delivered } }

    /// Delivers unless something already has; returns whether this call did.
    @discardableResult
    func deliver(
        _ make: (_ attached: [StagedAttachment], _ skipped: [Int: SkippedMedia]) -> EnrichedNotification
    ) -> Bool {
        let call: (EnrichedNotification, @Sendable (EnrichedNotification) -> Void)? = lock.withLock {
            guard !delivered, let handler else { return nil }
            delivered = true
            self.handler = nil
            return (make(staged.sorted { $0.key < $1.key }.map(\.value), skipped), handler)
        }
        guard let (notification, handler) = call else { return false }
        handler(notification)
        return true
    }
}
