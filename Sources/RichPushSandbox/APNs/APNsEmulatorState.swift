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

    public var payloadJSON: JSONValue? { try? JSONValue.parse(payload) }

    public var json: JSONValue {
        var o: [String: JSONValue] = [
            "apns_id": .string(apnsID), "token": .string(deviceToken), "topic": .string(topic), "push_type": .string(pushType),
            "priority": .int(Int64(priority)), "received_at": .double(receivedAt.timeIntervalSince1970), "payload": payloadJSON ?? .null,
        ]
        if let e = expiration { o["expiration"] = .int(e) }
        if let c = collapseID { o["collapse_id"] = .string(c) }
        return .object(o)
    }
}

/// A misbehaviour the emulator can be told to show.
public enum APNsFault: Sendable, Hashable {
    /// Answer with this status and reason (`429 TooManyRequests`, `500 InternalServerError`, `503 ServiceUnavailable`…).
    case status(Int, reason: String, retryAfter: Int? = nil)
    /// GOAWAY with `{"reason": …}`, leaving the request unprocessed, then close.
    case goAway(reason: String)
    /// Reset the connection.
    case reset
    /// Never answer.
    case stall
    /// Reset the stream with REFUSED_STREAM (not processed; a client should send it again).
    case refuseStream
    /// Lower the connection's stream limit to this, as APNs does after a rejection, then answer normally.
    case lowerStreamLimit(Int)
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

    struct FaultRule {
        var fault: APNsFault
        var remaining: Int?
        var rate: Double?
    }

    struct Data {
        var keys: [String: Key] = [:]
        var devices: [String: Device] = [:]
        var recorded: [RecordedAPNsNotification] = []
        var recordedStart = 0
        var acceptedCount = 0
        var rejected: [String: Int] = [:]
        var faults: [FaultRule] = []
        var rng = SplitMix(seed: 0x5EED)
    }

    let data = NIOLockedValueBox(Data())
    let recordLimit: Int

    init(recordLimit: Int) { self.recordLimit = recordLimit }

    func nextFault() -> APNsFault? {
        data.withLockedValue { d in
            for i in d.faults.indices {
                if let rate = d.faults[i].rate {
                    if d.rng.nextDouble() < rate { return d.faults[i].fault }
                    continue
                }
                if let n = d.faults[i].remaining, n > 0 {
                    d.faults[i].remaining = n - 1
                    let f = d.faults[i].fault
                    if n == 1 { d.faults.remove(at: i) }
                    return f
                }
            }
            return nil
        }
    }

    func record(_ n: RecordedAPNsNotification) {
        data.withLockedValue { d in
            d.acceptedCount += 1
            if d.recorded.count < recordLimit {
                d.recorded.append(n)
            } else {
                d.recorded[d.recordedStart] = n  // a ring: the newest replace the oldest
                d.recordedStart = (d.recordedStart + 1) % recordLimit
            }
        }
    }

    func reject(_ reason: String) { data.withLockedValue { $0.rejected[reason, default: 0] += 1 } }
}

/// A small deterministic generator for fault rates.
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func nextDouble() -> Double { Double(next() >> 11) / Double(1 << 53) }
}
