import ArgumentParser
import Foundation
import RichPushCore
import RichPushWebPush

struct PayloadCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "payload",
        abstract: "Print the exact provider request (headers and body) for a message.",
        discussion: "The target is taken from --token, --topic or --condition, else from the message's targets."
    )

    enum Provider: String, ExpressibleByArgument, CaseIterable {
        case apns, fcm, webpush
    }

    @Option(help: "apns, fcm or webpush (the browser's message before encryption).")
    var provider: Provider

    @Option(help: "A device token (APNs) or registration token (FCM).")
    var token: String?

    @Option(
        name: .customLong("webpush-subscription"),
        help: ArgumentHelp("Web Push: the subscription file (its endpoint is the request's URL).", valueName: "file")
    )
    var subscription: String?

    @Option(
        name: .customLong("default-url"),
        help: "Web Push: the page a click opens when there is no https deep link."
    )
    var defaultURL: String?

    @Option(help: "An FCM topic.")
    var topic: String?

    @Option(help: "An FCM condition.")
    var condition: String?

    @Option(name: .customLong("bundle-id"), help: "The app's bundle id, for apns-topic.")
    var bundleID = "com.example.app"

    @Option(help: "The Firebase project id, for the FCM path.")
    var project = "richpush-sandbox"

    @Option(name: .customLong("chart-image"), help: "URL of the server-rendered chart PNG, for Android and the web.")
    var chartImage: String?

    @Option(help: "Seconds since 1970 to compute apns-expiration from (default: now).")
    var now: Int64?

    @Flag(help: "Print method, path, headers and body as one JSON object.")
    var json = false

    @Flag(help: "Print the request even if the message has errors.")
    var force = false

    @Flag(name: .customLong("allow-http"), help: "Accept http: media URLs.")
    var allowHTTP = false

    @Argument(help: "The message JSON file, or - for standard input.")
    var message: String

    func validate() throws {
        let given = [token, topic, condition].compactMap { $0 }.count
        if given > 1 { throw ValidationError("give at most one of --token, --topic, --condition") }
        if provider == .apns && (topic != nil || condition != nil) {
            throw ValidationError("APNs sends to device tokens only; use --token")
        }
        if provider == .webpush && given > 0 {
            throw ValidationError("Web Push sends to subscriptions: use --webpush-subscription")
        }
    }

    func run() throws {
        let value = try MessageFile.readJSONOrExit(message)
        let clock: @Sendable () -> Date = { [now] in now.map { Date(timeIntervalSince1970: TimeInterval($0)) } ?? Date()
        }
        let overridesTarget = token != nil || topic != nil || condition != nil || provider == .webpush
        let report = MessageValidator(
            options: .init(allowInsecureMedia: allowHTTP, requireTargets: !overridesTarget, now: clock)
        ).validate(json: value)
        for issue in report.issues { printError(issue.description) }
        if !report.isValid && !force { throw ExitCode(1) }
        let (m, _) = PushMessage.read(value)

        switch provider {
        case .webpush:
            var endpoint = "<the subscription's endpoint>"
            if let file = subscription {
                guard let data = FileManager.default.contents(atPath: file), let j = try? JSONValue.parse(data),
                    let e = (try? WebPushSubscription(json: j))?.endpoint
                else {
                    printError("error: --webpush-subscription \(file) is not a browser's push subscription")
                    throw ExitCode(2)
                }
                endpoint = e.absoluteString
            }
            let r = WebPushMessage(m, chartImageURL: chartImage, defaultURL: defaultURL, now: clock())
            var headers: [(name: String, value: String)] = [
                ("ttl", String(r.ttl)), ("urgency", r.urgency.rawValue), ("content-encoding", "aes128gcm"),
                ("content-type", "application/octet-stream"), ("authorization", "vapid t=<token>,k=<public key>"),
            ]
            if let t = r.topic { headers.append(("topic", t)) }
            if let problem = r.sizeProblem { printError("error: webpush-size: \(problem)") }
            emit(method: "POST", path: endpoint, headers: headers, body: r.payload)
        case .apns:
            guard let device = token ?? m.targets.apnsTokens.first else {
                printError("error: no APNs token: give --token or targets.apns_tokens")
                throw ExitCode(2)
            }
            let request = APNsRenderer(bundleID: bundleID, now: clock).render(m, deviceToken: device)
            emit(method: "POST", path: request.path, headers: request.headers, body: request.payload)
        case .fcm:
            let target: FCMTarget
            if let token {
                target = .token(token)
            } else if let topic {
                target = .topic(topic)
            } else if let condition {
                target = .condition(condition)
            } else if let t = m.targets.topic {
                target = .topic(t)
            } else if let c = m.targets.condition {
                target = .condition(c)
            } else if let t = m.targets.fcmTokens.first {
                target = .token(t)
            } else {
                printError("error: no FCM target: give --token, --topic, --condition or targets in the message")
                throw ExitCode(2)
            }
            let request = FCMRenderer(projectID: project, chartImageURL: chartImage, now: clock).render(m, to: target)
            emit(
                method: "POST",
                path: request.path,
                headers: [("content-type", "application/json; charset=utf-8")],
                body: request.body
            )
        }
    }

    private func emit(method: String, path: String, headers: [(name: String, value: String)], body: JSONValue) {
        if json {
            let h = JSONValue.object(
                Dictionary(headers.map { ($0.name, JSONValue.string($0.value)) }, uniquingKeysWith: { $1 })
            )
            let out: JSONValue = [
                "method": .string(method), "path": .string(path), "headers": h, "body": body,
                "body_bytes": .int(Int64(body.serializedSize)),
            ]
            print(out.prettyPrinted())
        } else {
            print("\(method) \(path)")
            for h in headers { print("\(h.name): \(h.value)") }
            print("")
            print(body.prettyPrinted())
        }
    }
}
