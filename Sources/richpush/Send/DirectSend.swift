import ArgumentParser
import Foundation
import NIOPosix
import RichPushAPNs
import RichPushCore
import RichPushFCM
import RichPushSandbox
import RichPushServer
import RichPushTransport

/// A send straight to APNs or FCM (or the sandbox's emulators) from this process.
struct DirectSend {
    let command: SendCommand
    let message: PushMessage
    var apns: APNsTargetSender?
    var fcm: FCMTargetSender?
    var webPush: WebPushTargetSender?
    /// The subscriptions given, in their token form.
    var subscriptions: [String] = []
    /// Shuts the clients down.
    var clients: [@Sendable () async -> Void] = []

    /// Checks the message and the options, preflights the media, and sets up the clients.
    static func prepare(_ command: SendCommand, message json: JSONValue) async throws -> DirectSend {
        let output = command.output
        try output.checked()
        if command.webPush.given { try command.webPush.checked() }
        let sandboxMode = command.sandbox != nil
        let report = MessageValidator(
            options: .init(allowInsecureMedia: output.allowHTTP || sandboxMode, requireTargets: false)
        ).validate(json: json)
        for issue in report.issues { printError(issue.description) }
        if !report.isValid && !output.force {
            throw SendFailure.invalid(
                "\(report.errors.count) error(s) in \(command.message): nothing sent (--force sends anyway)"
            )
        }
        var (m, _) = PushMessage.read(json)
        if !output.noPreflight && !m.media.isEmpty {
            try await preflight(
                &m,
                allowAll: sandboxMode,
                allowHTTP: output.allowHTTP || sandboxMode,
                force: output.force
            )
        }
        var send = DirectSend(command: command, message: m)
        try await send.setUpClients()
        return send
    }

    /// The server's media check, without a server: each URL fetched under the address policy and judged by
    /// Apple's and Android's rules. Errors stop the send (unless forced); warnings are printed.
    static func preflight(_ m: inout PushMessage, allowAll: Bool, allowHTTP: Bool, force: Bool) async throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("richpush-send-\(getpid())")
        defer { try? FileManager.default.removeItem(at: scratch) }
        let fetcher = try SafeFetcher(policy: AddressPolicy(allowAll: allowAll), limits: .init(allowHTTP: allowHTTP))
        let service = MediaService(store: try MediaStore(directory: scratch), fetcher: fetcher, publicBase: "")
        let (errors, warnings) = await service.checkMedia(&m, onFailure: .reject, rehost: .never)
        for w in warnings { printError(w.description) }
        for e in errors { printError(e.description) }
        if !errors.isEmpty && !force {
            throw SendFailure.invalid(
                "the media preflight refused \(errors.count) media item(s): nothing sent (--force sends anyway, --no-preflight skips the check)"
            )
        }
    }

    mutating func setUpClients() async throws {
        let o = command.output
        // One event loop carries every connection: a sender's work is small per request, and more threads than
        // that only trade places with the task pool on a small machine.
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        var trust: TLSTrust = .system
        if let ca = o.caFile { trust = .certificateAuthority(pem: try readText(ca, option: "--ca-file")) }
        if let dir = command.sandbox {
            try setUpSandbox(dir, group: group)
        } else if command.apns.given {
            try setUpAPNs(group: group, trust: trust)
        } else if let file = command.fcm.serviceAccount {
            try setUpFCM(file, group: group, trust: trust)
        }
        if command.webPush.given {
            try setUpWebPush(trust: trust, sandbox: command.sandbox != nil)
        }
        if fcm != nil, message.chart != nil, message.chartImageURL == nil {
            printError(
                "warning: chart: Android shows no chart from a direct send (no server hosts its PNG): send through --server, or give chart_image_url"
            )
        }
    }

    /// The sandbox's emulators, from the summary and credentials a running `richpush sandbox` wrote in `dir`.
    mutating func setUpSandbox(_ dir: String, group: MultiThreadedEventLoopGroup) throws {
        let o = command.output
        let folder = URL(fileURLWithPath: dir, isDirectory: true)
        let summaryFile = folder.appendingPathComponent(Sandbox.summaryFile)
        guard let data = FileManager.default.contents(atPath: summaryFile.path),
            let summary = try? JSONValue.parse(data)
        else {
            throw SendFailure.usage(
                "no running sandbox in \(dir) (no \(Sandbox.summaryFile)): start `richpush sandbox --dir \(dir)` first"
            )
        }
        let creds: SandboxCredentials
        do { creds = try SandboxCredentials.read(from: folder) } catch {
            throw SendFailure.usage("--sandbox \(dir): \(error)")
        }
        let caTrust = TLSTrust.certificateAuthority(pem: creds.caCertificatePEM)
        guard let apnsPort = summary["apns"]?["port"]?.intValue, (1...65535).contains(apnsPort),
            let fcmURL = summary["fcm"]?["url"]?.stringValue
        else {
            throw SendFailure.usage("\(summaryFile.path) does not name the emulators' ports (1 to 65535)")
        }
        let fcmEndpoint = try Endpoint(url: fcmURL, option: "the sandbox's FCM URL")
        let key = try APNsSigningKey(p8: creds.apnsKeyPEM, keyID: creds.apnsKeyID, teamID: creds.apnsTeamID)
        let apnsClient = makeAPNsClient(
            .custom(host: "127.0.0.1", port: Int(apnsPort)),
            .token(key),
            trust: caTrust,
            group: group
        )
        apns = APNsTargetSender(
            client: apnsClient,
            message: message,
            bundleID: command.apns.bundleID ?? "com.example.app"
        )
        let account = try ServiceAccount(contentsOf: folder.appendingPathComponent("service-account.json"))
        let fcmClient = makeFCMClient(
            account,
            .custom(host: fcmEndpoint.host, port: fcmEndpoint.port),
            trust: caTrust,
            group: group
        )
        fcm = FCMTargetSender(
            client: fcmClient,
            renderer: FCMRenderer(projectID: account.projectID, chartImageURL: message.chartImageURL),
            message: message
        )
        clients = [
            { await apnsClient.shutdown() }, { await fcmClient.shutdown() },
            { try? await group.shutdownGracefully() },
        ]
    }

    /// APNs with a signing key or a client certificate, at Apple's sandbox or production or a given address.
    mutating func setUpAPNs(group: MultiThreadedEventLoopGroup, trust: TLSTrust) throws {
        let o = command.output
        let a = command.apns
        guard let bundleID = a.bundleID, !bundleID.isEmpty else {
            throw SendFailure.usage("--bundle-id is required: APNs needs the app's bundle id (apns-topic)")
        }
        let authentication: APNsConfiguration.Authentication
        if let keyFile = a.key {
            guard a.certificate == nil else { throw SendFailure.usage("give --apns-key or --apns-cert, not both") }
            guard let keyID = a.keyID, let teamID = a.teamID else {
                throw SendFailure.usage("--apns-key needs --key-id and --team-id")
            }
            do {
                authentication = .token(
                    try APNsSigningKey(
                        p8: try readText(keyFile, option: "--apns-key"),
                        keyID: keyID,
                        teamID: teamID
                    )
                )
            } catch let f as SendFailure { throw f } catch {
                // The key's text is never printed: only that it is not a P-256 key in PEM.
                throw SendFailure.usage(
                    "--apns-key \(keyFile) is not a .p8 signing key (a P-256 private key in PEM)"
                )
            }
        } else {
            guard let certFile = a.certificate, let keyFile = a.certificateKey else {
                throw SendFailure.usage("--apns-cert needs --apns-cert-key")
            }
            authentication = .certificate(
                ClientIdentity(
                    certificateChainPEM: try readText(certFile, option: "--apns-cert"),
                    privateKeyPEM: try readText(keyFile, option: "--apns-cert-key")
                )
            )
        }
        let endpoint: APNsConfiguration.Endpoint
        if let url = a.url {
            let e = try Endpoint(url: url, option: "--apns-url")
            endpoint = .custom(host: e.host, port: e.port)
        } else {
            endpoint = a.production ? .production : .sandbox
        }
        let client = makeAPNsClient(endpoint, authentication, trust: trust, group: group)
        apns = APNsTargetSender(client: client, message: message, bundleID: bundleID)
        clients = [{ await client.shutdown() }, { try? await group.shutdownGracefully() }]
    }

    /// An APNs client with the command's connections and timeout (for each connection and each answer).
    func makeAPNsClient(
        _ endpoint: APNsConfiguration.Endpoint,
        _ authentication: APNsConfiguration.Authentication,
        trust: TLSTrust,
        group: MultiThreadedEventLoopGroup
    ) -> APNsClient {
        let o = command.output
        return APNsClient(
            configuration: .init(
                endpoint: endpoint,
                authentication: authentication,
                trust: trust,
                connections: o.connections,
                requestTimeout: o.timeout,
                connectTimeout: o.timeout
            ),
            eventLoopGroup: group
        )
    }

    /// An FCM client with the command's connections and timeout (for each connection and each answer).
    func makeFCMClient(
        _ account: ServiceAccount,
        _ endpoint: FCMConfiguration.Endpoint,
        trust: TLSTrust,
        group: MultiThreadedEventLoopGroup
    ) -> FCMClient {
        let o = command.output
        return FCMClient(
            configuration: .init(
                serviceAccount: account,
                endpoint: endpoint,
                trust: trust,
                connections: o.connections,
                requestTimeout: o.timeout,
                connectTimeout: o.timeout
            ),
            eventLoopGroup: group
        )
    }

    /// FCM with a service account, at Google or a given address.
    mutating func setUpFCM(_ file: String, group: MultiThreadedEventLoopGroup, trust: TLSTrust) throws {
        let o = command.output
        var account: ServiceAccount
        // The file's contents are never printed: its problem is named, not quoted.
        do {
            account = try ServiceAccount(json: Data(try readText(file, option: "--fcm-service-account").utf8))
        } catch let f as SendFailure { throw f } catch {
            throw SendFailure.usage("--fcm-service-account \(file): \(error)")
        }
        var endpoint: FCMConfiguration.Endpoint = .production
        if let url = command.fcm.url {
            let e = try Endpoint(url: url, option: "--fcm-url")
            endpoint = .custom(host: e.host, port: e.port)
        } else if !ServiceAccount.isGoogleTokenEndpoint(account.tokenURI) {
            // The signed assertion would go to whatever address the file names.
            throw SendFailure.usage(
                "--fcm-service-account \(file): its token_uri is not Google's token endpoint; not sending the key's assertion there"
            )
        }
        let client = makeFCMClient(account, endpoint, trust: trust, group: group)
        fcm = FCMTargetSender(
            client: client,
            renderer: FCMRenderer(projectID: account.projectID, chartImageURL: message.chartImageURL),
            message: message
        )
        clients = [{ await client.shutdown() }, { try? await group.shutdownGracefully() }]
    }

    /// The targets from the options, else from the message's own `targets`; nil when they come from a file.
    func listedTargets() throws -> [SendTarget]? {
        let t = command.targets
        let given = (t.token.isEmpty ? 0 : 1) + [t.tokens, t.topic, t.condition].compactMap { $0 }.count
        if given > 1 { throw SendFailure.usage("give one kind of target: --token, --tokens, --topic or --condition") }
        if t.column != nil && t.tokens == nil { throw SendFailure.usage("--column needs --tokens FILE") }
        if fcm == nil && (t.topic != nil || t.condition != nil) {
            throw SendFailure.usage("APNs sends to device tokens only: --topic and --condition are FCM's")
        }
        if let topic = t.topic {
            if let p = MessageValidator.fcmTopicProblem(topic) { throw SendFailure.usage("--topic: \(p.message)") }
            return [.topic(topic)]
        }
        if let condition = t.condition {
            if let p = MessageValidator.fcmConditionProblem(condition) {
                throw SendFailure.usage("--condition: \(p.message)")
            }
            return [.condition(condition)]
        }
        if !t.token.isEmpty { return t.token.map(SendTarget.token) + subscriptions.map(SendTarget.token) }
        if t.tokens != nil { return nil }
        if !subscriptions.isEmpty && apns == nil && fcm == nil { return subscriptions.map(SendTarget.token) }
        let m = message.targets
        var from: [SendTarget] = []
        if apns != nil { from += m.apnsTokens.map(SendTarget.token) }
        if fcm != nil {
            from += m.fcmTokens.map(SendTarget.token)
            if let topic = m.topic { from.append(.topic(topic)) }
            if let condition = m.condition { from.append(.condition(condition)) }
        }
        from += subscriptions.map(SendTarget.token)
        guard !from.isEmpty else {
            throw SendFailure.usage(
                "no targets: give --token, --tokens, --topic or --condition (or targets in the message)"
            )
        }
        return from
    }

    /// Sends to every target; returns the exit status.
    func run() async throws -> Int32 {
        let listed = try listedTargets()
        let session = try SendSession(output: command.output, printEach: listed != nil)
        var total = listed?.count
        var file: TokenFile?
        if let path = command.targets.tokens {
            total = try TokenFile.count(path: path, column: command.targets.column)
            guard total! > 0 else { throw SendFailure.usage("\(path) holds no tokens") }
            file = try TokenFile(path: path, column: command.targets.column)
        }
        var expiresAt: Date?
        if let e = message.expiration { expiresAt = Date(timeIntervalSince1970: TimeInterval(e)) }
        if let ttl = message.ttl { expiresAt = Date().addingTimeInterval(TimeInterval(ttl)) }
        var policy = RetryPolicy()
        policy.maxAttempts = command.output.maxAttempts
        let engine = BulkSend(
            concurrency: command.output.concurrency,
            retry: policy,
            expiresAt: expiresAt,
            route: { [self] in route($0) },
            stop: session.stop,
            record: { session.record($0) },
            retrying: { session.retrying(reason: $0, detail: $1, wait: $2) }
        )
        let signals = session.catchSignals()
        let progress = Task { await session.console.follow(session.tally, total: total, started: session.started) }
        var queue = listed?.makeIterator()
        var failure: Error?
        do {
            try await engine.run { try file?.next().map(SendTarget.token) ?? queue?.next() }
        } catch {
            // The file changed under the send (it was read through once before): what was sent is reported.
            failure = error
        }
        progress.cancel()
        _ = await progress.value
        signals.cancel()
        for shutdown in clients { await shutdown() }
        if let failure {
            session.close()
            throw failure
        }
        return session.finish(interrupted: session.stop.isSet)
    }

    /// Where a target goes, or why it cannot be sent.
    func route(_ target: SendTarget) -> Result<TargetSender, BulkSend.TargetProblem> {
        switch target {
        case .token(let t):
            if let webPush, t.contains("#") { return .success(webPush) }
            let problem = MessageValidator.apnsTokenProblem(t)
            if let apns, fcm == nil || problem == nil {
                if let problem { return .failure(.init(provider: "apns", reason: "bad-token", detail: problem)) }
                return .success(apns)
            }
            guard let fcm else {
                return .failure(.init(provider: "", reason: "no-provider", detail: "nothing set up to send to it"))
            }
            if let p = MessageValidator.fcmTokenProblem(t) {
                return .failure(.init(provider: "fcm", reason: "bad-token", detail: p))
            }
            return .success(fcm)
        case .topic, .condition:
            guard let fcm else {
                return .failure(
                    .init(provider: "apns", reason: "not-a-token", detail: "APNs sends to device tokens only")
                )
            }
            return .success(fcm)
        }
    }
}
