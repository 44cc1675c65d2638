import ArgumentParser
import Foundation
import RichPushCore
import RichPushServer
import RichPushTransport

/// `richpush send`: one message to one target or a million, straight to APNs or FCM, through a running RichPush
/// server, or to the sandbox.
struct SendCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "send",
        abstract: "Send a message to APNs, FCM, a RichPush server or the sandbox, and report each target's outcome.",
        discussion: """
            Give exactly one way to send:
              APNs:    --apns-key AuthKey_ABC.p8 --key-id ABC --team-id DEF
                       --bundle-id com.example.app [--production]
                       (or --apns-cert cert.pem --apns-cert-key key.pem),
                       with --token or --tokens
              FCM:     --fcm-service-account sa.json, with --token, --tokens,
                       --topic or --condition
              server:  --server URL --app app_… (the app's key in
                       RICHPUSH_API_KEY or --key-file FILE), with --all, --tag,
                       --user, --token, --topic, --condition, --audience JSON
                       or the message's own "audience"
              sandbox: --sandbox DIR (a running `richpush sandbox --dir DIR`)

            Off this machine the server must be https; redirects are not followed (the key goes to the address \
            given and nowhere else). The message is checked first (as `richpush validate` does) and its media \
            fetched and judged by the server's rules; either stops the send unless --force. Each target is \
            retried as the server's workers retry (backoff with jitter, Retry-After honoured, never past the \
            message's time to live).

            Ctrl-C stops starting sends, lets those in flight end, and reports the rest as not_sent; a second \
            Ctrl-C quits at once. Exit status: 0 when every target was delivered, 1 when some were not, 2 for \
            usage and validation errors.

            """
    )

    @Argument(help: "The message JSON file, or - for standard input.")
    var message: String

    @OptionGroup(title: "APNs") var apns: APNsOptions
    @OptionGroup(title: "FCM") var fcm: FCMOptions
    @OptionGroup(title: "Web Push") var webPush: WebPushOptions
    @OptionGroup(title: "RichPush server") var server: ServerOptions

    @Option(help: "Send to the emulators of a running `richpush sandbox --dir DIR`.")
    var sandbox: String?

    @OptionGroup(title: "Targets") var targets: TargetOptions
    @OptionGroup(title: "Sending and output") var output: OutputOptions

    func run() async throws {
        do {
            try await send()
        } catch let failure as SendFailure {
            printError("error: \(failure)")
            throw ExitCode(2)
        } catch let problem as TokenFile.Problem {
            printError("error: \(problem)")
            throw ExitCode(2)
        }
    }

    func send() async throws {
        let modes = [
            apns.given ? "APNs" : nil, fcm.given ? "FCM" : nil, server.given ? "server" : nil,
            sandbox != nil ? "sandbox" : nil,
            // Browsers' subscriptions name their push service: with --sandbox, the sandbox's.
            webPush.given && sandbox == nil ? "Web Push" : nil,
        ].compactMap { $0 }
        guard modes.count == 1 else {
            throw SendFailure.usage(
                modes.isEmpty
                    ? "give one way to send: --apns-key (or --apns-cert), --fcm-service-account, --webpush-subscription, --server or --sandbox"
                    : "give only one way to send (\(modes.joined(separator: ", ")) given)"
            )
        }
        let value: JSONValue
        do { value = try MessageFile.readJSON(message) } catch { throw SendFailure.usage("\(error)") }
        guard case .object(var fields) = value else {
            throw SendFailure.invalid("\(message): a message is a JSON object")
        }
        // What a server send takes beside the message (audience, send_at, …) is the server's to read.
        var sendFields: [String: JSONValue] = [:]
        for name in ["audience", "send_at", "spread_seconds", "media_check", "rehost", "receipts", "dry_run"] {
            if let v = fields.removeValue(forKey: name) { sendFields[name] = v }
        }
        if server.given {
            let status = try await ServerSend(command: self, message: .object(fields), sendFields: sendFields).run()
            if status != 0 { throw ExitCode(status) }
            return
        }
        if let name = sendFields.keys.sorted().first {
            throw SendFailure.usage(
                "\(name) is for sends through a server (--server); a direct send goes now, to the targets given"
            )
        }
        let status = try await DirectSend.prepare(self, message: .object(fields)).run()
        if status != 0 { throw ExitCode(status) }
    }
}

struct APNsOptions: ParsableArguments {
    @Option(name: .customLong("apns-key"), help: "The .p8 signing key (token authentication).")
    var key: String?
    @Option(name: .customLong("key-id"), help: "The key's id (10 characters, in the file name AuthKey_ID.p8).")
    var keyID: String?
    @Option(name: .customLong("team-id"), help: "The team id the key belongs to.")
    var teamID: String?
    @Option(name: .customLong("apns-cert"), help: "A client certificate (PEM) instead of a key.")
    var certificate: String?
    @Option(name: .customLong("apns-cert-key"), help: "The certificate's private key (PEM).")
    var certificateKey: String?
    @Option(name: .customLong("bundle-id"), help: "The app's bundle id (apns-topic).")
    var bundleID: String?
    @Flag(
        help:
            "Send to APNs production (TestFlight and App Store builds); the default is the sandbox (development builds)."
    )
    var production = false
    @Option(
        name: .customLong("apns-url"),
        help: ArgumentHelp("Another APNs endpoint, https://HOST:PORT (an emulator or a proxy).", visibility: .hidden)
    )
    var url: String?

    var given: Bool { key != nil || certificate != nil }
}

struct WebPushOptions: ParsableArguments {
    @Option(
        name: .customLong("webpush-subscription"),
        help: ArgumentHelp(
            "A browser's push subscription: a file of PushSubscription.toJSON(), or of several (a JSON array, or one per line). Repeatable.",
            valueName: "file"
        )
    )
    var subscriptions: [String] = []
    @Option(
        name: .customLong("vapid-key"),
        help: ArgumentHelp(
            "The site's VAPID private key: a PEM P-256 key, or its 32 bytes in base64url.",
            valueName: "file"
        )
    )
    var key: String?
    @Option(name: .customLong("vapid-subject"), help: "The contact push services see: mailto:… or https://….")
    var subject: String?

    var given: Bool { !subscriptions.isEmpty }
}

struct FCMOptions: ParsableArguments {
    @Option(name: .customLong("fcm-service-account"), help: "The Firebase service account's JSON key file.")
    var serviceAccount: String?
    @Option(
        name: .customLong("fcm-url"),
        help: ArgumentHelp(
            "Another FCM endpoint, https://HOST:PORT (an emulator); the service account's token_uri is then used as it is.",
            visibility: .hidden
        )
    )
    var url: String?

    var given: Bool { serviceAccount != nil }
}

struct ServerOptions: ParsableArguments {
    @Option(help: "A RichPush server's base URL, such as https://push.example.com.")
    var server: String?
    @Option(
        name: .customLong("key-file"),
        help: "A file holding an API key of the app (scope send), rp_…; or set RICHPUSH_API_KEY."
    )
    var keyFile: String?
    /// Refused with a pointer to the two ways above: a key in the arguments is seen by every user of the machine
    /// (`ps`) and kept in the shell's history.
    @Option(help: .hidden)
    var key: String?
    @Option(help: "The app's id, app_….")
    var app: String?
    @Flag(help: "Every registered device of the app.")
    var all = false
    @Option(help: "Registered devices with this tag.")
    var tag: String?
    @Option(help: "Registered devices of this user id.")
    var user: String?
    @Option(help: #"Any audience the API takes, as JSON (e.g. '{"topic":"news"}' for a registry topic)."#)
    var audience: String?
    @Option(name: .customLong("idempotency-key"), help: "Sent as Idempotency-Key (default: a new one for each run).")
    var idempotencyKey: String?
    @Option(
        help:
            "Update this notification in place instead of sending a new one: the message goes as its next version to the devices it went to (it must have been sent with collapse_id)."
    )
    var update: String?

    var given: Bool { server != nil }
}

struct TargetOptions: ParsableArguments {
    @Option(help: "A device token (repeatable). APNs: hexadecimal; FCM: a registration token.")
    var token: [String] = []
    @Option(help: "A file of tokens: one per line, or a CSV file with --column.")
    var tokens: String?
    @Option(help: "The CSV column that holds the tokens (the header row names it).")
    var column: String?
    @Option(help: "An FCM topic.")
    var topic: String?
    @Option(help: "An FCM condition, such as \"'news' in topics && 'uk' in topics\".")
    var condition: String?
}

struct OutputOptions: ParsableArguments {
    @Option(help: "Write every target's outcome to this file: CSV (.csv) or JSON lines (anything else).")
    var report: String?
    @Option(name: .customLong("report-format"), help: "csv or jsonl (default: from the file name).")
    var reportFormat: String?
    @Flag(help: "Print the result as one JSON object instead of lines.")
    var json = false
    @Option(help: "auto (a bar on a terminal, else lines), bar, lines or none.")
    var progress: String = "auto"
    @Option(
        name: .customLong("progress-interval"),
        help: "Seconds between progress updates (default 0.1 for the bar, 2 for lines)."
    )
    var progressInterval: Double?
    @Option(help: "Sends in flight at once (1 to 10000).")
    var concurrency = 200
    @Option(help: "The most connections to the provider, opened as the sends in flight need them (1 to 64).")
    var connections = HTTP2PoolDefaults.connections
    @Option(
        name: .customLong("max-attempts"),
        help: "Attempts per target before a retryable failure is final (1 to 100)."
    )
    var maxAttempts = RetryPolicy().maxAttempts
    @Option(help: "Seconds to wait for a connection to the provider, and for each answer (1 to 300).")
    var timeout: Double = 10
    @Flag(help: "Send even if the message has errors or its media fails the preflight.")
    var force = false
    @Flag(name: .customLong("no-preflight"), help: "Do not fetch and check the media first.")
    var noPreflight = false
    @Flag(name: .customLong("allow-http"), help: "Accept http: media URLs (always on with --sandbox).")
    var allowHTTP = false
    @Option(
        name: .customLong("ca-file"),
        help: ArgumentHelp("Trust only this CA (PEM) for the provider's TLS, as for an emulator.", visibility: .hidden)
    )
    var caFile: String?

    /// The numbers given, each held to its range with a message naming the option.
    func checked() throws {
        guard (1...10_000).contains(concurrency) else { throw SendFailure.usage("--concurrency is from 1 to 10000") }
        guard (1...64).contains(connections) else { throw SendFailure.usage("--connections is from 1 to 64") }
        guard (1...100).contains(maxAttempts) else { throw SendFailure.usage("--max-attempts is from 1 to 100") }
        guard timeout.isFinite, (1...300).contains(timeout) else {
            throw SendFailure.usage("--timeout is from 1 to 300 seconds")
        }
        if let i = progressInterval, !(i.isFinite && (0.01...3600).contains(i)) {
            throw SendFailure.usage("--progress-interval is from 0.01 to 3600 seconds")
        }
        guard SendConsole.Progress(rawValue: progress) != nil else {
            throw SendFailure.usage("--progress is auto, bar, lines or none")
        }
        if let f = reportFormat, ReportWriter.Format(rawValue: f) == nil {
            throw SendFailure.usage("--report-format is csv or jsonl")
        }
        if reportFormat != nil && report == nil { throw SendFailure.usage("--report-format needs --report FILE") }
    }
}
