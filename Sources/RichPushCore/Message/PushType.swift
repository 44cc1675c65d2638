/// The `apns-push-type` values APNs knows.
public enum PushType: String, Sendable, Hashable, CaseIterable {
    case alert, background, location, voip, complication, fileprovider, mdm, liveactivity, pushtotalk, widgets, controls

    /// What APNs expects after the bundle id in `apns-topic`.
    public var topicSuffix: String {
        switch self {
        case .alert, .background, .mdm: return ""
        case .location: return ".location-query"
        case .voip: return ".voip"
        case .complication: return ".complication"
        case .fileprovider: return ".pushkit.fileprovider"
        case .liveactivity: return ".push-type.liveactivity"
        case .pushtotalk: return ".voip-ptt"
        case .widgets: return ".push-type.widgets"
        case .controls: return ".push-type.controls"
        }
    }

    /// APNs' payload limit for this push type, in bytes.
    public var payloadLimit: Int { self == .voip ? 5120 : 4096 }
}

/// Delivery priority, rendered as `apns-priority` 10/5/1 and FCM `HIGH`/`NORMAL`.
public enum Priority: String, Sendable, Hashable, CaseIterable {
    /// Deliver now, waking the device (APNs 10, FCM HIGH).
    case high
    /// Deliver with the device's power in mind (APNs 5, FCM NORMAL).
    case normal
    /// Never wake the device (APNs 1, FCM NORMAL).
    case low

    public var apnsValue: Int {
        switch self {
        case .high: return 10
        case .normal: return 5
        case .low: return 1
        }
    }

    public init?(apnsValue: Int) {
        switch apnsValue {
        case 10: self = .high
        case 5: self = .normal
        case 1: self = .low
        default: return nil
        }
    }
}

public enum InterruptionLevel: String, Sendable, Hashable, CaseIterable {
    case passive, active
    case timeSensitive = "time-sensitive"
    case critical
}
