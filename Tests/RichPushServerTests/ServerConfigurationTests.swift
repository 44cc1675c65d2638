import Foundation
import Testing

@testable import RichPushServer

/// The configuration file, key by key: every key it documents is read into its setting, and a wrong value or a
/// section of the wrong type is refused naming the key with its section.
@Suite struct ServerConfigurationTests {
    static let everyKey = #"""
        {"database": "/var/lib/richpush/rp.sqlite", "node_id": "n1", "host": "0.0.0.0", "port": 9090,
         "admin_key": "admin-key-0123456789", "public_url": "https://push.example.com", "rate_limit": 50,
         "lease_seconds": 30, "public_rate_per_client": 4, "trusted_proxies": ["10.0.0.0/8"],
         "credentials_key_file": "/etc/richpush/key", "receipts": false,
         "connections": {"per_client": 7, "max": 900, "idle_seconds": 12},
         "disk": {"min_free_megabytes": 100},
         "workers": {"batch_size": 50, "concurrency": 60, "lanes": 3, "in_flight_per_app": 70, "in_flight_per_origin": 80},
         "live": {"priority10_per_hour": 11},
         "updates": {"max_versions": 12, "per_second": 2, "burst": 13},
         "insight": {"max_views": 14, "max_views_per_app": 15, "max_views_per_key": 16, "max_views_per_notification": 17},
         "quotas": {"upload_megabytes_per_day": 2, "fetches_per_app": 18, "fetches": 19},
         "registrations": {"devices_per_app": 20, "devices_per_user": 21, "live_tokens_per_app": 22,
                           "live_tokens_per_user": 23, "live_tokens_per_activity": 24},
         "notifications": {"retention_days": 3},
         "sandbox": {"enabled": false, "directory": "/tmp/sb", "apns_port": 2197, "fcm_port": 2198},
         "media": {"directory": "/srv/media", "cache_megabytes": 32, "public_url": "https://cdn.example.com",
                   "retention_days": 2}}
        """#

    /// How the sources combine is checked once all are applied: a flag mends what the file and the environment
    /// alone would not pass (sandbox mode from the environment, a public host from the file, loopback by flag).
    @Test func theCombinationIsCheckedAfterEverySource() throws {
        var alone = ServerConfiguration()
        try alone.apply(json: #"{"host": "0.0.0.0", "sandbox": {"enabled": false}}"#)
        #expect(throws: ServerConfiguration.Problem.self) { try alone.apply(environment: ["RICHPUSH_SANDBOX": "1"]) }
        var c = ServerConfiguration()
        try c.apply(json: #"{"host": "0.0.0.0", "sandbox": {"enabled": false}}"#, checking: false)
        try c.apply(environment: ["RICHPUSH_SANDBOX": "1"], checking: false)
        c.host = "127.0.0.1"
        try c.check()
        #expect(c.sandbox && c.host == "127.0.0.1")
    }

    @Test func everyKeyIsRead() throws {
        var c = ServerConfiguration()
        try c.apply(json: Self.everyKey)
        #expect(c.database == "/var/lib/richpush/rp.sqlite" && c.nodeID == "n1" && c.host == "0.0.0.0")
        #expect(c.port == 9090 && c.adminKey == "admin-key-0123456789" && c.publicURL == "https://push.example.com")
        #expect(c.rateLimit == 50 && c.leaseSeconds == 30 && c.publicRatePerClient == 4)
        #expect(c.credentialsKeyFile == "/etc/richpush/key" && c.receipts == false)
        #expect(c.connections.perClient == 7 && c.connections.total == 900 && c.connections.idleSeconds == 12)
        #expect(c.minFreeDiskMegabytes == 100)
        #expect(c.batchSize == 50 && c.concurrency == 60 && c.lanes == 3)
        #expect(c.inFlightPerApp == 70 && c.inFlightPerOrigin == 80)
        #expect(c.livePriority10PerHour == 11)
        #expect(c.updates.maxVersions == 12 && c.updates.perSecond == 2 && c.updates.burst == 13)
        #expect(c.insightViews.node == 14 && c.insightViews.perApp == 15 && c.insightViews.perKey == 16)
        #expect(c.insightViews.perNotification == 17)
        #expect(c.quotas.uploadBytesPerDay == 2 * 1_048_576 && c.quotas.fetchesPerApp == 18 && c.quotas.fetches == 19)
        #expect(c.registrations.devicesPerApp == 20 && c.registrations.devicesPerUser == 21)
        #expect(c.registrations.liveTokensPerApp == 22 && c.registrations.liveTokensPerUser == 23)
        #expect(c.registrations.liveTokensPerActivity == 24)
        #expect(c.notificationRetentionDays == 3)
        #expect(c.sandbox == false && c.sandboxDirectory == "/tmp/sb")
        #expect(c.externalSandboxAPNsPort == 2197 && c.externalSandboxFCMPort == 2198)
        #expect(c.mediaDirectory == "/srv/media" && c.mediaCacheMegabytes == 32)
        #expect(c.mediaPublicURL == "https://cdn.example.com" && c.mediaRetentionDays == 2)
    }

    @Test func aWrongValueNamesItsKeyAndRule() {
        let cases: [(String, String, String)] = [
            (#"{"port": 70000}"#, "port", "a whole number from 0 to 65535"),
            (#"{"port": 8080.5}"#, "port", "a whole number from 0 to 65535"),
            (#"{"host": ""}"#, "host", "non-empty string"),
            (#"{"receipts": "yes"}"#, "receipts", "true or false"),
            (#"{"workers": []}"#, "workers", "must be an object"),
            (#"{"workers": {"lanes": 17}}"#, "workers.lanes", "a whole number from 1 to 16"),
            (#"{"workers": {"lanes": 1.5}}"#, "workers.lanes", "a whole number from 1 to 16"),
            (#"{"workers": {"threads": 2}}"#, "workers.threads", "unknown key"),
            (#"{"sandbox": {"enabled": 1}}"#, "sandbox.enabled", "true or false"),
            (#"{"media": {"public_url": 5}}"#, "media.public_url", "non-empty string"),
            (#"{"registrations": {"devices_per_user": 0}}"#, "registrations.devices_per_user", "from 1 to 10000"),
            (#"{"quotas": {"upload_megabytes_per_day": -1}}"#, "quotas.upload_megabytes_per_day", "from 0.0"),
            (#"{"insight": {"max_views": 1e300}}"#, "insight.max_views", "to 1000000"),
        ]
        for (json, key, rule) in cases {
            var c = ServerConfiguration()
            do {
                try c.apply(json: json)
                Issue.record("\(json) was taken")
            } catch let p as ServerConfiguration.Problem {
                #expect(p.key == key && p.rule.contains(rule), "\(json): \(p)")
            } catch {
                Issue.record("\(json): \(error)")
            }
        }
    }
}
