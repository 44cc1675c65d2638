import Foundation
import RichPushCore
import RichPushTestSupport
import Testing

@testable import RichPushServer

/// The typed edge: each body decoder refuses what its schema refuses (unknown fields, nulls, wrong types, 0/1 for
/// booleans, empty or overlong strings, values outside their set) with every problem named, and the schema's
/// fields are exactly the decoders' fields, so neither can drift from the other.
@Suite struct RequestBodyTests {
    static func rules(_ body: () throws -> Void) -> [String] {
        do {
            try body()
            return []
        } catch let error as APIError {
            #expect(error.status == .unprocessableContent)
            return error.issues.map { "\($0.path) \($0.rule)" }.sorted()
        } catch {
            Issue.record("unexpected \(error)")
            return ["?"]
        }
    }

    @Test func appBodiesNameEveryProblem() async throws {
        #expect(
            Self.rules {
                _ = try AppBody.decode(
                    ["name": "", "bundle_id": "com/evil", "fcm_project_id": "../xxxxxx", "extra": 1],
                    creating: true,
                    tokenEndpoints: []
                )
            } == ["bundle_id bundle-id", "extra unknown-field", "fcm_project_id project-id", "name empty"]
        )
        #expect(
            Self.rules { _ = try AppBody.decode([:], creating: true, tokenEndpoints: []) } == [
                "bundle_id required", "name required",
            ]
        )
        #expect(
            Self.rules { _ = try AppBody.decode(["name": .null], creating: false, tokenEndpoints: []) } == ["name type"]
        )
        #expect(
            Self.rules { _ = try AppBody.decode(["fcm_project_id": .null], creating: true, tokenEndpoints: []) } == [
                "bundle_id required", "fcm_project_id type", "name required",
            ]
        )
        #expect(
            Self.rules {
                _ = try AppBody.decode(
                    ["apns": ["key_id": "ABC", "team_id": 5, "environment": "prod", "k": 1]],
                    creating: false,
                    tokenEndpoints: []
                )
            } == [
                "apns.environment enum", "apns.k unknown-field", "apns.key required", "apns.key_id apns-key-id",
                "apns.team_id type",
            ]
        )
        // A change of nothing is valid; null removes credentials and the project.
        var app = ServerApp(id: "a", name: "A", bundleID: "com.example.a", fcmProjectID: "shop-app-1")
        try AppBody.decode(["fcm_project_id": .null, "apns": .null], creating: false, tokenEndpoints: []).apply(
            to: &app
        )
        #expect(app.fcmProjectID == nil && app.apns == nil && app.name == "A")
        #expect(
            AppBody.isProjectID("example.com:shop-app") && AppBody.isProjectID("richpush-sandbox")
                && !AppBody.isProjectID("Shop") && !AppBody.isProjectID("shop-app-")
        )
    }

    @Test func deviceBodiesFollowTheProvidersTokenRules() async throws {
        let hex = String(repeating: "ab", count: 32)
        let d = try DeviceBody.decode(
            ["token": .string(hex), "platform": "ios", "tags": ["a", "b"]],
            appID: "app",
            providers: Providers([APNsProvider(), FCMProvider()])
        )
        .device
        #expect(d.provider == .apns && d.tags == ["a", "b"])
        #expect(
            Self.rules {
                _ = try DeviceBody.decode(
                    ["token": "not hex", "platform": "ios"],
                    appID: "app",
                    providers: Providers([APNsProvider(), FCMProvider()])
                )
            } == [
                "token apns-token"
            ]
        )
        #expect(
            Self.rules {
                _ = try DeviceBody.decode(
                    ["token": .string(hex), "platform": "android", "provider": .null, "tags": "solo", "user_id": ""],
                    appID: "app",
                    providers: Providers([APNsProvider(), FCMProvider()])
                )
            } == ["provider type", "tags type", "user_id empty"]
        )
        #expect(
            Self.rules {
                _ = try DeviceBody.decode(
                    ["token": "t", "platform": "android", "topics": .array(Array(repeating: "x", count: 101))],
                    appID: "app",
                    providers: Providers([APNsProvider(), FCMProvider()])
                )
            } == ["topics max-items"]
        )
        #expect(
            Self.rules {
                _ = try DeviceBody.decode(
                    ["token": "t", "platform": "android", "locale": .string(String(repeating: "é", count: 36))],
                    appID: "app",
                    providers: Providers([APNsProvider(), FCMProvider()])
                )
            } == ["locale length"]
        )
    }

    @Test func keysMediaChecksAndReceipts() async throws {
        #expect(Self.rules { _ = try KeyBody.decode(["scopes": ["read", "read"]]) } == ["scopes[1] duplicate"])
        #expect(Self.rules { _ = try KeyBody.decode(["scopes": "read"]) } == ["scopes type"])
        #expect(try KeyBody.decode(["scopes": ["send", "read"]]).scopes == [.send, .read])
        #expect(
            Self.rules { _ = try MediaCheckBody.decode(["url": "https://a/x.png", "media": ["https://a/y.png"]]) } == [
                "media exclusive"
            ]
        )
        #expect(
            Self.rules { _ = try MediaCheckBody.decode(["media": [["url": "https://a/x.png", "kind": .null], 5]]) } == [
                "media[0].kind type", "media[1] type",
            ]
        )
        #expect(try MediaCheckBody.decode(["url": "https://a/x.png", "kind": "video"]).items.first?.kind == .video)
        #expect(
            Self.rules {
                _ = try ReceiptBody.decode(
                    ["report": ["attachments": .array(Array(repeating: [:], count: 17)), "skipped": []]],
                    byApp: false
                )
            } == ["report.attachments max-items"]
        )
        #expect(
            Self.rules {
                _ = try ReceiptBody.decode(
                    ["device": 7, "report": ["attachments": [], "skipped": []], "x": true],
                    byApp: false
                )
            } == ["device type", "x unknown-field"]
        )
        #expect(
            try ReceiptBody.decode(["token": "t", "report": ["attachments": [], "skipped": []]], byApp: true).from
                == "t"
        )
    }

    @Test func theAudienceIsOneKindWithNothingElse() {
        func rules(_ a: JSONValue) -> [String] {
            var report = ValidationReport()
            _ = Audience.resolve(a, targets: .init(), maxTokens: 3, into: &report)
            return report.errors.map { "\($0.path) \($0.rule)" }.sorted()
        }
        #expect(rules([:]) == ["audience one-kind"])
        #expect(rules(["all": false]) == ["audience.all enum"])
        #expect(rules(["tag": "t", "extra": 1]) == ["audience.extra unknown-field"])
        #expect(rules(["tag": "t", "user": "u"]) == ["audience one-kind"])
        #expect(rules(["apns_tokens": [5], "fcm_tokens": ["a", "b", "c"]]) == ["audience.apns_tokens[0] type"])
        #expect(
            rules([
                "apns_tokens": .array([.string(String(repeating: "ab", count: 32))]), "fcm_tokens": ["a", "b", "c"],
            ]) == ["audience max-tokens"]
        )
        #expect(rules(["fcm_topic": "news!"]) == ["audience.fcm_topic topic-name"])
        #expect(rules(["tokens": []]) == ["audience.tokens empty"])
        #expect(rules(["user": .null]) == ["audience.user type"])
    }

    @Test func theMessageAtTheEdgeRefusesNullsAndLooseTypes() {
        let (m, lenient) = PushMessage.read(["alert": "Hello", "badge": .null, "content_available": 1])
        #expect(lenient.isValid && m.alert.body == "Hello" && m.contentAvailable)
        let (_, strict) = PushMessage.read(
            ["alert": "Hello", "badge": .null, "content_available": 1, "alert_x": 1],
            strict: true
        )
        #expect(
            strict.errors.map { "\($0.path) \($0.rule)" }.sorted() == [
                "alert_x unknown-field", "badge type", "content_available type",
            ]
        )
        let (_, empty) = PushMessage.read(["alert": ""])
        #expect(empty.errors.map(\.rule) == ["empty"])
        let (_, both) = PushMessage.read(["title": "t", "chart": ["values": [1, 2], "series": [[1, 2]]]])
        #expect(both.errors.map { "\($0.path) \($0.rule)" } == ["chart.values exclusive"])
    }

    /// The schema's request bodies list exactly the fields the decoders read.
    @Test func theSchemaListsTheFieldsTheDecodersRead() async throws {
        let script = """
            import sys, yaml, json
            d = yaml.safe_load(sys.stdin.read())
            s = d['components']['schemas']
            body = lambda p, m: d['paths'][p][m]['requestBody']['content']['application/json']['schema']
            out = {
              'notification': sorted(s['Notification']['properties']),
              'device': sorted(s['Device']['properties']),
              'app': sorted(body('/v1/apps', 'post')['properties']),
              'app-change': sorted(body('/v1/apps/{app}', 'patch')['properties']),
              'apns': sorted(s['Credentials']['properties']['apns']['properties']),
              'fcm': sorted(s['Credentials']['properties']['fcm']['properties']),
              'chart': sorted(s['Chart']['properties']),
              'media': sorted(s['Media']['properties']),
              'audience': sorted(k for b in s['Audience']['anyOf'] for k in b['properties']),
            }
            print(json.dumps(out))
            """
        let python = try await Python.run(script, stdin: RichPushAPI.openAPIDocument)
        #expect(python.status == 0)
        let fields = try JSONValue.parse(python.output)
        func list(_ k: String) -> [String] { fields[k]?.arrayValue?.compactMap(\.stringValue) ?? [] }
        #expect(list("notification") == (PushMessage.knownKeys.union(SendRequest.sendFields)).sorted())
        #expect(list("device") == DeviceBody.fields.sorted())
        #expect(list("app") == AppBody.fields.sorted() && list("app-change") == AppBody.fields.sorted())
        #expect(list("apns") == Credentials.apnsFields.sorted() && list("fcm") == Credentials.fcmFields.sorted())
        #expect(list("chart") == ChartSpec.knownKeys.sorted())
        #expect(list("media") == ["kind", "thumbnail", "type", "url"])
        #expect(Set(list("audience")) == Audience.kinds)
    }
}
