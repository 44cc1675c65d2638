import Foundation
import RichPushCore

/// The statements about devices written once for both databases.
enum DeviceSQL {
    /// Where a device's notification permission stands (added after the table; the same in both databases).
    static let permissionColumn = "ALTER TABLE devices ADD COLUMN permission TEXT"

    /// An app's devices by permission; one index range (devices' unique (app_id, token)) read once.
    static func permissions(_ appID: String) -> SQL {
        "SELECT COALESCE(permission, 'unknown'), count(*) FROM devices WHERE app_id = \(appID) GROUP BY 1"
    }
}
