import ArgumentParser
import Foundation
import RichPushCore

/// Reads a JSON file named on the command line ("-" for standard input).
enum MessageFile {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// ``readJSON(_:deepValues:)`` for a command: a file that cannot be read or parsed is named on standard error,
    /// and the command exits with status 2.
    static func readJSONOrExit(_ path: String, deepValues: JSONValue.DeepValues = .refuse) throws -> JSONValue {
        do { return try readJSON(path, deepValues: deepValues) } catch {
            printError("error: \(error)")
            throw ExitCode(2)
        }
    }

    /// `deepValues: .readAsNull` reads a received payload as the device does: a key nested too deep is read as
    /// null instead of making the whole payload unreadable.
    static func readJSON(_ path: String, deepValues: JSONValue.DeepValues = .refuse) throws -> JSONValue {
        let data: Data
        if path == "-" {
            do {
                data = try FileHandle.standardInput.readToEnd() ?? Data()
            } catch {
                throw Failure(description: "cannot read the standard input: \(error.localizedDescription)")
            }
        } else {
            guard let d = FileManager.default.contents(atPath: path) else {
                throw Failure(description: "cannot read \(path)")
            }
            data = d
        }
        do {
            return try JSONValue.parse(data, deepValues: deepValues)
        } catch {
            throw Failure(description: "\(path): \(error)")
        }
    }
}

/// Writes to standard error.
func printError(_ text: String) {
    FileHandle.standardError.write(Data((text + "\n").utf8))
}
