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
        var o: [String: JSONValue] = ["name": .string(name), "project": .string(project), "message": message, "received_at": .double(receivedAt.timeIntervalSince1970)]
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
        var recorded: [RecordedFCMMessage] = []
        var recordedStart = 0
        var acceptedCount = 0
        var tokenExchanges = 0
        var errors: [String: Int] = [:]
        var faults: [(fault: FCMFault, remaining: Int?, rate: Double?)] = []
        var rng = SplitMix(seed: 0xFC3)
        var minute: Int64 = 0
        var projectCount: [String: Int] = [:]
        var deviceCount: [String: Int] = [:]
    }

    let data = NIOLockedValueBox(Data())
    let recordLimit: Int

    init(recordLimit: Int) { self.recordLimit = recordLimit }

    func nextFault() -> FCMFault? {
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

    func record(_ m: RecordedFCMMessage) {
        data.withLockedValue { d in
            d.acceptedCount += 1
            if d.recorded.count < recordLimit { d.recorded.append(m) } else {
                d.recorded[d.recordedStart] = m
                d.recordedStart = (d.recordedStart + 1) % recordLimit
            }
        }
    }

    func count(error: String) { data.withLockedValue { $0.errors[error, default: 0] += 1 } }
}
