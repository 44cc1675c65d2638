import Foundation

/// Names files inside the folder the attachments are staged in.
struct StagingDirectory: Sendable {
    let root: URL

    /// A folder of its own under `base` (the extension's temporary directory by default).
    static func create(under base: URL = FileManager.default.temporaryDirectory) throws -> StagingDirectory {
        let root = base.appendingPathComponent("richpush-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        return StagingDirectory(root: root)
    }

    /// Where a download goes while it is running.
    func partialFile(index: Int) -> URL { root.appendingPathComponent("\(index).part") }

    /// The final name: index, a readable stem from the URL, and the extension of the decided type.
    func finalFile(index: Int, sourceURL: String, fileExtension: String) -> URL {
        let last = URL(string: sourceURL)?.deletingPathExtension().lastPathComponent ?? ""
        let stem = String(
            last.unicodeScalars.filter { CharacterSet.alphanumerics.contains($0) || $0 == "-" || $0 == "_" }.prefix(40)
                .map(Character.init)
        )
        let name = stem.isEmpty ? "media" : stem
        return root.appendingPathComponent("\(index)-\(name).\(fileExtension)")
    }
}
