import Foundation
import RichPushCore

/// Reads a JSON file named on the command line ("-" for standard input).
enum MessageFile {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    static func readJSON(_ path: String) throws -> JSONValue {
        let data: Data
        if path == "-" {
            data = FileHandle.standardInput.readDataToEndOfFile()
        } else {
            guard let d = FileManager.default.contents(atPath: path) else {
                throw Failure(description: "cannot read \(path)")
            }
            data = d
        }
        do {
            return try JSONValue.parse(data)
        } catch {
            throw Failure(description: "\(path): \(error)")
        }
    }
}

/// Writes to standard error.
func printError(_ text: String) {
    FileHandle.standardError.write(Data((text + "\n").utf8))
}
