import Foundation
import RichPushCore
import Testing

@testable import RichPushServer

/// The per-app metrics stay bounded, and the Grafana dashboard in `docs/` reads only metrics the server writes.
@Suite struct MetricsTests {
    @Test func appLabelsStopAtTheLimitAndTheRestAreOther() {
        let metrics = ServerMetrics(maxAppLabels: 2)
        for app in ["app_a", "app_b", "app_c", "app_d", "app_a"] {
            metrics.notificationAccepted(app: app, deliveries: 1)
            metrics.attempt(app: app, provider: .apns, state: "delivered", reason: nil)
        }
        let text = metrics.render()
        #expect(text.contains(#"richpush_app_notifications_accepted_total{app="app_a"} 2"#), "\(text)")
        #expect(text.contains(#"richpush_app_notifications_accepted_total{app="app_b"} 1"#))
        #expect(text.contains(#"richpush_app_notifications_accepted_total{app="other"} 2"#))
        #expect(!text.contains(#"app="app_c""#) && !text.contains(#"app="app_d""#))
        #expect(
            text.contains(#"richpush_app_delivery_attempts_total{app="other",provider="apns",state="delivered"} 2"#)
        )
    }

    @Test func theDashboardReadsWhatTheServerWrites() throws {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../docs/grafana-dashboard.json").standardized
        let dashboard = try JSONValue.parse(Array(try Data(contentsOf: url)))
        let exprs = (dashboard["panels"]?.arrayValue ?? []).flatMap { $0["targets"]?.arrayValue ?? [] }
            .compactMap { $0["expr"]?.stringValue }
        #expect(exprs.count >= 10)
        // Every metric the dashboard names, after a node has done each thing once.
        let metrics = ServerMetrics()
        metrics.notificationAccepted(app: "app_a", deliveries: 1)
        for state in ["delivered", "failed", "retry"] {
            metrics.attempt(
                app: "app_a",
                provider: .apns,
                state: state,
                reason: state == "delivered" ? nil : "BadDeviceToken"
            )
        }
        metrics.delivered(provider: .apns, secondsSinceDue: 0.02)
        metrics.queueDepth([.queued: 1])
        metrics.receiptRecorded()
        metrics.databaseUp(true)
        metrics.fanOutFailed()
        let written = metrics.render()
        let pattern = try Regex(#"richpush_[a-z0-9_]+"#)
        var named = Set<String>()
        for expr in exprs {
            for match in expr.matches(of: pattern) { named.insert(String(expr[match.range])) }
        }
        #expect(named.count >= 7)
        for name in named {
            #expect(written.contains(name), "the dashboard reads \(name), which /metrics does not write")
        }
    }
}
