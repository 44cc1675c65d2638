import Crypto
import Foundation
import NIOConcurrencyHelpers
import RichPushCore

/// A notification the APNs emulator accepted.
public struct RecordedAPNsNotification: Sendable {
    public var apnsID: String
    public var deviceToken: String
    public var topic: String
    public var pushType: String
    public var priority: Int
    public var expiration: Int64?
    public var collapseID: String?
    public var payload: [UInt8]
    public var receivedAt: Date
    /// A broadcast's channel (its `deviceToken` is empty).
    public var channelID: String? = nil

    public var payloadJSON: JSONValue? { try? JSONValue.parse(payload) }

    public var json: JSONValue {
        var o: [String: JSONValue] = [
            "apns_id": .string(apnsID), "token": .string(deviceToken), "topic": .string(topic),
            "push_type": .string(pushType),
            "priority": .int(Int64(priority)), "received_at": .double(receivedAt.timeIntervalSince1970),
            "payload": payloadJSON ?? .null,
        ]
        if let e = expiration { o["expiration"] = .int(e) }
        if let c = collapseID { o["collapse_id"] = .string(c) }
        if let c = channelID { o["channel_id"] = .string(c) }
        return .object(o)
    }
}

/// A misbehaviour the emulator can be told to show.
public enum APNsFault: Sendable, Hashable {
    /// Answer with this status and reason (`429 TooManyRequests`, `500 InternalServerError`, `503 ServiceUnavailable`…).
    case status(Int, reason: String, retryAfter: Int? = nil)
    /// GOAWAY with `{"reason": …}`, then close. The GOAWAY's last stream id is the one before the request's (the
    /// request was not processed, and may be sent again) or, with `processed`, the request's own (it was, and must not
    /// be: its answer was lost with the connection).
    case goAway(reason: String, processed: Bool = false)
    /// A graceful GOAWAY (NO_ERROR) naming the request the last processed: it is answered 300 ms later, the requests
    /// after it are not processed, and the connection closes once its answer is written (a server shutting down).
    case drain(reason: String)
    /// Reset the connection.
    case reset
    /// Never answer.
    case stall
    /// Reset the stream with REFUSED_STREAM (not processed; a client should send it again).
    case refuseStream
    /// Lower the connection's stream limit to this, as APNs does after a rejection, then answer normally.
    case lowerStreamLimit(Int)
    /// An answer APNs would never give (garbage, huge, malformed headers, an invalid status).
    case hostile(HostileAnswer)
}

/// The emulator's state shared by all connections: keys, device registry, recorded notifications, faults.
final class APNsEmulatorState: Sendable {
    struct Key {
        var teamID: String
        var publicKey: P256.Signing.PublicKey
        /// nil: valid in both environments.
        var environment: APNsEmulator.Environment?
    }

    struct Device {
        var topic: String
        var environment: APNsEmulator.Environment
        var unregisteredAt: Date?
    }

    struct Data {
        var keys: [String: Key] = [:]
        var devices: [String: Device] = [:]
        var records: RecordRing<RecordedAPNsNotification>
        var rejected: [String: Int] = [:]
        var faults = FaultPlan<APNsFault>()
        var live = LiveActivityModel()
    }

    let data: NIOLockedValueBox<Data>

    init(recordLimit: Int) {
        data = NIOLockedValueBox(Data(records: RecordRing(capacity: recordLimit, key: { $0.deviceToken })))
    }

    func nextFault() -> APNsFault? { data.withLockedValue { $0.faults.next() } }

    func record(_ n: RecordedAPNsNotification) { data.withLockedValue { $0.records.append(n) } }

    func reject(_ reason: String) { data.withLockedValue { $0.rejected[reason, default: 0] += 1 } }
}
