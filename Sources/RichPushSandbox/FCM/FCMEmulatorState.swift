import Foundation
import NIOConcurrencyHelpers
import RichPushCore
import _CryptoExtras

/// A message the FCM emulator accepted.
public struct RecordedFCMMessage: Sendable {
    public var name: String
    public var project: String
    public var target: FCMTarget
    public var message: JSONValue
    public var receivedAt: Date

    public var json: JSONValue {
        var o: [String: JSONValue] = [
            "name": .string(name), "project": .string(project), "message": message,
            "received_at": .double(receivedAt.timeIntervalSince1970),
        ]
        switch target {
        case .token(let v): o["token"] = .string(v)
        case .topic(let v): o["topic"] = .string(v)
        case .condition(let v): o["condition"] = .string(v)
        }
        return .object(o)
    }
}

/// A misbehaviour the FCM emulator can be told to show.
public enum FCMFault: Sendable, Hashable {
    /// `429 QUOTA_EXCEEDED` with a `Retry-After`.
    case quotaExceeded(retryAfter: Int)
    /// `503 UNAVAILABLE`, optionally with a `Retry-After`.
    case unavailable(retryAfter: Int?)
    /// `500 INTERNAL`.
    case internalError
    case reset
    case stall
    case goAway
    /// An answer FCM would never give (garbage, huge, malformed headers, an invalid status).
    case hostile(HostileAnswer)
}

final class FCMEmulatorState: Sendable {
    struct Account {
        var publicKey: _RSA.Signing.PublicKey
        var projects: Set<String>
    }

    struct Device {
        var project: String
        var removed: Bool
    }

    struct Data {
        var accounts: [String: Account] = [:]
        var accessTokens: [String: (email: String, expires: Date)] = [:]
        var devices: [String: Device] = [:]
        var records: RecordRing<RecordedFCMMessage>
        var tokenExchanges = 0
        var errors: [String: Int] = [:]
        var faults = FaultPlan<FCMFault>()
        var minute: Int64 = 0
        var projectCount: [String: Int] = [:]
        var deviceCount: [String: Int] = [:]
    }

    let data: NIOLockedValueBox<Data>

    init(recordLimit: Int) { data = NIOLockedValueBox(Data(records: RecordRing(capacity: recordLimit))) }

    func nextFault() -> FCMFault? { data.withLockedValue { $0.faults.next() } }

    func record(_ m: RecordedFCMMessage) { data.withLockedValue { $0.records.append(m) } }

    func count(error: String) { data.withLockedValue { $0.errors[error, default: 0] += 1 } }
}
