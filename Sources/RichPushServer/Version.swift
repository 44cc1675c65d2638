/// This build's version: `richpush --version`, `/health` (every answer) and the `richpush_build_info` metric say it,
/// so a rolling upgrade can be followed node by node. Raised with each release (Scripts/bundle names the bundle
/// after it).
public enum RichPushVersion {
    public static let current = "0.40.0"
}
