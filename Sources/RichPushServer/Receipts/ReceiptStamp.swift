/// One delivery's part of its receipt address (its id and signature), written over ``DeviceReceipts/placeholder``
/// in the payload rendered once for the whole notification.
public struct ReceiptStamp: Sendable, Hashable {
    /// ``DeviceReceipts/deliveryPartLength`` characters, all URL-safe.
    public let value: String

    /// The address with this delivery's part written in.
    public func address(_ template: String) -> String {
        String(template.dropLast(DeviceReceipts.placeholder.utf8.count)) + value
    }

    /// Where the placeholder of `template` starts in a serialized payload (the template as a JSON string, which
    /// holds the notification's id, so text elsewhere in the payload cannot be taken for it); nil when absent.
    public static func placeholderOffset(of template: String, in bytes: [UInt8]) -> Int? {
        let needle = Array(("\"" + template + "\"").utf8)
        guard needle.count <= bytes.count, let first = needle.first else { return nil }
        var i = 0
        while i + needle.count <= bytes.count {
            if bytes[i] == first, bytes[i..<(i + needle.count)].elementsEqual(needle) {
                return i + needle.count - 1 - DeviceReceipts.placeholder.utf8.count
            }
            i += 1
        }
        return nil
    }
}
