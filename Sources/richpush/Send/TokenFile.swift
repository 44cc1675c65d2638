import Foundation

/// The tokens of a `--tokens` file, read a chunk at a time so that a file of millions never sits in memory
/// whole: one token per line, or one column of a CSV file with a header row (`--column NAME`).
///
/// Blank lines and lines starting with `#` are skipped (not counted as targets); spaces and tabs around a token
/// are trimmed. CSV fields follow RFC 4180 (quoted fields may hold commas and doubled quotes, not line breaks).
final class TokenFile {
    struct Problem: Error, CustomStringConvertible {
        var description: String
    }

    /// The file's name, for messages.
    let path: String
    /// The next chunk of the file (empty at its end).
    private let readChunk: () throws -> Data
    private let handle: FileHandle?
    private var buffer: [UInt8] = []
    private var position = 0
    private var atEnd = false
    /// The CSV column read, once the header is known; nil for a plain list.
    private var column: Int?
    /// The line number of the last line read (1-based), for messages.
    private(set) var lineNumber = 0

    /// Opens the file; with `column`, reads the header and finds the column (exact name, else case-insensitive).
    convenience init(path: String, column: String?) throws {
        guard let h = FileHandle(forReadingAtPath: path) else { throw Problem(description: "cannot read \(path)") }
        try self.init(name: path, handle: h, column: column) { try h.read(upToCount: 1 << 18) ?? Data() }
    }

    /// Reads chunks from `read` (the fuzzer feeds it bytes in chunks of every size).
    init(name: String, handle: FileHandle? = nil, column: String?, read: @escaping () throws -> Data) throws {
        path = name
        self.handle = handle
        readChunk = read
        guard let column else { return }
        guard let header = try nextLine() else {
            throw Problem(description: "\(path) is empty: no header row to find column \(column) in")
        }
        let names = Self.csvFields(header).map { $0.trimmingCharacters(in: .whitespaces) }
        guard
            let i = names.firstIndex(of: column) ?? names.firstIndex(where: { $0.lowercased() == column.lowercased() })
        else {
            throw Problem(
                description: "\(path) has no column \(column) (its header: \(names.prefix(20).joined(separator: ", ")))"
            )
        }
        self.column = i
    }

    deinit { try? handle?.close() }

    /// The next token, or nil at the end of the file.
    func next() throws -> String? {
        guard let column else { return try nextPlain() }
        while let line = try nextLine() {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
            let fields = Self.csvFields(line)
            guard column < fields.count else {
                throw Problem(
                    description:
                        "\(path):\(lineNumber) has \(fields.count) field(s); column \(column + 1) was asked for"
                )
            }
            let token = fields[column].trimmingCharacters(in: .whitespaces)
            if token.isEmpty { continue }
            return token
        }
        return nil
    }

    /// A plain list, read as bytes: the token is the line without the spaces and tabs around it (the path a file of
    /// a million tokens takes, so no Foundation string work per line).
    private func nextPlain() throws -> String? {
        while let (start, end) = try nextLineRange() {
            var a = start
            var b = end
            while a < b && (buffer[a] == 0x20 || buffer[a] == 0x09) { a += 1 }
            while b > a && (buffer[b - 1] == 0x20 || buffer[b - 1] == 0x09) { b -= 1 }
            if a == b || buffer[a] == UInt8(ascii: "#") { continue }
            if buffer[a..<b].contains(where: { $0 == UInt8(ascii: ",") || $0 == 0x09 }) {
                throw Problem(
                    description:
                        "\(path):\(lineNumber) holds more than a token: for a CSV file, name the column with --column"
                )
            }
            return buffer.withUnsafeBufferPointer {
                String(decoding: UnsafeBufferPointer(rebasing: $0[a..<b]), as: UTF8.self)
            }
        }
        return nil
    }

    /// Targets in the file from here on (for the progress bar's total), reading it once more from the start.
    static func count(path: String, column: String?) throws -> Int {
        let file = try TokenFile(path: path, column: column)
        var n = 0
        while try file.next() != nil { n += 1 }
        return n
    }

    private func nextLine() throws -> String? {
        guard let (start, end) = try nextLineRange() else { return nil }
        return buffer.withUnsafeBufferPointer {
            String(decoding: UnsafeBufferPointer(rebasing: $0[start..<end]), as: UTF8.self)
        }
    }

    /// Where the next line lies in `buffer` (valid until the next read), without its line break.
    private func nextLineRange() throws -> (Int, Int)? {
        while true {
            if let newline = buffer[position...].firstIndex(of: UInt8(ascii: "\n")) {
                var end = newline
                if end > position && buffer[end - 1] == UInt8(ascii: "\r") { end -= 1 }
                let start = position
                position = newline + 1
                lineNumber += 1
                return (start, end)
            }
            if atEnd {
                guard position < buffer.count else { return nil }
                let start = position
                var end = buffer.count
                if buffer[end - 1] == UInt8(ascii: "\r") { end -= 1 }
                position = buffer.count
                lineNumber += 1
                return (start, end)
            }
            // Keep what is left of the current line and read on.
            buffer.removeSubrange(0..<position)
            position = 0
            let chunk = try readChunk()
            if chunk.isEmpty { atEnd = true } else { buffer.append(contentsOf: chunk) }
            if buffer.count > 1 << 20, buffer.firstIndex(of: UInt8(ascii: "\n")) == nil {
                throw Problem(description: "\(path):\(lineNumber + 1) is a line of over 1 MB: not a token file")
            }
        }
    }

    /// The fields of one CSV line.
    static func csvFields(_ line: String) -> [String] {
        var fields: [String] = []
        var field = ""
        var quoted = false
        var chars = line.makeIterator()
        var pending: Character? = nil
        while let c = pending ?? chars.next() {
            pending = nil
            if quoted {
                if c == "\"" {
                    let n = chars.next()
                    if n == "\"" {
                        field.append("\"")
                    } else {
                        quoted = false
                        pending = n
                    }
                } else {
                    field.append(c)
                }
            } else if c == "\"" && field.isEmpty {
                quoted = true
            } else if c == "," {
                fields.append(field)
                field = ""
            } else {
                field.append(c)
            }
        }
        fields.append(field)
        return fields
    }
}
