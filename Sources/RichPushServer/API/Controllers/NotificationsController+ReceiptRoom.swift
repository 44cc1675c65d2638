import Foundation
import RichPushCore

extension NotificationsController {
    /// Gives a rich message its receipt address (`rp.r`) when the payload has room for it, and checks the sizes of
    /// the message as it will be sent, for the providers the audience uses. Returns the size problems (none: it
    /// can be sent); a receipt address that does not fit is left out with a warning.
    func fitReceiptAddress(
        _ message: inout PushMessage,
        id: String,
        audience: Audience,
        until end: Date,
        wanted: Bool,
        into report: inout ValidationReport
    ) -> [ValidationIssue] {
        func sizes() -> [ValidationIssue] {
            providers.all.flatMap { $0.sizeIssues(message, audience: audience, now: validation.now) }
        }
        guard wanted, message.receiptURL == nil, let receipts, RichPushKey.isNeeded(for: message),
            let url = receipts.template(for: id, until: end.addingTimeInterval(DeviceReceipts.grace))
        else { return sizes() }
        message.receiptURL = url
        let withAddress = sizes()
        guard !withAddress.isEmpty else { return [] }
        message.receiptURL = nil
        let without = sizes()
        if without.isEmpty {
            report.add(
                "receipt_url",
                "no-room",
                "the payload has no room for the receipt address; this notification is sent without receipts",
                .warning
            )
        }
        return without
    }
}
