import Foundation
import Prometheus

extension ServerMetrics {
    /// A webhook request's end: `result` is delivered, failed or gone (410), `events` how many it carried.
    func webhookRequest(result: String, events: Int, seconds: Double) {
        registry.makeCounter(
            name: "richpush_webhook_requests_total",
            labels: [("result", result)],
            help: "Webhook requests sent, by result (delivered: a 2xx answer; failed: anything else; gone: 410)"
        ).increment()
        if result == "delivered" {
            registry.makeCounter(
                name: "richpush_webhook_events_total",
                help: "Webhook events acknowledged by receivers"
            )
            .increment(by: Int64(events))
        }
        registry.makeValueHistogram(
            name: "richpush_webhook_request_seconds",
            buckets: latencyBuckets,
            help: "Seconds from a webhook request's start to its answer or its failure"
        ).record(max(0, seconds))
    }

    /// A `live.token` event a public caller caused and the app's budget did not cover: not written.
    func webhookEventUnwritten(type: String) {
        registry.makeCounter(
            name: "richpush_webhook_events_unwritten_total",
            labels: [("type", type)],
            help:
                "Webhook events not written: caused by public callers past the app's budget (webhooks.public_events_per_second)"
        ).increment()
    }

    /// An endpoint disabled by the sender (failing too long, or gone).
    func webhookDisabled() {
        registry.makeCounter(
            name: "richpush_webhook_endpoints_disabled_total",
            help: "Webhook endpoints the sender disabled: failing for longer than the bound, or answering 410"
        ).increment()
    }

    /// Endpoints this node holds now, and those it found failing in its last claim.
    func webhookEndpointsInFlight(_ n: Int) {
        registry.makeGauge(
            name: "richpush_webhook_endpoints_in_flight",
            help: "Webhook endpoints this node is sending to"
        )
        .set(Double(n))
    }

    /// The endpoints of every app by state, read at each scrape.
    func webhookEndpoints(_ counts: [String: Int]) {
        for state in ["active", "failing", "disabled"] {
            registry.makeGauge(
                name: "richpush_webhook_endpoints",
                labels: [("state", state)],
                help: "Webhook endpoints of every app by state: active, failing (retried with backoff), disabled"
            ).set(Double(counts[state, default: 0]))
        }
    }

    /// Counters an alert reads, there from the start at 0.
    func webhookCountersAtZero() {
        for result in ["delivered", "failed", "gone"] {
            registry.makeCounter(
                name: "richpush_webhook_requests_total",
                labels: [("result", result)],
                help: "Webhook requests sent, by result (delivered: a 2xx answer; failed: anything else; gone: 410)"
            ).increment(by: Int64(0))
        }
        registry.makeCounter(
            name: "richpush_webhook_endpoints_disabled_total",
            help: "Webhook endpoints the sender disabled: failing for longer than the bound, or answering 410"
        ).increment(by: Int64(0))
    }
}
