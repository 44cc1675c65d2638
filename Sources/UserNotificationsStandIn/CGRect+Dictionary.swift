#if !canImport(UserNotifications) && !canImport(CoreGraphics)
import Foundation

extension CGRect {
    /// The rectangle as CoreGraphics writes it into a dictionary: numbers under `X`, `Y`, `Width` and `Height`.
    public var dictionaryRepresentation: NSDictionary {
        [
            "X": NSNumber(value: Double(origin.x)), "Y": NSNumber(value: Double(origin.y)),
            "Width": NSNumber(value: Double(size.width)), "Height": NSNumber(value: Double(size.height)),
        ]
    }
}
#endif
