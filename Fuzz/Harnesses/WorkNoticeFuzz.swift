// libFuzzer harness: bytes as the payload of the cluster's work notice (any client of the database may send on its
// channel). A payload read as a time must be one in range, and write back to the same time; eight bytes as a time's
// bits must write as a payload that reads back, or as none. Built by Scripts/fuzz-device with the codec's own source
// (Sources/RichPushServer/Storage/WorkNotice.swift).
import Foundation

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzWorkNotice(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    let text = String(decoding: bytes, as: UTF8.self)
    if let t = WorkNotice.earliest(fromPayload: text) {
        let s = t.timeIntervalSince1970
        precondition(s.isFinite && s >= 0 && s <= 1e11, "a time out of range was read: \(s)")
        let again = WorkNotice.earliest(fromPayload: WorkNotice.payload(earliest: t))
        precondition(again.map { abs($0.timeIntervalSince1970 - s) <= 1e-4 } == true, "\(s) did not write back")
    }
    if size >= 8 {
        var bits: UInt64 = 0
        for i in 0..<8 { bits = bits << 8 | UInt64(bytes[i]) }
        let s = Double(bitPattern: bits)
        let payload = WorkNotice.payload(earliest: Date(timeIntervalSince1970: s))
        if payload.isEmpty {
            precondition(!(s.isFinite && s >= 0 && s <= 1e11), "\(s) in range wrote no payload")
        } else {
            let back = WorkNotice.earliest(fromPayload: payload)
            precondition(back.map { abs($0.timeIntervalSince1970 - s) <= 1e-4 } == true, "\(payload) did not read back")
        }
    }
    return 0
}
