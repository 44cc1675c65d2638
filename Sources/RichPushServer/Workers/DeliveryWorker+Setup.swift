import Foundation
import Logging

/// Reads each delivery's app and message. Failures are logged where they happen, with the id they concern; the
/// delivery itself then ends with the sender's reason (no app, no message) and is retried by the queue's policy.
func deliverySender(
    store: any ServerStore,
    providers: Providers,
    receipts: DeviceReceipts?,
    logger: Logger
) -> ProviderDeliverySender {
    ProviderDeliverySender(
        providers: providers,
        receipts: receipts,
        logger: logger,
        app: { id in
            do { return try await store.app(id: id) } catch {
                logger.error("could not read the app", metadata: ["app_id": .string(id), "error": .string("\(error)")])
                throw error
            }
        },
        message: { id in
            do { return try await store.message(id: id) } catch {
                logger.error(
                    "could not read the message",
                    metadata: ["notification_id": .string(id), "error": .string("\(error)")]
                )
                throw error
            }
        }
    )
}

/// `lanes` workers share the node's sends in flight; each claims and settles its own. They share one admission:
/// the bounds per app and per push service origin, and the circuits, are the node's. Leases name the node that
/// holds them (several nodes share a PostgreSQL queue).
func deliveryWorkers(
    _ config: ServerConfiguration,
    nodeID: String,
    backend: any StorageBackend,
    sender: ProviderDeliverySender,
    admission: DeliveryAdmission,
    metrics: ServerMetrics,
    minutes: MinuteCounter? = nil,
    logger: Logger
) -> [DeliveryWorker] {
    let registry = backend.registry
    let lanes = max(1, min(config.lanes, config.concurrency))
    return (1...lanes).map { lane in
        DeliveryWorker(
            configuration: .init(
                owner: "\(nodeID)/w\(lane)",
                batchSize: config.batchSize,
                concurrency: config.concurrency / lanes + (lane <= config.concurrency % lanes ? 1 : 0),
                lease: config.leaseSeconds
            ),
            queue: backend.queue,
            sender: sender,
            admission: admission,
            metrics: metrics,
            health: backend.health,
            updates: backend.updates,
            minutes: minutes,
            logger: logger,
            prune: { d, _ in
                // A topic or a condition has no device to prune.
                guard let token = d.target.token else { return }
                do { _ = try await registry.prune(appID: d.appID, token: token, invalidSince: nil) } catch {
                    logger.error(
                        "could not prune a gone token",
                        metadata: ["delivery_id": .string("\(d.id)"), "error": .string("\(error)")]
                    )
                }
            }
        )
    }
}
