// libFuzzer harness: bytes as a `richpush send --tokens` file, plain or CSV, read in chunks of every size. The
// tokens read must not depend on where the chunks end, and none may hold a line break. Built by Scripts/fuzz-device
// with the reader's own source (Sources/richpush/Send/TokenFile.swift).
import Foundation

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTokenFile(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size > 0 else { return 0 }
    let control = data[0]
    let bytes = Data(UnsafeBufferPointer(start: data + 1, count: size - 1))
    // Bit 7 picks CSV (a column named by the low bits' choice), the rest a chunk size of 1 to 64 bytes.
    let column: String? = control & 0x80 == 0 ? nil : ["token", "Token", "b", ""][Int(control >> 5) & 3]
    let chunkSize = Int(control & 0x3F) + 1
    func tokens(chunk: Int) -> (tokens: [String], failed: Bool) {
        var offset = 0
        var out: [String] = []
        do {
            let file = try TokenFile(name: "fuzz", column: column) {
                defer { offset = min(bytes.count, offset + chunk) }
                return bytes.subdata(in: offset..<min(bytes.count, offset + chunk))
            }
            while let t = try file.next() {
                precondition(!t.isEmpty && !t.contains("\n"), "a token with a line break or empty")
                if column == nil { precondition(!t.contains(","), "a plain token with a comma") }
                out.append(t)
                if out.count > 100_000 { break }
            }
        } catch {
            return (out, true)
        }
        return (out, false)
    }
    let small = tokens(chunk: chunkSize)
    let whole = tokens(chunk: 1 << 20)
    precondition(small.tokens == whole.tokens && small.failed == whole.failed, "the tokens depend on the chunk size")
    return 0
}
