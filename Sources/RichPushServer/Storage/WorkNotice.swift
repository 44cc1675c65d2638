import Foundation

/// The payload of the cluster's "deliveries were queued" notice (PostgreSQL's `NOTIFY` on the work channel): the
/// earliest time among the deliveries it announces. Foundation alone, so that the fuzzer builds it as it is
/// (Fuzz/Harnesses/WorkNoticeFuzz.swift).
public enum WorkNotice {
    /// The payload of a notice between nodes: the earliest time in seconds since 1970 with microseconds, or empty.
    public static func payload(earliest: Date?) -> String {
        guard let t = earliest?.timeIntervalSince1970, t.isFinite, (0...1e11).contains(t) else { return "" }
        return String(format: "%.6f", t)
    }

    /// The earliest time a notice's payload names: nil unless it is a number of seconds from 1970 to the year 5138
    /// (a payload is whatever any client of the database sent on the channel).
    public static func earliest(fromPayload payload: String) -> Date? {
        guard payload.utf8.count <= 32, payload.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2E }),
            let t = Double(payload), t.isFinite, (0...1e11).contains(t)
        else { return nil }
        return Date(timeIntervalSince1970: t)
    }
}
