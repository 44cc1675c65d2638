// libFuzzer harness: raw bytes as the first bytes of a download, through the sniffer and the media rules the
// device and the server share. Built by Scripts/fuzz-device.
import RichPushCore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzMediaSniffer(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    let type = MediaSniffer.sniff(bytes)
    if let type {
        // The sizes a Content-Length can announce, extremes included.
        for announced in [nil, 0, size, Int.max, -1] as [Int?] {
            _ = MediaRules.appleDecision(type: type, size: announced)
            _ = MediaRules.androidDecision(type: type, size: announced)
        }
        _ = (type.uti, type.fileExtension, type.mimeType, type.kind)
    }
    // Every prefix length the downloader may hand over while bytes arrive.
    if size > 1 { _ = MediaSniffer.sniff(UnsafeBufferPointer(rebasing: bytes[0..<(size / 2)])) }
    return 0
}
