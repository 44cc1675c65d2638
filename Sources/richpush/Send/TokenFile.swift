import Foundation

/// The tokens of a `--tokens` file, read a chunk at a time so that a file of millions never sits in memory
/// whole: one token per line, or one column of a CSV file with a header row (`--column NAME`).
///
/// Blank lines and lines starting with `#` are skipped (not counted as targets); spaces around a token are
/// trimmed. CSV fields follow RFC 4180 (quoted fields may hold commas and doubled quotes, not line breaks).
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
        guard let header = try nextLine() else { throw Problem(description: "\(path) is empty: no header row to find column \(column) in") }
        let names = Self.csvFields(header).map { $0.trimmingCharacters(in: .whitespaces) }
        guard let i = names.firstIndex(of: column) ?? names.firstIndex(where: { $0.lowercased() == column.lowercased() }) else {
            throw Problem(description: "\(path) has no column \(column) (its header: \(names.prefix(20).joined(separator: ", ")))")
        }
        self.column = i
    }

    deinit { try? handle?.close() }

    /// The next token, or nil at the end of the file.
    func next() throws -> String? {
        while let line = try nextLine() {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
            guard let column else {
                if trimmed.contains(",") || trimmed.contains("\t") {
                    throw Problem(description: "\(path):\(lineNumber) holds more than a token: for a CSV file, name the column with --column")
                }
                return trimmed
            }
            let fields = Self.csvFields(line)
            guard column < fields.count else {
                throw Problem(description: "\(path):\(lineNumber) has \(fields.count) field(s); column \(column + 1) was asked for")
            }
            let token = fields[column].trimmingCharacters(in: .whitespaces)
            if token.isEmpty { continue }
            return token
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
        while true {
            if let newline = buffer[position...].firstIndex(of: UInt8(ascii: "\n")) {
                var end = newline
                if end > position && buffer[end - 1] == UInt8(ascii: "\r") { end -= 1 }
                let line = String(decoding: buffer[position..<end], as: UTF8.self)
                position = newline + 1
                lineNumber += 1
                return line
            }
            if atEnd {
                guard position < buffer.count else { return nil }
                let line = String(decoding: buffer[position...], as: UTF8.self)
                position = buffer.count
                lineNumber += 1
                return line.hasSuffix("\r") ? String(line.dropLast()) : line
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
                    if n == "\"" { field.append("\"") } else {
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
